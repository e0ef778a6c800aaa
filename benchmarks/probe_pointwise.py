"""Probe (issue 17): conv's pointwise plans (1x1 layers read in place,
conv_pointwise) against the layer's plans on res4a_branch2c (256 -> 1024 on
14 x 14), all sides of a part timed interleaved in one process (rotated
rounds, medians, paired ratios over the part's first side):

    python -m benchmarks.probe_pointwise [--threads T] [--reps 7] [--parts forward,backward]

forward: the layer's plan on blocked x, w, y; the pointwise plan as the
functional forward routes it; the same calls with x's (and y's) rows padded
to whole lines (208 floats, 64-byte aligned: what the kernel does when no
16-float load of x straddles two lines) and that copy of x; the plan by
classes of x's rows (conv_pointwise.aligned_plan, on w regrouped into tiles
of each class: not a path; w would need that copy each call); the whole
conv.forward call as routed, and with x read in place and on its copy on
whole-line rows (pointwise_rows off, on) at the table's and two pixel
blocks. backward: backward-data's layer plan, its pointwise plan on w^T's
tiles and on w in place (the kernel's transposed A, as conv.backward
routes it where pointwise_classes is off), the same on dy's rows padded to
lines, the plan by classes of dy's rows (pointwise_classes) at three pixel
blocks, the w^T copies of both, whole
conv.backward calls with pointwise_classes off and on. both: forward + backward as
benchmarks.conv times them (the layer's three plans and dW's unblocking
against conv.forward + conv.backward), and the forward alone so. Speeds only: no result is
checked (tests/test_conv_aligned.py does)."""
import argparse
import dataclasses

import numpy as np

from benchmarks.common import report_sides as report, set_threads
from brgemm import plan as bplan
from brgemm.arrays import aligned_empty
from brgemm.info import kernel_path
from brgemm.layouts import nblocks, to_blocks
from primitives import conv
from primitives._calls import blocks_per_call
from primitives.conv_forward import line_period
from primitives.conv_plans import update_inputs, update_output

C, K, H, W = 256, 1024, 14, 14
HW = H * W
ON = {"fwd": {"pointwise_classes": True}}
OFF = {"fwd": {"pointwise_classes": False}}


def padded_plan(g, bp, hx, hy, wt=False):
    """conv_forward.pointwise_nest's calls (w plain, or with wt in tiles
    [Kb][Cb][bk][bc]; spec NPK) with x's rows hx and y's hy floats apart."""
    rec = bplan.Recorder({"w": "f32", "x": "f32", "y": "f32"})
    per_call = blocks_per_call(g.pointwise_kb, (g.bk + bp) * g.bc, "f32")
    for n in range(g.N):
        for p in range(nblocks(HW, bp)):
            for k in range(g.Kb):
                rec.at(0, (n, p, k))
                width = min(bp, HW - p * bp)
                for c0 in range(0, g.Cb, per_call):
                    cs = range(c0, min(c0 + per_call, g.Cb))
                    rec.gemm(bplan.Block(g.bk, width, g.bc, lda=g.bc if wt else g.C, ldb=hx, ldc=hy,
                                         dtype="f32", beta=0.0 if c0 == 0 else 1.0),
                             "w", [(k * g.Cb + c) * g.bk * g.bc if wt else k * g.bk * g.C + c * g.bc
                                   for c in cs],
                             "x", [(n * g.C + c * g.bc) * hx + p * bp for c in cs],
                             "y", (n * g.K + k * g.bk) * hy + p * bp)
    return rec.finish()


