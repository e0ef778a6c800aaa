"""The fused MLP on the GPU against PyTorch, same run, same GPU (issue 18's GPU criteria).

    python -m benchmarks.gpu_mlp [--what main|widths|batch] [--compile-mode MODE ...]
                                 [--no-compile] [--reps 20] [--png FILE] [--json FILE]

  main    width 64, 4 hidden layers, batch 2^20 (the issue's case)
  widths  widths 16, 32 and 128 (4 hidden layers), batch 2^20
  batch   width 64, 4 hidden layers, batch 2^14 .. 2^22 (--png: throughput against batch)

An MLP of 4 hidden layers of `width` (width in and out too: 5 linear layers,
relu between them, none after the last), bf16:
  ours       fc.MLP(fused=True, backend="cuda") on PyTorch CUDA tensors (nothing
             copied); training both ways: "stored" (the forward keeps the
             activations, backward-data fused, dW as batch-reduce GEMM plans) and
             "recompute" (backward recomputes the forward on chip) where it fits
  eager      the same MLP as torch.nn.Sequential (bf16 parameters)
  compile:M  that module under torch.compile(mode=M) (--compile-mode, repeatable;
             the max-autotune modes compile for minutes)
Inference: y from x (torch under no_grad). Training step: forward, then
backward from a given dy: dx, every dW and db (torch: x requires grad too, so
both sides compute the same things; no optimizer step on either side). Each
side is captured in a CUDA graph and replayed (where a capture fails, timed
call by call, and the output says so); time per call is the median of 5
batches of replays. FLOPs: 2 N sum(in * out) for inference, three times that
for a training step. Before timing, ours is checked against eager. Every table
goes to stdout; --json writes the rows, --png plots samples/s against batch.
"""
import argparse
import json

import numpy as np
import torch

import brgemm
from benchmarks.gpu import graph_time, plain_time
from brgemm.machine import device_name, unavailable_reason
from primitives import fc

HIDDEN = 4


def timed(fn, reps, what):
    """graph_time, else (a capture that fails) plain_time, saying so."""
    try:
        return graph_time(fn, reps)
    except Exception as e:  # noqa: BLE001 (any capture failure: time it plainly)
        torch.cuda.synchronize()
        print(f"  ({what}: no CUDA graph, {type(e).__name__}: {str(e)[:120]}; timed call by call)")
        return plain_time(fn, reps)


def torch_mlp(net):
    """torch.nn.Sequential with our net's weights, in bf16 on the GPU."""
    mods = []
    for layer in net.layers:
        lin = torch.nn.Linear(layer.C, layer.K)
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(layer.weight))
            lin.bias.copy_(torch.from_numpy(layer.bias))
        mods.append(lin)
        if layer.activation not in (None, "none"):
            mods.append({"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh,
                         "sigmoid": torch.nn.Sigmoid}[layer.activation]())
    return torch.nn.Sequential(*mods).cuda().bfloat16()


def rel(a, b):
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm())


def check(net, model, x, dy, modes, hidden):
    """Ours (each training mode) against eager at this size, relative norms."""
    xg = x.clone().requires_grad_(True)
    ty = model(xg)
    ty.backward(dy)
    for mode in modes:
        net.fused.backward_mode = mode
        y = net.forward(x)
        dx = net.backward(dy)
        errs = {"y": rel(y, ty), "dx": rel(dx, xg.grad),
                "dW0": rel(net.layers[0].grad_weight, model[0].weight.grad.float()),
                f"dW{hidden}": rel(net.layers[-1].grad_weight, model[-1].weight.grad.float()),
                f"db{hidden}": rel(net.layers[-1].grad_bias, model[-1].bias.grad.float())}
        # (a few relu decisions differ between two bf16 computations: each moves a whole
        # gradient element, so gradients agree to a few percent in norm;
        # tests/test_cuda_mlp.py checks per element against float64)
        print(f"  ours ({mode}) vs eager (relative norm): "
              + ", ".join(f"{k} {v:.1e}" for k, v in errs.items()))
        assert max(errs.values()) < 0.2, errs
    del ty  # its graph's AccumulateGrad nodes would run outside a capture
    model.zero_grad(set_to_none=True)


def breakdown(net, x, dy, modes, reps):
    """Where a training step's time goes, each part replayed alone: forward and
    backward in each mode, and (stored) the weight-gradient plan with 1, 2 and
    4 tasks per multiprocessor (the rest of stored's backward is the fused
    backward-data kernel and the small reduce)."""
    from brgemm import cuda_mlp
    from brgemm.cuda_mlp import DeviceArray
    from primitives import mlp_cuda_grads
    f = net.fused
    print("  breakdown (each part alone, ms):")
    for mode in sorted(modes, key=lambda m: m == "stored"):  # stored last: the plan reads its state
        f.backward_mode = mode
        fwd = timed(lambda: net.forward(x), reps, "forward")[0]
        net.forward(x)
        bwd = timed(lambda: net.backward(dy), reps, "backward")[0]
        print(f"    {mode:10} forward (train) {fwd:.3f}, backward {bwd:.3f}")
    st = f.state()
    L, W, T = f.shape.L, f.shape.W, cuda_mlp.dzt_rows()
    dzt = f.dzt  # the last stored backward's dz^T tiles
    for per_sm in (1, 2, 4):
        plan, parts = mlp_cuda_grads.plan(L, W, st["pad"], T, cuda_mlp.sm_count(), st["reads_x"],
                                          per_sm)
        t = {"dzt": dzt, "dwp": DeviceArray((parts * L * W * W,), np.float32)}
        if "h" in plan.tensors:
            t["h"] = st["h"][1]
        if st["reads_x"]:
            t["x"] = st["x"]
        ms = timed(lambda: plan.run(backend="cuda", **t), reps, "plan")[0]
        print(f"    stored     weight-gradient plan, {per_sm} tasks per SM ({parts} partials "
              f"per layer): {ms:.3f}", flush=True)


