"""python -m benchmarks.calls [--reps R] [--calls N]

What a functional call costs besides its kernels: each functional form
(fc, conv, lstm; forward and backward; f32 and bf16) on shapes so small that
the kernel work is negligible, at one thread (set before the extension
loads). Per call: the least over R rounds (the cases interleaved) of the
mean of N calls in the calling thread's CPU time (time.thread_time: another
process's time slices left out; the least is what the code costs, the rest
is the machine's noise)."""
import argparse
import os

os.environ["OMP_NUM_THREADS"] = "1"  # before the extension (and OpenMP) loads

import time  # noqa: E402

import numpy as np  # noqa: E402

from benchmarks.common import machine  # noqa: E402
from brgemm import bfloat16  # noqa: E402
from primitives import conv, fc, lstm  # noqa: E402


def cases(dtype):
    """name -> a call of one functional form on tiny arrays of `dtype`'s inputs."""
    rng = np.random.default_rng(0)
    ty = np.float32 if dtype == "f32" else bfloat16

    def a(*shape):
        return rng.standard_normal(shape).astype(ty)
    x, w, b, dy = a(8, 16), a(16, 16), a(16), a(8, 16)
    x1, w1 = a(1, 64), a(64, 64)  # reads W in place (fc.reads_w, f32)
    xc, wc, dyc = a(1, 16, 4, 4), a(16, 16, 3, 3), a(1, 16, 4, 4)
    wp = a(16, 16, 1, 1)
    xs, ws = a(1, 16, 2, 2), a(64, 16, 3, 3)  # the im2col forward (conv.columns, f32)
    T, N, C, K = 1, 2, 16, 16
    xl, h0, c0 = a(T, N, C), a(N, K), a(N, K)
    w_ih, w_hh, bl, dyl = a(4 * K, C), a(4 * K, K), a(4 * K), a(T, N, K)
    kw = dict(dtype=dtype)
    out = {
        "fc.forward 8x16x16": lambda: fc.forward(x, w, b, **kw),
        "fc.forward 1x64x64": lambda: fc.forward(x1, w1, **kw),
        "fc.backward 8x16x16": lambda: fc.backward(dy, x, w, **kw),
        "conv.forward 3x3": lambda: conv.forward(xc, wc, padding=1, **kw),
        "conv.forward 1x1": lambda: conv.forward(xc, wp, **kw),
        "conv.forward 3x3 im2col": lambda: conv.forward(xs, ws, padding=1, **kw),
        "conv.backward 3x3": lambda: conv.backward(dyc, xc, wc, padding=1, **kw),
        "conv.backward 1x1": lambda: conv.backward(dyc, xc, wp, **kw),
        "lstm.forward": lambda: lstm.forward(xl, h0, c0, w_ih, w_hh, bl, **kw),
        "lstm.backward": lambda: lstm.backward(dyl, h0, c0, xl, h0, c0, w_ih, w_hh, bl, **kw),
    }
    return out


def per_call(fns, calls, reps):
    """name -> least seconds per call of fns[name]() over reps interleaved rounds."""
    for fn in fns.values():  # warm: plans recorded, kernels compiled, buffers made
        for _ in range(calls):
            fn()
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(reps):
        for name, fn in fns.items():
            t0 = time.thread_time()
            for _ in range(calls):
                fn()
            best[name] = min(best[name], (time.thread_time() - t0) / calls)
    return best


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.calls", description=__doc__)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--dtype", choices=["f32", "bf16"], action="append")
    args = parser.parse_args(argv)
    print(f"functional calls on tiny shapes, 1 thread, {machine()}: us per call (thread "
          f"CPU time), least of {args.reps} rounds of {args.calls}")
    for dtype in args.dtype or ["f32", "bf16"]:
        for name, t in per_call(cases(dtype), args.calls, args.reps).items():
            print(f"{dtype:<5} {name:<26} {t * 1e6:8.1f}")


if __name__ == "__main__":
    main()
