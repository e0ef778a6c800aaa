"""fc.forward on plain W (issue 17): the plan that copies W^T's tiles itself,
transposed from W's rows by the task that reads them (fc_plans.plan_copying
with "fwd", copy_bt ops, one parallel region), against all of W^T's tiles
copied first, then the plain plan (the path before). A probe, not a
benchmark: its numbers go to benchmarks/RESULTS.md by hand.

    taskset -c 2,3 python -m benchmarks.probe_fc_forward_copying --threads 2

Per shape, in the same rotated rounds at --threads (report_sides; time over
"copy + plan" paired by round, > 1 slower): to_blocks of W^T then the plain
plan; plan_copying with its chunk, twice and half it; the layer's blocked
plan on tiles made before (no copies: what the functional plans lose to
it); PyTorch's F.linear; the whole fc.forward with each path forced (reads_w:
W in place as the broadcast operand, fc_forward.forward_t)."""
import argparse
import dataclasses
import os

import numpy as np

from benchmarks.common import machine, quick_shapes, report_sides, set_threads
from brgemm.info import kernel_path
from brgemm.layouts import to_blocks
from primitives import fc, fc_plans

QUICK = ("square_1k", "square_1k_n1k", "square_4k")


def sides(N, C, K, rng, brief=False):
    g = fc.geometry(N, C, K, path=kernel_path("f32"))
    x, w = (rng.standard_normal(s).astype(np.float32) for s in ((N, C), (K, C)))
    ref = x.astype(np.float64) @ w.T.astype(np.float64)
    y = np.empty((N, K), np.float32)
    wt = np.empty((g.Kb, g.Cb, g.bc, g.bk), np.float32)
    plain = fc.plan(g, "fwd", plain=True)

    def copy_then():
        to_blocks(w, g.bc, g.bk, transpose=True, swap_grid=True, out=wt)
        plain.run(x=x, w=wt, y=y)
    out = {"copy + plan": copy_then}
    ch = fc_plans.copy_chunk(g, "fwd")
    for label, chunk in (("", ch), (", chunk x2", 2 * ch), (", chunk / 2", ch // 2)):
        gv = dataclasses.replace(g, chunks=(chunk,) + g.chunks[1:])
        if chunk < 1 or label and fc_plans.copy_chunk(gv, "fwd") == ch or brief and label:
            continue
        p = fc_plans.plan_copying(gv, "fwd")
        tiles = np.empty(p.extent["wt"], np.float32)
        out[f"copying (chunk {fc_plans.copy_chunk(gv, 'fwd')}){label}"] = \
            lambda p=p, tiles=tiles: p.run(x=x, w=w, wt=tiles, y=y)
    for name, fn in out.items():  # each side's y against float64 first
        y[...] = np.nan
        fn()
        err = np.abs(y - ref).max() / np.abs(ref).max()
        assert err < 1e-4, (name, err)
    xb = to_blocks(x, g.bn, g.bc)
    yb = np.empty((g.Nb, g.Kb, g.bn, g.bk), np.float32)
    layer = fc.plan(g, "fwd")
    to_blocks(w, g.bc, g.bk, transpose=True, swap_grid=True, out=wt)
    out["the layer's blocked plan (no copies)"] = lambda: layer.run(x=xb, w=wt, y=yb)
    try:
        import torch
        xt, wt_ = torch.from_numpy(x), torch.from_numpy(w)
        out["torch F.linear"] = lambda: torch.nn.functional.linear(xt, wt_)
    except ImportError:
        pass
    for path in ("one copy", "copying", "reads_w"):
        out[f"whole fc.forward, {path}"] = whole(x, w, path)
    return g, out


def whole(x, w, path):
    """fc.forward with its path forced ("copying", "one copy" or "reads_w":
    W read in place, fc_forward.forward_t): the path is decided on a call
    signature's first call, so each is made once under a config of its own
    (the defaults' values) with fc.copies_wt and fc.small_batch replaced for
    that call."""
    saved = fc.copies_wt, fc.small_batch
    fc.copies_wt = lambda g, threads: path == "copying"
    fc.small_batch = lambda g: path == "reads_w"
    cfg = {"copying": {}, "one copy": {"fwd": {}}, "reads_w": {"upd": {}}}[path]
    try:
        got = fc.forward(x, w, config=cfg)
    finally:
        fc.copies_wt, fc.small_batch = saved
    ref = x.astype(np.float64) @ w.T.astype(np.float64)
    assert np.abs(got - ref).max() / np.abs(ref).max() < 1e-4, path
    return lambda: fc.forward(x, w, config=cfg)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.probe_fc_forward_copying",
                                 description=__doc__)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--shapes", help="names from fc_sizes (default: the quick ones)")
    ap.add_argument("--brief", action="store_true", help="fewer sides")
    args = ap.parse_args(argv)
    set_threads(args.threads, onednn=False)
    print(f"fc forward probe, f32, {machine()}, path {kernel_path('f32')!r}, "
          f"{args.threads} threads, cores {sorted(os.sched_getaffinity(0))}")
    rng = np.random.default_rng(0)
    names = args.shapes.split(",") if args.shapes else QUICK
    for (N, C, K), name in quick_shapes("fc_sizes", True, names):
        g, fns = sides(N, C, K, rng, args.brief)
        flops = {n: 2.0 * N * C * K for n in fns}
        report_sides(f"{name} N={N} C={C} K={K} (bn {g.bn} bc {g.bc} bk {g.bk}, fwd "
                     f"{g.specs[0]} chunk {g.chunks[0]})", fns, flops, args.reps, "copy + plan")


if __name__ == "__main__":
    main()