def run_one(width, N, compile_modes, reps, out, parts=False):
    """Time every side at one size; print the table; append rows to out."""
    sizes = [width] * (HIDDEN + 2)
    net = fc.MLP(sizes, activation="relu", dtype="bf16", backend="cuda", fused=True,
                 rng=np.random.default_rng(0))
    assert net.fused is not None, "the fused CUDA MLP did not take this shape"
    default = net.fused.backward_mode
    used = "stored" if net.fused.stored() else "recompute"  # what the default runs here
    modes = [used] + [m for m in ("stored", "recompute")
                      if m != used and (m == "stored" or net.fused.shape.bwd_warps is not None)]
    model = torch_mlp(net)
    x = torch.randn(N, width, device="cuda").bfloat16()
    xg = x.clone().requires_grad_(True)
    dy = torch.randn(N, width, device="cuda").bfloat16()
    flops = 2 * N * sum(a * b for a, b in zip(sizes[:-1], sizes[1:]))
    check(net, model, x, dy, modes, HIDDEN)
    if parts:
        breakdown(net, x, dy, modes, reps)

    def ours_train(mode):
        def step():
            net.fused.backward_mode = mode
            net.forward(x)
            net.backward(dy)
        return step

    def eager_inf(m=model):
        with torch.no_grad():
            m(x)

    def eager_train(m=model):
        m(xg).backward(dy)

    sides = [("ours", lambda: net.forward(x, train=False), None)]
    sides += [(f"ours {m}", None, ours_train(m)) for m in modes]
    sides += [("eager", eager_inf, eager_train)]
    base = {"inference": "ours", "training": f"ours {used}"}
    times = {}

    def measure(name, inf, train):
        for what, fn in (("inference", inf), ("training", train)):
            if fn is None:
                continue
            ms, spread = timed(fn, reps, f"{name} {what}")
            times[name, what] = ms
            f = flops * (3 if what == "training" else 1)
            ratio = ms / times[base[what], what] if (base[what], what) in times else float("nan")
            print(f"  {what:<9}{name:>34}{ms:>9.3f}{f / ms / 1e9:>9.1f}{N / ms / 1e6:>11.2f}"
                  f"{spread:>8.2f}{ratio:>18.2f}", flush=True)
            out.append(dict(width=width, batch=N, what=what, side=name, ms=ms,
                            tflops=f / ms / 1e9, samples=N / ms * 1e3, spread=spread))

    print(f"  {'':9}{'':>34}{'ms':>9}{'TFLOP/s':>9}{'Gsamples/s':>11}{'spread':>8}"
          f"{'ours is x faster':>18}")
    for side in sides:
        measure(*side)
    for mode in compile_modes:  # each compiled (outside any capture) and timed in turn
        compiled = torch.compile(model, mode=mode)
        for _ in range(2):
            eager_inf(compiled)
            eager_train(compiled)
        torch.cuda.synchronize()
        measure(f"compile:{mode}", lambda c=compiled: eager_inf(c),
                lambda c=compiled: eager_train(c))
    net.fused.backward_mode = default


def plot(rows, path):
    """Samples/s against batch, inference and training, one line per side."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, what in zip(axes, ("inference", "training")):
        sides = sorted({r["side"] for r in rows if r["what"] == what})
        for side in sides:
            pts = sorted((r["batch"], r["samples"]) for r in rows
                         if r["what"] == what and r["side"] == side)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=side)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch (rows)")
        ax.set_ylabel("samples/s")
        ax.set_title(f"{what}: width 64, {HIDDEN} hidden layers, bf16")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"fused MLP on {device_name('cuda')}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_mlp", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--what", choices=["main", "widths", "batch"], default="main")
    parser.add_argument("--compile-mode", action="append")
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--breakdown", action="store_true",
                        help="main: also time the parts of a training step alone")
    parser.add_argument("--png")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if "cuda" not in brgemm.backends():
        raise SystemExit(f"no CUDA backend here: {unavailable_reason('cuda')}")
    compile_modes = [] if args.no_compile else (args.compile_mode or ["default"])
    print(f"{device_name('cuda')}, torch {torch.__version__}; fused MLP, bf16, relu, "
          f"{HIDDEN} hidden layers")
    cases = {"main": [(64, 20)], "widths": [(16, 20), (32, 20), (128, 20)],
             "batch": [(64, b) for b in range(14, 23)]}[args.what]
    rows = []
    for width, b in cases:
        print(f"\nwidth {width}, batch 2^{b}")
        run_one(width, 1 << b, compile_modes, args.reps, rows,
                parts=args.breakdown and args.what == "main")
        torch.cuda.empty_cache()
        if args.json:  # after every case: a part stopped by its timeout keeps what it measured
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
    if args.png:
        plot(rows, args.png)


if __name__ == "__main__":
    main()
