"""Probe (issue 17): whether where the caller's arrays start on a 64-byte line
moves fc.forward's plans at many threads. NumPy starts large arrays 16 or 48
bytes past a line; a plain y (N x K) is then written by tasks whose tiles'
row segments (bk floats) share their end lines with the next output block's
task, on another thread: lines that bounce between cores. Per quick fc shape:
the layer's plan (blocked x, y), and the plan fc.forward takes here (its path
printed) with x and y on lines, y 16 bytes past a line (as fc.forward's
results come), and x too; W^T's tiles kept (the plain tiles plan) likewise.
Rotated rounds, paired ratios over the layer's plan.

    python -m benchmarks.probe_fc_align [--threads T] [--reps 9] [--shapes ...]"""
import argparse

import numpy as np

from benchmarks.common import quick_shapes, report_sides as report, set_threads
from brgemm.arrays import aligned_empty
from brgemm.info import kernel_path
from brgemm.layouts import to_blocks
from primitives import fc


def placed(a, past):
    """a copied into an array whose first element lies `past` bytes after a 64-byte line."""
    raw = aligned_empty((a.nbytes + 64,), np.uint8)
    out = raw[past:past + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int)
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--shapes", default="square_1k,square_1k_n1k,square_4k")
    args = parser.parse_args()
    threads = set_threads(args.threads, onednn=False)
    rng = np.random.default_rng(0)
    for (N, C, K), name in quick_shapes("fc_sizes", True, tuple(args.shapes.split(","))):
        lin = fc.Linear(C, K, rng=rng)
        g = lin.prepare(N)
        x = rng.standard_normal((N, C)).astype(np.float32)
        w, b = lin.weight, lin.bias
        xb = to_blocks(x, g.bn, g.bc)
        g2 = fc.geometry(N, C, K, path=kernel_path("f32"))  # fc.forward's route, f32
        tiles = fc.plan(g2, "fwd", "f32", has_bias=True, plain=True)
        if fc.reads_w(g2, "f32", "cpu", x, w, None):
            p, path = fc.plan_t(g2, has_bias=True), "t"
        elif fc.copies_wt(g2, threads):
            p, path = fc.plan_copying(g2, "fwd", has_bias=True), "copying"
        else:
            p, path = tiles, "tiles"
        wt = to_blocks(w, g2.bc, g2.bk, transpose=True, swap_grid=True)
        y0 = np.zeros((N, K), np.float32)
        xs = {0: placed(x, 0), 16: placed(x, 16)}
        ys = {0: placed(y0, 0), 16: placed(y0, 16)}
        scratch = {}
        if path == "copying":
            scratch["wt"] = aligned_empty((p.extent["wt"],), np.float32)
        elif path == "t":
            scratch = dict(xt=to_blocks(x, g2.bc, g2.bn, transpose=True),
                           yt=aligned_empty((g2.Kb, g2.Nb, g2.bk, g2.bn), np.float32))
        print(f"{name}: N {N} C {C} K {K}, fc.forward's path here: {path}", flush=True)

        def routed(xp, yp):
            if path == "t":
                return lambda: p.run(w=w, y=ys[yp], b=b, **scratch)
            if path == "copying":
                return lambda: p.run(x=xs[xp], w=w, y=ys[yp], b=b, **scratch)
            return lambda: p.run(x=xs[xp], w=wt, y=ys[yp], b=b)
        sides = {"layer plan": lambda: lin.forward_blocked(xb),
                 f"{path}, x y on lines": routed(0, 0),
                 f"{path}, y 16 B past": routed(0, 16),
                 f"{path}, x y 16 B past": routed(16, 16),
                 "tiles, x y on lines": lambda: tiles.run(x=xs[0], w=wt, y=ys[0], b=b),
                 "tiles, x y 16 B past": lambda: tiles.run(x=xs[16], w=wt, y=ys[16], b=b)}
        report(f"{name} forward, {threads} threads ({kernel_path('f32')})", sides,
               dict.fromkeys(sides, 2 * N * C * K), args.reps, "layer plan")


if __name__ == "__main__":
    main()
