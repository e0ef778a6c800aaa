"""fc.backward's backward-data on plain W (issue 17): the plan that copies W's
tiles itself (fc_plans.plan_copying, one parallel region) against the paths
before it. A probe, not a benchmark: its numbers go to benchmarks/RESULTS.md
by hand.

    taskset -c 2,3 python -m benchmarks.probe_fc_copying --threads 2 [--load 2]

Per quick shape, in the same rotated rounds at --threads (report_sides;
time over "copy + plan" paired by round, > 1 slower): all of W's tiles
copied (to_blocks) then the plain plan, with the table's spec and with C
outer; the strips that fc.backward ran before (fourteenth session, fc21:
each strip's tiles copied, then its plan, C outer; recorded here, where that
rule took them); plan_copying with its chunk, twice and half it (909752b
also ran it on dy's tiles, to_blocks timed with it: dropped); the layer's
blocked plan on tiles made before (no copies: what the functional plans
lose to it); and the
whole fc.backward (its rule's path, and each path forced). --brief: fewer. --load N: N busy loops on this
process's cores while it times (other processes keeping the cores busy)."""
import argparse
import dataclasses
import os
import subprocess
import sys

import numpy as np

from benchmarks.common import machine, quick_shapes, report_sides, set_threads
from brgemm import plan as bplan
from brgemm.info import kernel_path
from brgemm.layouts import nblocks, to_blocks
from primitives import fc, fc_plans
from primitives._calls import reduction_calls

QUICK = ("square_1k", "square_1k_n1k", "square_4k")


