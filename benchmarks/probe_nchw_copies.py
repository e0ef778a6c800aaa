"""Probe (issue 17): the blocked conv path's NCHW layout copies alone, on the
benchmark's quick layers at N = threads, each timed interleaved with the
others of its layer in one process (rotated rounds, medians, paired ratios
over the x copy):

    python -m benchmarks.probe_nchw_copies [--threads T] [--reps 15]

Sides per layer: x into its padded channel blocks (conv.block_x), dy into
its bordered blocks (block_y, backward-data's dyp), the blocked y back to
NCHW (unblock_y) and the blocked dx back (unblock_x); and np.copyto of as
many bytes as x's copy writes, the memory's own speed. The copies of this
file are what brgemm/layouts.py's image_to_blocks and blocks_to_image run
(kernels/cpu/layout_image.c). Speeds only: tests/test_layouts_image.py
checks results."""
import argparse

import numpy as np

from benchmarks.common import quick_shapes, report_sides as report, set_threads
from brgemm.info import kernel_path
from benchmarks.conv import QUICK
from primitives import conv


def sides_of(C, K, H, W, R, S, st, pd, N):
    rng = np.random.default_rng(0)
    g = conv.geometry(N, C, K, H, W, R, S, (st, st), (pd, pd), path=kernel_path("f32"))
    x = rng.standard_normal((N, C, H, W), dtype=np.float32)
    dy = rng.standard_normal((N, K, g.P, g.Q), dtype=np.float32)
    xb = np.empty((N, g.Cb, g.Hp, g.Wp, g.bc), np.float32)
    dyp = np.empty((N, g.Kb, g.Pp, g.Qp, g.bk), np.float32)
    yb = rng.standard_normal((N, g.Kb, g.P, g.Q, g.bk), dtype=np.float32)
    y, dx = np.empty_like(dy), np.empty_like(x)
    src, dst = np.empty(xb.size, np.float32), np.empty(xb.size, np.float32)
    return {"x copy": lambda: conv.block_x(x, g, "f32", out=xb),
            "dy copy (bordered)": lambda: conv.block_y(dy, g, "f32", bordered=True, out=dyp),
            "y back to NCHW": lambda: conv.unblock_y(yb, g, np.float32, out=y),
            "dx back to NCHW": lambda: conv.unblock_x(xb, g, np.float32, out=dx),
            "np.copyto, x's bytes": lambda: np.copyto(dst, src)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int)
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    threads = set_threads(args.threads, onednn=False)
    for (C, K, H, W, R, S, st, pd), name in quick_shapes("resnet50_conv", True,
                                                         QUICK):
        report(f"{name}, N {threads}", sides_of(C, K, H, W, R, S, st, pd, threads), {},
               args.reps, "x copy")


if __name__ == "__main__":
    main()
