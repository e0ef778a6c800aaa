"""Builds of the fused MLP's kernels against each other and torch.compile, in one
process (issue 18: the recompute backward's variants, the BWD_* macros of
kernels/cuda/mlp_fused.cu; benchmarks/device_mlp_variants.sh builds them).

    python -m benchmarks.gpu_mlp_variants NAME=FATBIN ... [--compile-mode MODE | --no-compile]
                                          [--rounds 7] [--reps 20]

The issue's main case (width 64, 4 hidden layers, batch 2^20, bf16, relu; the
sides of benchmarks.gpu_mlp): the training step (forward, then the recompute
backward to dx, every dW and db) and the backward alone, of ours with the
default module (brgemm/_mlp_cuda.fatbin, or BRGEMM_MLP_FATBIN) and with each
named fatbin. Each build is checked against eager PyTorch first, then every
side is captured in a CUDA graph, and rounds of replay batches alternate
between the sides (clock drift hits all alike); a side's time is the median
over rounds. Then torch.compile(mode) of the same module (default
max-autotune-no-cudagraphs, which compiles for a while) joins, and the rounds
run again with it. One summary line per variant after each phase ("variant
NAME: ..."): its step and backward against the default's and, in the second
phase, the step's speed-up over compile, which the issue wants at 1.5 or more.
"""
import argparse
import statistics

import numpy as np
import torch

import brgemm
from benchmarks.gpu import Graph, spread
from benchmarks.gpu_mlp import HIDDEN, check, torch_mlp
from brgemm import cuda_mlp
from brgemm.machine import device_name, unavailable_reason
from primitives import fc

WIDTH, BATCH = 64, 1 << 20
TARGET = 1.5  # the training step over torch.compile


def variant(text):
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=FATBIN, got {text!r}")
    return name, path


class Calls:
    """Graph's batch() for a function that a CUDA graph did not capture: called
    from Python (the output says so)."""

    def __init__(self, fn):
        self.fn = fn
        for _ in range(2):
            fn()

    def batch(self, outer):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(outer):
            self.fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / outer


def captured(fn, what):
    """Graph(fn, 1), else (a capture that fails) Calls(fn), saying so."""
    try:
        return Graph(fn, 1)
    except Exception as e:  # noqa: BLE001 (any capture failure: time it call by call)
        torch.cuda.synchronize()
        print(f"  ({what}: no CUDA graph, {type(e).__name__}: {str(e)[:120]}; timed call by call)")
        return Calls(fn)


def rounds_of(graphs, rounds, reps):
    """{side: (median ms over rounds, spread)}: every round replays each graph once."""
    times = {side: [] for side in graphs}
    for _ in range(rounds):
        for side, g in graphs.items():
            times[side].append(g.batch(reps))
    return {side: (statistics.median(t), spread(t)) for side, t in times.items()}


def summary(builds, t, flops, against=None):
    """One line per variant (and the default's first), from the rounds' times t."""
    base_step, base_bwd = t["default", "step"][0], t["default", "bwd"][0]
    for name in builds:
        step, s_spread = t[name, "step"]
        bwd = t[name, "bwd"][0]
        line = (f"variant {name}: step {step:.3f} ms ({flops / step / 1e9:.1f} TFLOP/s, spread "
                f"{s_spread:.2f}), default {base_step:.3f}: x{base_step / step:.3f}; backward "
                f"{bwd:.3f} ms, default {base_bwd:.3f}: x{base_bwd / bwd:.3f}")
        if against is not None:
            mode, ms = against
            line += (f"; compile:{mode} {ms:.3f} ms: x{ms / step:.2f} "
                     f"({'meets' if ms / step >= TARGET else 'below'} {TARGET})")
        print(line, flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_mlp_variants",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("variants", nargs="*", type=variant, metavar="NAME=FATBIN")
    parser.add_argument("--compile-mode", default="max-autotune-no-cudagraphs")
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args(argv)
    if "cuda" not in brgemm.backends():
        raise SystemExit(f"no CUDA backend here: {unavailable_reason('cuda')}")
    sizes = [WIDTH] * (HIDDEN + 2)
    net = fc.MLP(sizes, activation="relu", dtype="bf16", backend="cuda", fused=True,
                 rng=np.random.default_rng(0))
    assert net.fused is not None and net.fused.shape.bwd_warps is not None, \
        "the recompute backward does not take the main case"
    net.fused.backward_mode = "recompute"
    model = torch_mlp(net)
    x = torch.randn(BATCH, WIDTH, device="cuda").bfloat16()
    xg = x.clone().requires_grad_(True)
    dy = torch.randn(BATCH, WIDTH, device="cuda").bfloat16()
    flops = 3 * 2 * BATCH * sum(a * b for a, b in zip(sizes[:-1], sizes[1:]))
    print(f"{device_name('cuda')}, torch {torch.__version__}; width {WIDTH}, {HIDDEN} hidden "
          f"layers, batch 2^{BATCH.bit_length() - 1}, bf16, training step (recompute)")

    def step():
        net.forward(x)
        net.backward(dy)

    builds, graphs = {}, {}
    for name, path in [("default", None)] + args.variants:  # each build's graphs hold its functions
        cuda_mlp.use_fatbin(path)
        print(f"  {name}: {path or 'default module'}")
        try:
            check(net, model, x, dy, ["recompute"], HIDDEN)
        except AssertionError as e:
            print(f"variant {name}: differs from eager PyTorch, not timed: {e}", flush=True)
            continue
        builds[name] = path
        graphs[name, "step"] = captured(step, f"{name} step")
        net.forward(x)
        graphs[name, "bwd"] = captured(lambda: net.backward(dy), f"{name} backward")
    cuda_mlp.use_fatbin(None)
    if "default" not in builds:
        raise SystemExit("the default build differs from eager PyTorch")
    summary(builds, rounds_of(graphs, args.rounds, args.reps), flops)
    if args.no_compile:
        return
    compiled = torch.compile(model, mode=args.compile_mode)

    def theirs():
        compiled(xg).backward(dy)

    for _ in range(2):
        theirs()
    torch.cuda.synchronize()
    graphs["compile", "step"] = captured(theirs, f"compile:{args.compile_mode}")
    t = rounds_of(graphs, args.rounds, args.reps)
    print(f"compile:{args.compile_mode} step {t['compile', 'step'][0]:.3f} ms "
          f"(spread {t['compile', 'step'][1]:.2f})")
    summary(builds, t, flops, (args.compile_mode, t["compile", "step"][0]))


if __name__ == "__main__":
    main()