def forward_tiles(w, g, L):
    """w [K, C] in the forward's tiles of each class of x's rows (columns r, r + L, ..
    of w): [L][Kb][C / L / bc][bk][bc]."""
    Cc = g.C // L
    return np.ascontiguousarray(np.stack([w[:, r::L].reshape(g.Kb, g.bk, Cc // g.bc, g.bc)
                                          .transpose(0, 2, 1, 3) for r in range(L)]))


def align(a):
    return a.ctypes.data // 4 % 16


def forward_sides(N):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = rng.standard_normal((K, C, 1, 1)).astype(np.float32)
    path = kernel_path("f32")
    g = conv.geometry(N, C, K, H, W, 1, 1, (1, 1), (0, 0), path=path)
    bp = conv.pointwise(g, "f32", "cpu")
    L = line_period(HW)
    print(f"\nforward N={N}: bc {g.bc} bk {g.bk} pointwise_kb {g.pointwise_kb} pointwise_bp "
          f"{g.pointwise_bp} (block {bp}); x at {x.ctypes.data % 64} bytes past a line", flush=True)
    xb, wb = conv.block_x(x, g, "f32"), conv.block_w(w, g, "f32")
    yb = aligned_empty((N, g.Kb, H, W, g.bk), np.float32)
    y = np.empty((N, K, H, W), np.float32)
    w2 = np.ascontiguousarray(w.reshape(K, C))
    xpad, ypad = aligned_empty((N, C, 208), np.float32), aligned_empty((N, K, 208), np.float32)
    xpad[:, :, :HW] = x.reshape(N, C, HW)
    wtl = forward_tiles(w2, g, L)
    pf, pp = conv.plan(g, "fwd", "f32"), conv.pointwise_plan(g, "f32", bp)
    px, pxy = padded_plan(g, bp, 208, HW), padded_plan(g, bp, 208, 208)
    a = align(x)
    sides = {
        "layer plan": lambda: pf.run(x=xb, w=wb, y=yb),
        "pointwise plan": lambda: pp.run(w=w2, x=x, y=y),
        "pointwise, x on lines": lambda: px.run(w=w2, x=xpad, y=y),
        "pointwise, x y on lines": lambda: pxy.run(w=w2, x=xpad, y=ypad),
    }
    sides["x copy onto lines"] = lambda: conv.rows_on_lines(x, 208, out=xpad)
    for b in {64, 112} - {bp}:
        pb = padded_plan(dataclasses.replace(g, pointwise_bp=b), b, 208, HW)
        sides[f"pointwise, x on lines, bp {b}"] = lambda pb=pb: pb.run(w=w2, x=xpad, y=y)
    for b in (64, 112):
        pt = conv.aligned_plan(g, "f32", b, a)
        sides[f"classes, w tiles, bp {b}"] = lambda pt=pt: pt.run(w=wtl, x=x, y=y)
    sides["forward whole (as routed)"] = lambda: conv.forward(x, w)
    for rows in (False, True):  # x read in place, or its copy on whole-line rows
        for b in (None, 64, 112):
            cfg = {"fwd": {"pointwise_rows": rows, **({"pointwise_bp": b} if b else {})}}
            sides[f"forward whole, rows {'on' if rows else 'off'}"
                  + (f", bp {b}" if b else "")] = lambda cfg=cfg: conv.forward(x, w, config=cfg)
    return sides, {k: pf.flops for k in sides if "copy" not in k}


def backward_sides(N):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = rng.standard_normal((K, C, 1, 1)).astype(np.float32)
    dy = rng.standard_normal((N, K, H, W)).astype(np.float32)
    path = kernel_path("f32")
    g = conv.geometry(N, C, K, H, W, 1, 1, (1, 1), (0, 0), path=path)
    gt = dataclasses.replace(g, C=g.K, K=g.C, bc=g.bk, bk=g.bc)  # as conv.backward's route
    bp = conv.pointwise(gt, "f32", "cpu")
    L = line_period(HW)
    print(f"\nbackward N={N}: gt bc {gt.bc} bk {gt.bk} pointwise_kb {gt.pointwise_kb} "
          f"pointwise_bp {gt.pointwise_bp} (block {bp}); dy at {dy.ctypes.data % 64} bytes", flush=True)
    dyp, wt = conv.block_y(dy, g, "f32", bordered=True), conv.block_w(w, g, "f32", True)
    dxb = aligned_empty((N, g.Cb, g.Hp, g.Wp, g.bc), np.float32)
    w2 = np.ascontiguousarray(w.reshape(K, C))
    wtt = to_blocks(w2, g.bc, g.bk, transpose=True)
    wcl = conv.class_tiles(w2, L, g.bc, g.bk)
    dx = np.empty((N, C, H, W), np.float32)
    dypad = aligned_empty((N, K, 208), np.float32)
    dypad[:, :, :HW] = dy.reshape(N, K, HW)
    pb, pp = conv.plan(g, "bwd", "f32"), conv.pointwise_plan(gt, "f32", bp, plain_w=False)
    pw = conv.pointwise_plan(gt, "f32", bp, w_t=True)
    a = align(dy)
    sides = {
        "layer bwd-data plan": lambda: pb.run(dyp=dyp, wt=wt, dx=dxb),
        "pointwise plan": lambda: pp.run(w=wtt, x=dy, y=dx),
        "pointwise plan, w in place (a_t)": lambda: pw.run(w=w2, x=dy, y=dx),
        "w^T tiles copy": lambda: to_blocks(w2, g.bc, g.bk, transpose=True, out=wtt),
        "class tiles copy": lambda: conv.class_tiles(w2, L, g.bc, g.bk, out=wcl),
    }
    for b in (32, 64, 112):
        pt = conv.aligned_plan(gt, "f32", b, a)
        sides[f"classes, tiles, bp {b}"] = lambda pt=pt: pt.run(w=wcl, x=dy, y=dx)
    for b in (64, 112):  # x y: dy's rows and dx's on whole lines
        pd = padded_plan(dataclasses.replace(gt, pointwise_bp=b), b, 208, HW, wt=True)
        sides[f"pointwise, dy on lines, bp {b}"] = lambda pd=pd: pd.run(w=wtt, x=dypad, y=dx)
    sides["backward whole, classes off"] = lambda: conv.backward(dy, x, w, config=OFF)
    sides["backward whole, classes on"] = lambda: conv.backward(dy, x, w, config=ON)
    return sides, {k: pb.flops for k in sides if "copy" not in k}


def both_sides(N):
    """forward + backward as benchmarks.conv times them: the layer's fwd, bwd
    and upd plans and dW unblocked, against conv.forward + conv.backward with
    pointwise_classes off and on; the forward alone so."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = (rng.standard_normal((K, C, 1, 1)) / np.sqrt(C)).astype(np.float32)
    dy = rng.standard_normal((N, K, H, W)).astype(np.float32)
    g = conv.geometry(N, C, K, H, W, 1, 1, (1, 1), (0, 0), path=kernel_path("f32"))
    xb, wb, wt = conv.block_x(x, g, "f32"), conv.block_w(w, g, "f32"), conv.block_w(w, g, "f32", True)
    yb = aligned_empty((N, g.Kb, H, W, g.bk), np.float32)
    dyp, dxb = conv.block_y(dy, g, "f32", bordered=True), aligned_empty((N, g.Cb, g.Hp, g.Wp, g.bc),
                                                                        np.float32)
    pf, pb, pu = conv.plan(g, "fwd", "f32"), conv.plan(g, "bwd", "f32"), conv.plan(g, "upd", "f32")
    ui, dw, dwp = update_inputs(x, dy, g, "f32"), update_output(g), np.empty_like(w)

    def layer():
        pf.run(x=xb, w=wb, y=yb)
        pb.run(dyp=dyp, wt=wt, dx=dxb)
        pu.run(dw=dw, **ui)
        conv.unblock_dw(dw, g, np.float32, out=dwp)
    return {"layer fwd+bwd": layer,
            "func fwd+bwd, classes off": lambda: (conv.forward(x, w),
                                                  conv.backward(dy, x, w, config=OFF)),
            "func fwd+bwd, classes on": lambda: (conv.forward(x, w),
                                                 conv.backward(dy, x, w, config=ON)),
            "layer fwd plan": lambda: pf.run(x=xb, w=wb, y=yb),
            "func fwd": lambda: conv.forward(x, w)}, {}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--parts", default="forward,backward,both")
    args = parser.parse_args()
    threads = set_threads(args.threads, onednn=False)
    parts = args.parts.split(",")
    if "forward" in parts:
        sides, flops = forward_sides(threads)
        report(f"res4a_branch2c forward, {threads} threads", sides, flops, args.reps, "layer plan")
    if "backward" in parts:
        sides, flops = backward_sides(threads)
        report(f"res4a_branch2c backward, {threads} threads", sides, flops, args.reps,
               "layer bwd-data plan")
    if "both" in parts:
        sides, flops = both_sides(threads)
        report(f"res4a_branch2c forward + backward, {threads} threads", sides, flops, args.reps,
               "layer fwd+bwd")


if __name__ == "__main__":
    main()
