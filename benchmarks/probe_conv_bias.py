"""Probe (issue 17): what conv.forward's bias (b=) costs on the quick conv
shapes (N = threads), its plans adding b to each tile in their epilogue,
against the forward without a bias and against the bias added in a pass of
its own after the call (what primitives.nn.Conv2d did before b= existed),
and PyTorch's F.conv2d with its bias beside. All sides of a shape timed
interleaved in one process (rotated rounds, medians, paired ratios over the
forward without a bias):

    python -m benchmarks.probe_conv_bias [--threads T] [--reps 9]

Speeds only: no result is checked (tests/test_conv_bias.py does)."""
import argparse

import numpy as np

from benchmarks.common import quick_shapes, report_sides, set_threads


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--reps", type=int, default=9)
    a = ap.parse_args()
    threads = set_threads(a.threads, onednn=False)
    from benchmarks.conv import QUICK
    from primitives import conv
    try:
        import torch
        torch.set_num_threads(threads)
    except ImportError:
        torch = None
    rng = np.random.default_rng(0)
    for (C, K, H, W, R, S, st, pd), name in quick_shapes("resnet50_conv", True, QUICK):
        x = rng.standard_normal((threads, C, H, W)).astype(np.float32)
        w = (rng.standard_normal((K, C, R, S)) / np.sqrt(C * R * S)).astype(np.float32)
        b = rng.standard_normal(K).astype(np.float32)
        rows = b.reshape(1, -1, 1, 1)

        def after():
            y = conv.forward(x, w, st, pd)
            y += rows
            return y
        sides = {"no bias": lambda: conv.forward(x, w, st, pd),
                 "b= (in the plans)": lambda: conv.forward(x, w, st, pd, b=b),
                 "a pass after the call": after}
        if torch is not None:
            tx, tw, tb = (torch.from_numpy(a) for a in (x, w, b))
            sides["F.conv2d with its bias"] = lambda: torch.nn.functional.conv2d(
                tx, tw, tb, stride=st, padding=pd)
        report_sides(f"{name}, N = {threads}, {threads} threads", sides, {}, a.reps, "no bias")


if __name__ == "__main__":
    main()
