"""Probe (issue 17): conv's shifted forward (conv_in_place.shifted) part by
part against the path without it, on res2a_branch2b and res3a_branch2b,
all sides of a part timed interleaved in one process (rotated rounds,
medians, paired ratios over the part's first side):

    python -m benchmarks.probe_shifted [--threads T] [--reps 7] [--only NAME]
        [--parts kernels,forward,steps,backward]

kernels: one kernel call repeated on a task's own buffers (the shifted
call at pixel blocks of 16, 32 and 112 with its taps' offsets, the same
with every tap on whole lines, the layer's call). forward: the layer's
plan, the NCHW-storing plan and the x copy (the path without the shifted
plan), the shifted plan alone (NumPy's x and y, 64-byte aligned ones,
pixel blocks of 32 and 16), the unwrap pass, whole calls. steps: the
forward without the shifted plan by hand, at bq 28 and 56. backward:
conv.backward's steps by hand, in its order, with the update first, with
the update's shares one image each. Speeds only: no result is checked."""
import argparse

import numpy as np

from benchmarks.common import report_sides as report, set_threads
from brgemm import plan as bplan
from brgemm.arrays import aligned_empty
from brgemm.conv_unwrap import conv_unwrap
from brgemm.info import kernel_path
from primitives import conv
from primitives.conv_plans import update_inputs, update_output

LAYERS = {"res2a_branch2b": (64, 64, 56, 56), "res3a_branch2b": (128, 128, 28, 28)}
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


def kernel_plan(g, threads, kind, bp=112, reps=16):
    """One kernel call repeated `reps` times per task, 4 tasks a thread, each
    task on its own x, w and y. kind "shifted": the shifted plan's flat call
    (bk x bp pixels, 9 taps at (r - 1) W + s - 1); "lines": the same with
    each tap (r - 1) 64 + (s - 1) 16 pixels on (whole lines, x 64-aligned);
    "layer": the layer plan's call (bq pixels x bk, bc deep, 5 taps)."""
    HW, W, bk, bc = g.H * g.W, g.W, g.bk, g.bc
    tasks = 4 * threads
    reps = reps * 112 // bp
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
        j0 = W + 112 if kind == "shifted" else 4 * 64  # as the plan's second flat block
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


def kernel_sides(name, threads):
    """The kernel's rate by call shape: the shifted call at pixel blocks of
    16 to 112, taps as the plan has them and on whole lines, and the layer's."""
    C, K, H, W = LAYERS[name]
    g = conv.geometry(threads, C, K, H, W, 3, 3, (1, 1), (1, 1), config={"fwd": {"shifted": True}},
                      path=kernel_path("f32"))
    kern = {"layer call": kernel_plan(g, threads, "layer")}
    for bp in (16, 32, 112):
        for kind in ("shifted", "lines"):
            kern[f"{kind} bp {bp}"] = kernel_plan(g, threads, kind, bp)
    sides = {k: (lambda p=p, a=a: p.run(**a)) for k, (p, a) in kern.items()}
    return sides, {k: p.flops for k, (p, _) in kern.items()}


def forward_sides(name, N, threads):
    C, K, H, W = LAYERS[name]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = rng.standard_normal((K, C, 3, 3)).astype(np.float32)
    on, off = {"fwd": {"shifted": True}}, {"fwd": {"shifted": False}}
    on32 = {"fwd": {"shifted": True, "pointwise_bp": 32}}
    on16 = {"fwd": {"shifted": True, "pointwise_bp": 16}}
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
    p32, p16 = variant(g, 32), variant(g, 16)
    sides = {
        "layer plan": lambda: pf.run(x=xb, w=wb, y=yb),
        "nchw plan": lambda: pn.run(x=xb, w=wb, y=slots, out=y),
        "x copy": lambda: conv.block_x(x, go, "f32", out=xb),
        "forward, shifted off": lambda: conv.forward(x, w, 1, 1, config=off),
        "forward, shifted on": lambda: conv.forward(x, w, 1, 1, config=on),
        "forward, shifted on, bp 32": lambda: conv.forward(x, w, 1, 1, config=on32),
        "forward, shifted on, bp 16": lambda: conv.forward(x, w, 1, 1, config=on16),
        "shifted plan": lambda: ps.run(w=wt, x=x, y=y),
        "shifted plan, x y aligned": lambda: ps.run(w=wt, x=xa, y=ya),
        "shifted plan bp 32": lambda: p32.run(w=wt, x=x, y=y),
        "shifted plan bp 16": lambda: p16.run(w=wt, x=x, y=y),
        "unwrap": lambda: conv_unwrap(y, x, w),
    }
    flops = {k: pf.flops for k in sides if "plan" in k or "forward" in k}
    return sides, flops


