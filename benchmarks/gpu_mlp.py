"""The fused MLP on the GPU against PyTorch, same run, same GPU (issue 18's GPU criteria).

    python -m benchmarks.gpu_mlp [--width 64] [--hidden 4] [--batch-log2 20 ...]
                                 [--compile-mode default] [--no-compile]

An MLP of `hidden` hidden layers of `width` (width in and out too: hidden + 1
linear layers, relu between them, none after the last), bf16:
  ours     fc.MLP(fused=True, backend="cuda") on PyTorch CUDA tensors (nothing copied)
  eager    the same MLP as torch.nn.Sequential (bf16 parameters)
  compile  that module under torch.compile (--compile-mode, default "default": the
           max-autotune modes compile for minutes)
Inference: y from x (torch under no_grad). Training step: forward, then
backward from a given dy: dx, every dW and db (torch: x requires grad too, so
both sides compute the same things). Each side is captured in a CUDA graph and
replayed (no Python or launch overhead on either side; where a capture fails,
timed call by call, and the output says so); time per call is the median of 5
batches of replays. FLOPs: 2 N sum(in * out) for inference, three
times that for a training step. Before timing, ours is checked against eager.
"""
import argparse
import statistics

import numpy as np
import torch

import brgemm
from benchmarks.gpu import graph_time
from brgemm.machine import device_name, unavailable_reason
from primitives import fc


def plain_time(fn, reps):
    """graph_time's numbers without a graph (each call launched from Python)."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / reps)
    med = statistics.median(times)
    return med, (max(times) - min(times)) / med


def timed(fn, reps, what):
    """graph_time, else (a capture that fails) plain_time, saying so."""
    try:
        return graph_time(fn, reps)
    except Exception as e:  # noqa: BLE001 (any capture failure: time it plainly)
        torch.cuda.synchronize()
        print(f"  ({what}: no CUDA graph, {type(e).__name__}; timed call by call)")
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


def run_one(width, hidden, N, compile_mode, reps):
    sizes = [width] * (hidden + 2)
    net = fc.MLP(sizes, activation="relu", dtype="bf16", backend="cuda", fused=True,
                 rng=np.random.default_rng(0))
    assert net.fused is not None, "the fused CUDA MLP did not take this shape"
    model = torch_mlp(net)
    x = torch.randn(N, width, device="cuda").bfloat16()
    xg = x.clone().requires_grad_(True)
    dy = torch.randn(N, width, device="cuda").bfloat16()
    flops = 2 * N * sum(a * b for a, b in zip(sizes[:-1], sizes[1:]))

    # correctness at this size, against eager
    y = net.forward(x)
    dx = net.backward(dy)
    ty = model(xg)
    ty.backward(dy)
    errs = {"y": rel(y, ty), "dx": rel(dx, xg.grad),
            "dW0": rel(net.layers[0].grad_weight, model[0].weight.grad.float()),
            f"dW{hidden}": rel(net.layers[-1].grad_weight, model[-1].weight.grad.float())}
    # let the graph go (its AccumulateGrad nodes would run on this stream, outside a capture)
    del ty
    model.zero_grad(set_to_none=True)
    xg.grad = None
    # (a few relu decisions differ between two bf16 computations: each moves a whole
    # gradient element, so gradients agree to a few percent in norm; tests/test_cuda_mlp.py
    # checks per element against float64)
    print("  ours vs eager (relative norm): " + ", ".join(f"{k} {v:.1e}" for k, v in errs.items()))
    assert max(errs.values()) < 0.2, errs

    def ours_inf():
        net.forward(x, train=False)

    def ours_train():
        net.forward(x)
        net.backward(dy)

    def eager_inf(m=model):
        with torch.no_grad():
            m(x)

    def eager_train(m=model):
        m(xg).backward(dy)

    sides = [("ours", ours_inf, ours_train), ("eager", eager_inf, eager_train)]
    if compile_mode:
        compiled = torch.compile(model, mode=compile_mode)
        for _ in range(2):  # compile both graphs outside any capture
            eager_inf(compiled)
            eager_train(compiled)
        torch.cuda.synchronize()
        sides.append(("compile", lambda: eager_inf(compiled), lambda: eager_train(compiled)))
    out = {}
    print(f"  {'':9}{'':>10}{'ms':>9}{'TFLOP/s':>9}{'Gsamples/s':>11}{'spread':>8}"
          f"{'ours is x faster':>18}")
    for what, k in (("inference", 1), ("training", 2)):
        for name, *fns in sides:
            ms, spread = timed(fns[k - 1], reps, f"{name} {what}")
            out[name, what] = ms
            f = flops * (3 if what == "training" else 1)
            print(f"  {what:<9}{name:>10}{ms:>9.3f}{f / ms / 1e9:>9.1f}{N / ms / 1e6:>11.2f}"
                  f"{spread:>8.2f}{ms / out['ours', what]:>18.2f}", flush=True)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_mlp", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--width", type=int, action="append")
    parser.add_argument("--hidden", type=int, default=4)
    parser.add_argument("--batch-log2", type=int, action="append")
    parser.add_argument("--compile-mode", default="default")
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args(argv)
    if "cuda" not in brgemm.backends():
        raise SystemExit(f"no CUDA backend here: {unavailable_reason('cuda')}")
    print(f"{device_name('cuda')}, torch {torch.__version__}; fused MLP, bf16, relu, "
          f"{args.hidden} hidden layers")
    for width in args.width or [64]:
        for b in args.batch_log2 or [20]:
            print(f"\nwidth {width}, batch 2^{b}")
            run_one(width, args.hidden, 1 << b, None if args.no_compile else args.compile_mode,
                    args.reps)


if __name__ == "__main__":
    main()