def old_strip_width(g, threads):
    """fc.strip_width as it was (fca2b0e): strips of about 4 MiB of tiles a
    thread where the tiles come to 32 MiB a thread, else None."""
    column = g.Kb * g.bk * g.bc * 4
    if g.Cb * column < (32 << 20) * threads:
        return None
    blocks = max(-(-(4 << 20) * threads // column), -(-2 * threads // g.Nb))
    return blocks * g.bc if 2 * blocks <= g.Cb else None


def strip_plan(g, width):
    """The old strip's plan: dx's columns [c0, c0 + width) from the strip's
    tiles [ceil(width / bc)][Kb][bk][bc], tasks (c, n) with C outer."""
    rec = bplan.Recorder({"dy": "f32", "wt": "f32", "dx": "f32"}, spec="CN")
    ch = g.chunks[1]
    for j in range(nblocks(width, g.bc)):
        wc = min(g.bc, width - j * g.bc)
        for n in range(g.Nb):
            m = min(g.bn, g.N - n * g.bn)
            rec.at(0, (j, n))
            for r0 in range(0, g.Kb, ch):
                for rs, depth in reduction_calls(range(r0, min(r0 + ch, g.Kb)), g.Kb, g.K, g.bk):
                    blk = bplan.Block(m, wc, depth, lda=g.K, ldb=g.bc, ldc=g.C,
                                      beta=0.0 if rs[0] == 0 else 1.0)
                    rec.gemm(blk, "dy", [n * g.bn * g.K + r * g.bk for r in rs], "wt",
                             [(j * g.Kb + r) * g.bk * g.bc for r in rs], "dx",
                             n * g.bn * g.C + j * g.bc)
    return rec.finish()


def sides(N, C, K, threads, rng, brief=False):
    path = kernel_path("f32")
    g = fc.geometry(N, C, K, path=path)
    x, w, dy = (rng.standard_normal(s).astype(np.float32) for s in ((N, C), (K, C), (N, K)))
    ref = dy.astype(np.float64) @ w.astype(np.float64)
    dx = np.empty((N, C), np.float32)
    wt = np.empty((g.Cb, g.Kb, g.bk, g.bc), np.float32)
    out = {}

    def copy_then(p):
        def run():
            to_blocks(w, g.bk, g.bc, swap_grid=True, out=wt)
            p.run(dy=dy, wt=wt, dx=dx)
        return run
    out["copy + plan"] = copy_then(fc.plan(g, "bwd", plain=True))
    if not brief:
        gc = dataclasses.replace(g, specs=(g.specs[0], fc_plans.outputs_first(g.specs[1], "C"),
                                           g.specs[2]))
        out["copy + plan, C outer"] = copy_then(fc.plan(gc, "bwd", plain=True))
    width = old_strip_width(g, threads)
    if width:
        plans = [(c0, strip_plan(g, min(width, C - c0))) for c0 in range(0, C, width)]
        buf = np.empty((nblocks(width, g.bc), g.Kb, g.bk, g.bc), np.float32)
        flat = dx.reshape(-1)

        def strips():
            for c0, p in plans:
                wd = min(width, C - c0)
                tiles = buf[:nblocks(wd, g.bc)]
                to_blocks(w[:, c0:c0 + wd], g.bk, g.bc, swap_grid=True, out=tiles)
                p.run(dy=dy, dx=flat[c0:], wt=tiles)
        out[f"strips of {width // g.bc} blocks (before)"] = strips
    ch = fc_plans.copy_chunk(g)
    dyb = np.empty((g.Nb, g.Kb, g.bn, g.bk), np.float32)
    for label, chunk in (("", ch), (", chunk x2", 2 * ch), (", chunk / 2", ch // 2)):
        gv = dataclasses.replace(g, chunks=(g.chunks[0], chunk, g.chunks[2]))
        if chunk < 1 or label and fc_plans.copy_chunk(gv) == ch or brief and "x2" in label:
            continue
        p = fc_plans.plan_copying(gv)
        tiles = np.empty((g.Cb, fc_plans.copy_chunk(gv), g.bk, g.bc), np.float32)
        out[f"copying (chunk {fc_plans.copy_chunk(gv)}){label}"] = \
            lambda p=p, tiles=tiles: p.run(dy=dy, w=w, wt=tiles, dx=dx)
    dxb = np.empty((g.Nb, g.Cb, g.bn, g.bc), np.float32)
    to_blocks(w, g.bk, g.bc, swap_grid=True, out=wt)
    layer = fc.plan(g, "bwd")
    to_blocks(dy, g.bn, g.bk, out=dyb)
    for name, fn in out.items():  # each side's dx against float64 first
        dx[...] = np.nan
        fn()
        err = np.abs(dx - ref).max() / np.abs(ref).max()
        assert err < 1e-4, (name, err)
    out["the layer's blocked plan (no copies)"] = lambda: layer.run(dy=dyb, wt=wt, dx=dxb)
    if not brief:
        out["whole fc.backward (the rule: " + ("copying" if fc.copies_w(g, threads) else "copy")
            + ")"] = lambda: fc.backward(dy, x, w)
    for copying in (False, True):
        out[f"whole fc.backward, {'copying' if copying else 'one copy'}"] = whole(dy, x, w,
                                                                                copying)
    return g, out


def whole(dy, x, w, copying):
    """fc.backward with its backward-data path forced (copying or not): the
    path is decided on a call signature's first call, so each is made once
    under a config of its own (the defaults' values) with fc's rule
    constants set for that call."""
    saved = fc.COPY_TASKS, fc.COPY_MIN
    fc.COPY_TASKS, fc.COPY_MIN = (0, 0) if copying else (1 << 30, 1 << 62)
    cfg = {} if copying else {"fwd": {}}
    try:
        fc.backward(dy, x, w, config=cfg)
    finally:
        fc.COPY_TASKS, fc.COPY_MIN = saved
    return lambda: fc.backward(dy, x, w, config=cfg)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.probe_fc_copying", description=__doc__)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--load", type=int, default=0, help="busy loops on this process's cores")
    ap.add_argument("--all", action="store_true", help="every fc shape, not the quick ones")
    ap.add_argument("--shapes", help="names from fc_sizes (default: the quick ones)")
    ap.add_argument("--brief", action="store_true", help="fewer sides")
    args = ap.parse_args(argv)
    set_threads(args.threads, onednn=False)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(args.load)]
    try:
        print(f"fc backward-data probe, f32, {machine()}, path {kernel_path('f32')!r}, "
              f"{args.threads} threads, cores {sorted(os.sched_getaffinity(0))}, "
              f"{args.load} busy loops")
        rng = np.random.default_rng(0)
        names = args.shapes.split(",") if args.shapes else QUICK
        for (N, C, K), name in quick_shapes("fc_sizes", not args.all, names):
            g, fns = sides(N, C, K, args.threads, rng, args.brief)
            flops = {n: 2.0 * N * C * K for n in fns}
            report_sides(f"{name} N={N} C={C} K={K} (bn {g.bn} bc {g.bc} bk {g.bk}, bwd "
                         f"{g.specs[1]} chunk {g.chunks[1]})", fns, flops, args.reps,
                         "copy + plan")
    finally:
        for p in busy:
            p.kill()
            p.wait()


if __name__ == "__main__":
    main()