def backward_sides(name, N):
    """conv.backward's steps on res2a/res3a as it runs them (dy's bordered
    copy, the dx plan storing NCHW, the update reading x in place, dW), by
    hand in call order; the same with the update first; both with the
    update's shares one image each, shares outermost (a thread's tasks then
    read the images it copied); against the layer's two plans."""
    C, K, H, W = LAYERS[name]
    rng = np.random.default_rng(1)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = rng.standard_normal((K, C, 3, 3)).astype(np.float32)
    dy = rng.standard_normal((N, K, H, W)).astype(np.float32)
    path = kernel_path("f32")
    g = conv.geometry(N, C, K, H, W, 3, 3, (1, 1), (1, 1), path=path)
    tiles = g.Cb * g.Kb * 9
    g1 = conv.geometry(N, C, K, H, W, 3, 3, (1, 1), (1, 1), path=path,
                       config={"upd": {"spec": "JKCRS", "tiles": tiles * N}})
    print(f"{name} backward: shares {g.splits} (spec {g.specs[2]}), image shares {g1.splits}"
          f" (spec {g1.specs[2]})", flush=True)
    dyp, wt = conv.block_y(dy, g, "f32", bordered=True), conv.block_w(w, g, "f32", True)
    dxb = aligned_empty((N, g.Cb, g.Hp, g.Wp, g.bc), np.float32)
    pb, pu, pn = conv.plan(g, "bwd", "f32"), conv.plan(g, "upd", "f32"), conv.nchw_dx_plan(g, "f32", False)
    ui, dw = update_inputs(x, dy, g, "f32"), update_output(g)
    pu1, ui1, dw1 = conv.plan(g1, "upd", "f32"), update_inputs(x, dy, g1, "f32"), update_output(g1)
    slots, dx, dwp = aligned_empty((pn.extent["dx"],), np.float32), np.empty_like(x), np.empty_like(w)
    ups = {}
    for key, gg in (("now", g), ("image shares", g1)):
        ups[key] = (gg, conv.x_plan(gg), aligned_empty((gg.splits, gg.Kb, gg.Cb, 3, 3, gg.bc, gg.bk),
                                                        np.float32))

    def steps(order, key):
        gg, px, dwt = ups[key]
        conv.block_y(dy, g, "f32", bordered=True, out=dyp)
        conv.block_w(w, g, "f32", True, out=wt)
        for step in order:
            if step == "data":
                pn.run(dyp=dyp, wt=wt, dx=slots, out=dx)
            else:
                px.run(dw=dwt, x=x, dyp=dyp)
        conv.unblock_dw(dwt, gg, np.float32, out=dwp, c_rows=True)

    sides = {
        "layer bwd-data + update plans": lambda: (pb.run(dyp=dyp, wt=wt, dx=dxb), pu.run(dw=dw, **ui)),
        "layer's, image shares": lambda: (pb.run(dyp=dyp, wt=wt, dx=dxb), pu1.run(dw=dw1, **ui1)),
        "backward whole": lambda: conv.backward(dy, x, w, 1, 1),
        "steps as now": lambda: steps(("data", "upd"), "now"),
        "steps, update first": lambda: steps(("upd", "data"), "now"),
        "steps, image shares": lambda: steps(("data", "upd"), "image shares"),
        "steps, update first, image shares": lambda: steps(("upd", "data"), "image shares"),
        "update plan alone": lambda: ups["now"][1].run(dw=ups["now"][2], x=x, dyp=dyp),
        "update plan alone, image shares": lambda: ups["image shares"][1].run(
            dw=ups["image shares"][2], x=x, dyp=dyp),
    }
    return sides, {}


