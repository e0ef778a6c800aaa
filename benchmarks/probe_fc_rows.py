"""Probe (issue 17): fc's functional backward-data and forward plans, which
read and write the caller's plain matrices (rows C or K floats apart: 4 KiB
for the 1k shapes), against the layer's blocked plans, on the 1k shapes and
on the same shapes with C = K = 1088 (rows 4352 bytes apart: not a multiple
of 4 KiB). Per shape, timed interleaved in one process (rotated rounds,
medians, paired ratios over the layer's blocked backward-data plan):

  - bwd layer: the layer's blocked backward-data plan (dy, dx, W tiles blocked);
  - bwd copying: fc.backward's plan where fc.copies_w takes it (W in place,
    its tiles copied by the tasks that read them: fc_plans.plan_copying);
  - bwd plain: the plain plan on W's tiles copied before (the path before
    plan_copying), the copy left out;
  - fwd layer / fwd plain: the forward's blocked plan and fc.forward's plain
    plan (outputs first), its W^T copy left out.

If the plain plans fall behind only where rows are 4 KiB apart, the
caller's layout (L1 sets, 4K aliasing) is what costs.

    python -m benchmarks.probe_fc_rows [--threads T] [--reps 9]"""
import argparse

import numpy as np

from benchmarks.common import report_sides, set_threads
from brgemm.info import kernel_path
from brgemm.layouts import to_blocks
from primitives import fc
from primitives.fc_plans import copy_chunk, geometry, plan, plan_copying

SHAPES = ((256, 1024, 1024), (256, 1088, 1088), (1024, 1024, 1024), (1024, 1088, 1088))


def sides(N, C, K, rng):
    g = geometry(N, C, K, path=kernel_path("f32"))
    x = rng.standard_normal((N, C)).astype(np.float32)
    dy = rng.standard_normal((N, K)).astype(np.float32)
    w = (rng.standard_normal((K, C)) / np.sqrt(C)).astype(np.float32)
    dx = np.empty((N, C), np.float32)
    y = np.empty((N, K), np.float32)
    wt = to_blocks(w, g.bk, g.bc, swap_grid=True)                  # [Cb][Kb][bk][bc]
    wT = to_blocks(w, g.bc, g.bk, transpose=True, swap_grid=True)  # [Kb][Cb][bc][bk]
    xb, dyb = to_blocks(x, g.bn, g.bc), to_blocks(dy, g.bn, g.bk)
    dxb, yb = np.empty_like(xb), np.empty_like(dyb)
    pb, pf = plan(g, "bwd"), plan(g, "fwd")
    pbp, pfp = plan(g, "bwd", plain=True), plan(g, "fwd", plain=True)
    pc = plan_copying(g)
    buf = np.empty((g.Cb, copy_chunk(g), g.bk, g.bc), np.float32)
    flops = 2.0 * N * C * K
    out = {"bwd layer": lambda: pb.run(dy=dyb, wt=wt, dx=dxb),
           "bwd copying": lambda: pc.run(dy=dy, w=w, wt=buf, dx=dx),
           "bwd plain": lambda: pbp.run(dy=dy, wt=wt, dx=dx),
           "fwd layer": lambda: pf.run(x=xb, w=wT, y=yb),
           "fwd plain": lambda: pfp.run(x=x, w=wT, y=y)}
    head = (f"N={N} C={C} K={K} (bn {g.bn} bc {g.bc} bk {g.bk}; specs {g.specs}; "
            f"copies_w at these threads: {fc.copies_w(g, _threads)})")
    return head, out, {k: flops for k in out}


_threads = 2


def main():
    global _threads
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=9)
    a = ap.parse_args()
    _threads = a.threads
    set_threads(a.threads, onednn=False)
    rng = np.random.default_rng(0)
    for N, C, K in SHAPES:
        head, s, flops = sides(N, C, K, rng)
        report_sides(f"{head}, {a.threads} threads", s, flops, a.reps, "bwd layer")


if __name__ == "__main__":
    main()
