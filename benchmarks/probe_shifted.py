"""Probe (issue 17): conv's shifted forward (conv_in_place.shifted) part by
part against the path without it, on res2a_branch2b and res3a_branch2b,
all sides of a layer timed interleaved in one process (rotated rounds,
medians, paired ratios over the layer's plan):

    python -m benchmarks.probe_shifted [--threads T] [--reps 7] [--only NAME]

Sides: the layer's plan (blocked x, w, y); the NCHW-storing plan and the x
copy (the path without the shifted plan); the shifted plan alone on NumPy's
x and y (16 bytes past a line), on 64-byte aligned ones, on 2 MiB pages,
with pixel blocks of 64, with each call split by tap row; the unwrap pass;
both whole calls; and kernel calls alone (one call repeated on a task's own
buffer: the shifted call's offsets, the same with every tap's offset on a
whole line, the layer's call). Then the backward's parts against the
layer's plans. Speeds only: no result is checked here."""
import argparse
import mmap
import statistics

import numpy as np

from benchmarks.common import interleaved_samples, paired_ratio, set_threads
from brgemm import plan as bplan
from brgemm.arrays import aligned_empty
from brgemm.conv_unwrap import conv_unwrap
from brgemm.info import kernel_path
from primitives import conv
from primitives.conv_plans import update_inputs, update_output

LAYERS = {"res2a_branch2b": (64, 64, 56, 56), "res3a_branch2b": (128, 128, 28, 28)}
_keep = []  # mappings the huge-page arrays view


