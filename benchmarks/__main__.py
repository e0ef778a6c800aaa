"""python -m benchmarks <all|kernel|plan|conv|fc|lstm|layouts|mlp|modules|sycl|train> [--set NAME] [--quick]
    [--dtype f32|bf16] [--threads N] [--pass fwd|bwd|upd] [--vs onednn,torch] [--epochs N]

Each primitive against oneDNN itself (benchmarks/onednn), same run, same threads;
sycl: the SYCL backend on the SYCL device here against our CPU backend (informative);
train: a digits CNN and a character LSTM trained with primitives.nn and with torch.nn;
layouts: the functional forms' layout copies alone, at 1, 2 and --threads (default all) threads.
conv, fc, lstm --vs torch: the functional forms against PyTorch's calls and our layer path.
modules: primitives.nn's Conv2d, Linear and LSTM against torch.nn's (inference, SGD steps).
mlp: the fused MLP against our unfused one and PyTorch's (samples/s, TFLOP/s, a plot);
mlp --device cuda: on the GPU against PyTorch eager and torch.compile (benchmarks.gpu_mlp's
main case, widths and batch sweep, with its plot)."""
import argparse

from benchmarks import conv, fc, kernel, layouts, lstm, mlp, modules, plan, sycl, train


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["all", "kernel", "plan", "conv", "fc", "lstm", "layouts",
                                             "mlp", "modules", "sycl", "train"],
                        help="what to benchmark")
    parser.add_argument("--set", dest="shape_set",
                        help="shape set: a file of benchmarks/shapes/ (or resnet50, gnmt, fc)")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, shorter timings")
    parser.add_argument("--dtype", choices=["f32", "bf16"], action="append",
                        help="data type (repeatable; default f32, and both for kernel and "
                             "all's kernel part)")
    parser.add_argument("--threads", type=int, help="threads for both sides (default: all cores)")
    parser.add_argument("--vs", default="onednn", help="baselines, comma-separated: onednn,torch "
                        "(conv, fc, lstm and all)")
    parser.add_argument("--pass", dest="passes", choices=["fwd", "bwd", "upd"], action="append",
                        help="pass (repeatable; default all; conv and fc)")
    parser.add_argument("--epochs", type=int, help="train: epochs of each model")
    parser.add_argument("--compile", action="store_true",
                        help="train: both sides' models under torch.compile")
    parser.add_argument("--max-batch-log2", type=int, help="mlp: largest batch, as a power of 2")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="mlp: where the MLPs run (cuda: benchmarks.gpu_mlp's parts)")
    args = parser.parse_args(argv)
    if args.what == "all":  # the README's main job: each part against oneDNN
        kernel.run(quick=args.quick, dtypes=args.dtype or kernel.DTYPES)
        for dtype in args.dtype or ["f32"]:
            print()
            conv.run(quick=args.quick, dtype=dtype, threads=args.threads, vs=args.vs.split(","))
            print()
            fc.run(quick=args.quick, dtype=dtype, threads=args.threads, vs=args.vs.split(","))
            print()
            lstm.run(quick=args.quick, dtype=dtype, threads=args.threads, vs=args.vs.split(","))
    elif args.what == "layouts":
        from benchmarks import CORES
        layouts.run(sorted({1, 2, args.threads or len(CORES)}))
    elif args.what == "kernel":
        kernel.run(quick=args.quick, dtypes=args.dtype or kernel.DTYPES)
    elif args.what == "mlp" and args.device == "cuda":
        import pathlib
        from benchmarks import gpu_mlp  # imported here: it needs torch with CUDA
        png = pathlib.Path(__file__).resolve().parent / "results" / "mlp-gpu-batch.png"
        png.parent.mkdir(exist_ok=True)
        for part in ("main", "widths", "batch"):
            gpu_mlp.main(["--what", part] + (["--png", str(png)] if part == "batch" else []))
    elif args.what == "mlp":
        mlp.run(quick=args.quick, dtypes=args.dtype or ["f32"], threads=args.threads,
                max_batch_log2=args.max_batch_log2)
    elif args.what == "modules":
        for dtype in args.dtype or ["f32"]:
            modules.run(quick=args.quick, dtype=dtype, threads=args.threads)
    elif args.what == "train":
        train.run(quick=args.quick, epochs=args.epochs, threads=args.threads,
                  compiled=args.compile)
    elif args.what == "sycl":
        sycl.run(quick=args.quick)
    elif args.what == "plan":
        plan.run(quick=args.quick, threads=args.threads or 2)
    elif args.what == "conv":
        for dtype in args.dtype or ["f32"]:
            conv.run(quick=args.quick, dtype=dtype, threads=args.threads,
                     passes=args.passes or ("fwd", "bwd", "upd"),
                     shape_set=args.shape_set or "resnet50_conv", vs=args.vs.split(","))
    elif args.what == "lstm":
        for dtype in args.dtype or ["f32"]:
            lstm.run(quick=args.quick, dtype=dtype, threads=args.threads,
                     shape_set=args.shape_set or "gnmt_lstm", vs=args.vs.split(","))
    elif args.what == "fc":
        for dtype in args.dtype or ["f32"]:
            fc.run(quick=args.quick, dtype=dtype, threads=args.threads,
                   passes=args.passes or ("fwd", "bwd", "upd"), vs=args.vs.split(","),
                   shape_set=args.shape_set or "fc_sizes")


if __name__ == "__main__":
    main()