def forward_steps(name, N):
    """conv.forward without the shifted plan, by hand (x copy, w copy, the
    NCHW-storing plan) against the whole call and the layer's plan, and the
    same at bq 56 (a tile a whole row: the store writes whole rows)."""
    C, K, H, W = LAYERS[name]
    rng = np.random.default_rng(2)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = rng.standard_normal((K, C, 3, 3)).astype(np.float32)
    off = {"fwd": {"shifted": False}}
    sides = {}
    for label, cfg in (("", off), (", bq 56", {"fwd": {"shifted": False, "bq": 56}})):
        g = conv.geometry(N, C, K, H, W, 3, 3, (1, 1), (1, 1), config=cfg, path=kernel_path("f32"))
        xb, wb = conv.block_x(x, g, "f32"), conv.block_w(w, g, "f32")
        yb = aligned_empty((N, g.Kb, g.P, g.Q, g.bk), np.float32)
        pf, pn = conv.plan(g, "fwd", "f32"), conv.nchw_plan(g, "f32", False)
        slots, y = aligned_empty((pn.extent["y"],), np.float32), np.empty((N, K, H, W), np.float32)

        def by_hand(g=g, xb=xb, wb=wb, pn=pn, slots=slots, y=y):
            conv.block_x(x, g, "f32", out=xb)
            conv.block_w(w, g, "f32", out=wb)
            pn.run(x=xb, w=wb, y=slots, out=y)
        sides.update({
            "layer plan" + label: lambda pf=pf, xb=xb, wb=wb, yb=yb: pf.run(x=xb, w=wb, y=yb),
            "nchw plan" + label: lambda pn=pn, xb=xb, wb=wb, slots=slots, y=y: pn.run(
                x=xb, w=wb, y=slots, out=y),
            "steps by hand" + label: by_hand,
            "forward whole" + label: lambda cfg=cfg: conv.forward(x, w, 1, 1, config=cfg)})
    return sides, {}


def table_sides(name, N):
    """The weight update's table for this host (conv.toml, ["f32@amx".upd]) against
    the defaults it replaces (spec KCRSJ, tiles 16): the functional forward +
    backward, and the layer's passes as benchmarks.conv times them (fwd, bwd,
    upd plans, the shares summed into dW)."""
    C, K, H, W = LAYERS[name]
    rng = np.random.default_rng(3)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = rng.standard_normal((K, C, 3, 3)).astype(np.float32)
    dy = rng.standard_normal((N, K, H, W)).astype(np.float32)
    old = {"upd": {"spec": "KCRSJ", "tiles": 16}}
    path = kernel_path("f32")
    g = conv.geometry(N, C, K, H, W, 3, 3, (1, 1), (1, 1), path=path)
    go = conv.geometry(N, C, K, H, W, 3, 3, (1, 1), (1, 1), config=old, path=path)
    print(f"{name}: update {g.specs[2]} x {g.splits} shares here, {go.specs[2]} x {go.splits} "
          "before", flush=True)
    xb, wb, wt = conv.block_x(x, g, "f32"), conv.block_w(w, g, "f32"), conv.block_w(w, g, "f32", True)
    yb = aligned_empty((N, g.Kb, g.P, g.Q, g.bk), np.float32)
    dyp, dxb = conv.block_y(dy, g, "f32", bordered=True), aligned_empty((N, g.Cb, g.Hp, g.Wp, g.bc),
                                                                        np.float32)
    pf, pb = conv.plan(g, "fwd", "f32"), conv.plan(g, "bwd", "f32")
    dwp = np.empty_like(w)

    def layer(gg):
        pu, ui, dw = conv.plan(gg, "upd", "f32"), update_inputs(x, dy, gg, "f32"), update_output(gg)

        def run():
            pf.run(x=xb, w=wb, y=yb)
            pb.run(dyp=dyp, wt=wt, dx=dxb)
            pu.run(dw=dw, **ui)
            conv.unblock_dw(dw, gg, np.float32, out=dwp)
        return run

    def func(cfg):
        return lambda: (conv.forward(x, w, 1, 1, config=cfg), conv.backward(dy, x, w, 1, 1, config=cfg))
    return {"layer fwd+bwd, before": layer(go), "layer fwd+bwd, table": layer(g),
            "func fwd+bwd, before": func(old), "func fwd+bwd, table": func(None)}, {}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--only", choices=tuple(LAYERS))
    parser.add_argument("--parts", default="kernels,forward,steps,backward")  # or table
    args = parser.parse_args()
    threads = set_threads(args.threads, onednn=False)
    parts = args.parts.split(",")
    for name in ([args.only] if args.only else LAYERS):
        if "kernels" in parts:
            sides, flops = kernel_sides(name, threads)
            report(f"{name} kernel calls, {threads} threads", sides, flops, args.reps, "layer call")
        if "forward" in parts:
            sides, flops = forward_sides(name, threads, threads)
            report(f"{name} forward, {threads} threads", sides, flops, args.reps, "layer plan")
        if "steps" in parts:
            sides, flops = forward_steps(name, threads)
            report(f"{name} forward steps, {threads} threads", sides, flops, args.reps, "layer plan")
        if "table" in parts:
            sides, flops = table_sides(name, threads)
            report(f"{name} update table, {threads} threads", sides, flops, args.reps,
                   "layer fwd+bwd, before")
        if "backward" in parts:
            sides, flops = backward_sides(name, threads)
            report(f"{name} backward, {threads} threads", sides, flops, args.reps,
                   "layer bwd-data + update plans")


if __name__ == "__main__":
    main()
