"""fc.forward reading W in place (issue 17): fc_plans.plan_t (W as the
kernel's broadcast operand, x^T's tiles copied first, y^T's tiles stored
transposed into y by the plan) under other blockings than the layer's,
against the path fc.forward takes (the rule's) and the layer's plan on
blocked tensors. A probe, not a benchmark: its numbers go to
benchmarks/RESULTS.md by hand.

    taskset -c 2,3 python -m benchmarks.probe_fc_forward_t --threads 2

Per shape, in the same rotated rounds (report_sides; time over the layer's
plan, paired by round, > 1 slower): the layer's plan; fc.forward's
copying plan (plan_copying: W^T's tiles copied by the plan); plan_t with
each of --blockings (bn,bc,bk,spec), timed with x^T's copy. Every side's
y is checked against float64 first."""
import argparse
import dataclasses

import numpy as np

from benchmarks.common import machine, quick_shapes, report_sides, set_threads
from brgemm.info import kernel_path
from brgemm.layouts import to_blocks
from primitives import fc, fc_plans

QUICK = ("square_1k", "square_1k_n1k", "square_4k")
BLOCKINGS = "128,128,64,KNc 64,128,64,KNc 64,64,64,KNc 64,256,64,KNc 64,128,128,KNc " \
            "64,128,64,NKc 32,128,64,KNc"


def _check(name, y, ref):
    err = np.abs(y - ref).max() / np.abs(ref).max()
    assert err < 1e-4, (name, err)


def sides(N, C, K, blockings, rng):
    path = kernel_path("f32")
    g = fc.geometry(N, C, K, path=path)
    x, w = (rng.standard_normal(s).astype(np.float32) for s in ((N, C), (K, C)))
    ref = x.astype(np.float64) @ w.T.astype(np.float64)
    y = np.empty((N, K), np.float32)
    wt = to_blocks(w, g.bc, g.bk, transpose=True, swap_grid=True)
    xb, yb = to_blocks(x, g.bn, g.bc), np.empty((g.Nb, g.Kb, g.bn, g.bk), np.float32)
    layer = fc.plan(g, "fwd")
    out = {"layer": lambda: layer.run(x=xb, w=wt, y=yb)}
    pc = fc_plans.plan_copying(g, "fwd")
    tiles = np.empty(pc.extent["wt"], np.float32)
    out["copying (W^T's tiles by the plan)"] = lambda: pc.run(x=x, w=w, wt=tiles, y=y)
    for bn, bc, bk, spec in blockings:
        gt = fc.geometry(N, C, K, blocks=(bn, bc, bk), path=path)
        gt = dataclasses.replace(gt, specs=(spec,) + gt.specs[1:])
        pt = fc_plans.plan_t(gt)
        xt = np.empty((gt.Cb, gt.Nb, gt.bc, gt.bn), np.float32)
        yt = np.empty(pt.extent["yt"], np.float32)

        def run(pt=pt, gt=gt, xt=xt, yt=yt):
            to_blocks(x, gt.bc, gt.bn, transpose=True, out=xt)
            pt.run(w=w, xt=xt, yt=yt, y=y)
        out[f"t: bn {gt.bn} bc {gt.bc} bk {gt.bk} {spec}"] = run
    for name, fn in out.items():
        if name != "layer":
            y[...] = np.nan
            fn()
            _check(name, y, ref)
    return g, out


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.probe_fc_forward_t",
                                 description=__doc__)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--reps", type=int, default=11)
    ap.add_argument("--shapes", help="names from fc_sizes (default: the quick ones)")
    ap.add_argument("--blockings", default=BLOCKINGS,
                    help="plan_t's blockings: space-separated bn,bc,bk,spec")
    args = ap.parse_args(argv)
    threads = set_threads(args.threads, onednn=False)
    blockings = [(int(a), int(b), int(c), s) for a, b, c, s in
                 (item.split(",") for item in args.blockings.split())]
    names = tuple(args.shapes.split(",")) if args.shapes else QUICK
    print(f"fc forward reading W in place, f32, {machine()}, {threads} threads")
    rng = np.random.default_rng()
    for (N, C, K), name in quick_shapes("fc_sizes", True, names):
        g, out = sides(N, C, K, blockings, rng)
        report_sides(f"{name} N={N} C={C} K={K} (layer: bn {g.bn} bc {g.bc} bk {g.bk})",
                     out, {}, args.reps, "layer")


if __name__ == "__main__":
    main()