def huge_empty(n):
    """n floats on 2 MiB pages where the kernel grants them (madvise)."""
    size = n * 4 + (2 << 20)
    m = mmap.mmap(-1, size + (2 << 20), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        m.madvise(mmap.MADV_HUGEPAGE)
    _keep.append(m)
    raw = np.frombuffer(m, np.uint8)
    start = -raw.ctypes.data % (2 << 20)
    a = raw[start:start + n * 4].view(np.float32)
    a[:] = 0
    return a


def variant(g, bp, split=False):
    """conv_forward.shifted_nest's calls (timing only), each call's 9 taps
    split into one call per tap row with split."""
    H, W, HW, Cb, Kb, bk, bc = g.H, g.W, g.H * g.W, g.Cb, g.Kb, g.bk, g.bc
    rec = bplan.Recorder({"w": "f32", "x": "f32", "y": "f32"})

    def calls(n, kb, groups):
        first = True
        for taps, j0, width in groups:
            parts = [[t for t in taps if t[0] == r] for r in range(3)] if split else [taps]
            for c in range(Cb):
                for part in parts:
                    if width < 1 or not part:
                        continue
                    rec.gemm(bplan.Block(bk, width, bc, lda=bc, ldb=HW, ldc=HW, dtype="f32",
                                         beta=0.0 if first else 1.0),
                             "w", [((c * Kb + kb) * 9 + r * 3 + s) * bk * bc for r, s in part],
                             "x", [(n * g.C + c * bc) * HW + j0 + (r - 1) * W + s - 1
                                   for r, s in part], "y", (n * g.K + kb * bk) * HW + j0)
                    first = False

    taps = [(r, s) for r in range(3) for s in range(3)]
    lo, hi = W, (H - 1) * W
    for n in range(g.N):
        for kb in range(Kb):
            for row, rows in ((0, (1, 2)), (H - 1, (0, 1))):
                rec.at(0, (n, kb, row * W))
                j = row * W
                calls(n, kb, [([(r, 1) for r in rows], j, W), ([(r, 0) for r in rows], j + 1, W - 1),
                              ([(r, 2) for r in rows], j, W - 1)])
            for j0 in range(lo, hi, bp):
                j1 = min(hi, j0 + bp)
                rec.at(0, (n, kb, j0))
                a, b = int(j0 == lo), int(j1 == hi)
                calls(n, kb, [([t for t in taps if t[1] == 1], j0, j1 - j0),
                              ([t for t in taps if t[1] == 0], j0 + a, j1 - j0 - a),
                              ([t for t in taps if t[1] == 2], j0, j1 - j0 - b)]
                      if a or b else [(taps, j0, j1 - j0)])
    return rec.finish()


def kernel_plan(g, threads, kind, reps=16):
    """One kernel call repeated `reps` times per task, 4 tasks a thread, each
    task on its own x, w and y. kind "shifted": the shifted plan's flat call
    (bk x 112 pixels, 9 taps at (r - 1) W + s - 1); "lines": the same with
    each tap (r - 1) 64 + (s - 1) 16 pixels on (whole lines, x 64-aligned);
    "layer": the layer plan's call (bq pixels x bk, bc deep, 5 taps)."""
    HW, W, bk, bc, bp = g.H * g.W, g.W, g.bk, g.bc, 112
    tasks = 4 * threads
    rec = bplan.Recorder({"w": "f32", "x": "f32", "y": "f32"})
    if kind == "layer":
        xs, ws, ys = 3 * (g.bq + 2) * bc, 9 * bc * bk, g.bq * bk
        blk = bplan.Block(g.bq, bk, bc, lda=bc, ldb=bk, ldc=bk, dtype="f32", beta=1.0)
        xo = [r * (g.bq + 2) * bc + s * bc for r in range(3) for s in range(2)][:5]
        wo = [t * bc * bk for t in range(5)]
    else:
        step = (W, 1) if kind == "shifted" else (64, 16)
        xs, ws, ys = bc * HW, 9 * bk * bc, bk * HW
        blk = bplan.Block(bk, bp, bc, lda=bc, ldb=HW, ldc=HW, dtype="f32", beta=1.0)
        j0 = W + bp if kind == "shifted" else 4 * 64  # as the plan's second flat block
        xo = [j0 + (r - 1) * step[0] + (s - 1) * step[1] for r in range(3) for s in range(3)]
        wo = [t * bk * bc for t in range(9)]
    for t in range(tasks):
        rec.at(0, (t,))
        for _ in range(reps):
            rec.gemm(blk, "w", [t * ws + o for o in wo], "x", [t * xs + o for o in xo],
                     "y", t * ys + (0 if kind == "layer" else j0))
    p = rec.finish()
    arrays = {n: aligned_empty((p.extent[n],), np.float32) for n in ("w", "x", "y")}
    for a in arrays.values():
        a[:] = 0
    return p, arrays


def forward_sides(name, N, threads):
    C, K, H, W = LAYERS[name]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = rng.standard_normal((K, C, 3, 3)).astype(np.float32)
    on, off = {"fwd": {"shifted": True}}, {"fwd": {"shifted": False}}
    on32 = {"fwd": {"shifted": True, "pointwise_bp": 32}}
    g = conv.geometry(N, C, K, H, W, 3, 3, (1, 1), (1, 1), config=on, path=kernel_path("f32"))
    go = conv.geometry(N, C, K, H, W, 3, 3, (1, 1), (1, 1), config=off, path=kernel_path("f32"))
    print(f"\n{name} N={N}: bc {g.bc} bk {g.bk} bq {g.bq} call_kb {g.call_kb} w_reuse {g.w_reuse}"
          f" pointwise_bp {g.pointwise_bp}; x at {x.ctypes.data % 64} bytes past a line", flush=True)
    xb, wb, wt = conv.block_x(x, go, "f32"), conv.block_w(w, go, "f32"), conv.block_w(w, g, "f32", True)
    yb = aligned_empty((N, go.Kb, go.P, go.Q, go.bk), np.float32)
    pf, pn = conv.plan(go, "fwd", "f32"), conv.nchw_plan(go, "f32", False)
    slots, y = aligned_empty((pn.extent["y"],), np.float32), np.empty((N, K, H, W), np.float32)
    ps = conv.shifted_plan(g, g.pointwise_bp)
    xa, ya = aligned_empty(x.shape, np.float32), aligned_empty(y.shape, np.float32)
    xa[...] = x
    xh, yh = huge_empty(x.size), huge_empty(y.size)
    xh[:] = x.reshape(-1)
    p64, p32, pr = variant(g, 64), variant(g, 32), variant(g, g.pointwise_bp, split=True)
    g32 = conv.geometry(N, C, K, H, W, 3, 3, (1, 1), (1, 1), config={"fwd": {"shifted": True, "bc": 32}},
                        path=kernel_path("f32"))
    pc32, wt32 = variant(g32, g.pointwise_bp), conv.block_w(w, g32, "f32", True)
    kern = {k: kernel_plan(g, threads, k) for k in ("shifted", "lines", "layer")}
    sides = {
        "layer plan": lambda: pf.run(x=xb, w=wb, y=yb),
        "nchw plan": lambda: pn.run(x=xb, w=wb, y=slots, out=y),
        "x copy": lambda: conv.block_x(x, go, "f32", out=xb),
        "forward, shifted off": lambda: conv.forward(x, w, 1, 1, config=off),
        "forward, shifted on": lambda: conv.forward(x, w, 1, 1, config=on),
        "forward, shifted on, bp 32": lambda: conv.forward(x, w, 1, 1, config=on32),
        "shifted plan": lambda: ps.run(w=wt, x=x, y=y),
        "shifted plan, x y aligned": lambda: ps.run(w=wt, x=xa, y=ya),
        "shifted plan, 2M pages": lambda: ps.run(w=wt, x=xh, y=yh),
        "shifted plan bp 64": lambda: p64.run(w=wt, x=x, y=y),
        "shifted plan bp 32": lambda: p32.run(w=wt, x=x, y=y),
        "shifted plan, calls by r": lambda: pr.run(w=wt, x=x, y=y),
        "shifted plan bc 32": lambda: pc32.run(w=wt32, x=x, y=y),
        "unwrap": lambda: conv_unwrap(y, x, w),
        "kernel: shifted call": lambda: kern["shifted"][0].run(**kern["shifted"][1]),
        "kernel: taps on lines": lambda: kern["lines"][0].run(**kern["lines"][1]),
        "kernel: layer call": lambda: kern["layer"][0].run(**kern["layer"][1]),
    }
    flops = {f"kernel: {k} call" if k != "lines" else "kernel: taps on lines": p.flops
             for k, (p, _) in kern.items()}
    flops.update({k: pf.flops for k in sides if "plan" in k or "forward" in k})
    return sides, flops


def backward_sides(name, N):
    C, K, H, W = LAYERS[name]
    rng = np.random.default_rng(1)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = rng.standard_normal((K, C, 3, 3)).astype(np.float32)
    dy = rng.standard_normal((N, K, H, W)).astype(np.float32)
    g = conv.geometry(N, C, K, H, W, 3, 3, (1, 1), (1, 1), path=kernel_path("f32"))
    dyp, wt = conv.block_y(dy, g, "f32", bordered=True), conv.block_w(w, g, "f32", True)
    dxb = aligned_empty((N, g.Cb, g.Hp, g.Wp, g.bc), np.float32)
    pb, pu, pn, px = conv.plan(g, "bwd", "f32"), conv.plan(g, "upd", "f32"), \
        conv.nchw_dx_plan(g, "f32", False), conv.x_plan(g)
    ui, dw = update_inputs(x, dy, g, "f32"), update_output(g)
    slots, dx = aligned_empty((pn.extent["dx"],), np.float32), np.empty_like(x)
    dwt = aligned_empty((g.splits, g.Kb, g.Cb, 3, 3, g.bc, g.bk), np.float32)
    dwp = np.empty_like(w)
    sides = {
        "layer bwd-data plan": lambda: pb.run(dyp=dyp, wt=wt, dx=dxb),
        "layer update plan": lambda: pu.run(dw=dw, **ui),
        "dy copy (dyp)": lambda: conv.block_y(dy, g, "f32", bordered=True, out=dyp),
        "wt copy": lambda: conv.block_w(w, g, "f32", True, out=wt),
        "nchw dx plan": lambda: pn.run(dyp=dyp, wt=wt, dx=slots, out=dx),
        "update plan, x in place": lambda: px.run(dw=dwt, x=x, dyp=dyp),
        "dw unblock": lambda: conv.unblock_dw(dwt, g, np.float32, out=dwp, c_rows=True),
        "backward whole": lambda: conv.backward(dy, x, w, 1, 1),
    }
    return sides, {}


def report(title, sides, flops, reps, base):
    names = list(sides)
    samples = interleaved_samples([sides[n] for n in names], reps=reps, rotate=True)
    by = dict(zip(names, samples))
    print(f"{title}: {reps} rotated rounds; ms (median), over '{base}' (paired), spread")
    for n in names:
        s = by[n]
        med = statistics.median(s)
        rate = f"  {flops[n] / med / 1e9:8.1f} GFLOP/s" if n in flops else ""
        print(f"  {n:<30}{1e3 * med:9.3f}{paired_ratio(s, by[base]):8.3f}"
              f"{100 * (max(s) - min(s)) / med:6.0f}%{rate}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--only", choices=tuple(LAYERS))
    parser.add_argument("--skip-backward", action="store_true")
    args = parser.parse_args()
    threads = set_threads(args.threads, onednn=False)
    try:
        print("transparent huge pages:", open("/sys/kernel/mm/transparent_hugepage/enabled").read().strip())
    except OSError:
        pass
    for name in ([args.only] if args.only else LAYERS):
        sides, flops = forward_sides(name, threads, threads)
        report(f"{name} forward, {threads} threads", sides, flops, args.reps, "layer plan")
        if not args.skip_backward:
            sides, flops = backward_sides(name, threads)
            report(f"{name} backward, {threads} threads", sides, flops, args.reps,
                   "layer bwd-data plan")


if __name__ == "__main__":
    main()
