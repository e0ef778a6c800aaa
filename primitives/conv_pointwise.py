"""Convolution's pointwise paths: 1x1 layers with stride 1 and no padding,
where each image's product is a GEMM on the NCHW arrays as they are. Which
layers take them (pointwise, pointwise_update) and their plans; the nests
are conv_forward.pointwise_nest and conv_update.pointwise_update_nest, the
functional forms that run them are in primitives/conv.py."""
import numpy as np

from brgemm import dtypes
from brgemm import plan as bplan
from brgemm.layouts import nblocks, pick_block, to_blocks
from brgemm.loopspec import Loop, parse_spec
from brgemm.machine import cpu_threads
from brgemm.vnni import takes_vnni_b
from brgemm.windows import copy_windows
from primitives import reuse
from primitives.conv_forward import aligned_pointwise_nest, line_period, pointwise_nest
from primitives.conv_plans import _plans
from primitives.conv_update import pointwise_update_nest


def pointwise(g, dtype, backend, pass_="fwd"):
    """The pixel block of the functional forward's pointwise plan (pass_ "fwd";
    "bwd": backward-data's, g then the transposed geometry), or None where it
    does not apply or the config's `pointwise` of that pass is off. A 1x1
    layer with stride 1 and no padding is a GEMM per
    image on NCHW arrays as they are (pointwise_nest): it reads w and x in
    place and writes y in place, where the blocked plan needs all three
    copied. f32 on the CPU backend, C a multiple of bc, and images whose
    pixels fill the kernel's 16-float vectors but for at most 1/16 of their
    lanes (14 x 14 and larger; not 7 x 7, where 49 pixels leave 15 of 64
    lanes empty and the layer's full tiles win: benchmarks/RESULTS.md)."""
    if pass_ not in ("fwd", "bwd"):
        raise ValueError(f"pass_: expected 'fwd' or 'bwd', got {pass_!r}")
    if dtype != "f32" or backend != "cpu" or not g.pointwise[pass_ == "bwd"]:
        return None
    return _pixel_block(g, pointwise_tail(g, pass_))


def _pixel_block(g, tail=0):
    """pointwise's rule on the layer alone: its pixel block (of the pixels
    past each image's `tail`), or None."""
    HW = g.H * g.W
    if ((g.R, g.S, g.sh, g.sw, g.ph, g.pw) != (1, 1, 1, 1, 0, 0) or g.C % g.bc
            or 16 * nblocks(HW, 16) - HW > HW // 16):
        return None
    return pick_block(HW - tail, g.pointwise_bp, 16)  # config: the pointwise_bp target


def pointwise_tail(g, pass_="fwd", dtype="f32", pairs=False):
    """How many of each image's last pixels the f32 pointwise forward (pass_
    "fwd", not in VNNI pairs) computes apart, for all images at once
    (conv_forward.pointwise_nest's tail): the pixels past the image's last
    whole 16-float vector, where the config's pointwise_tail says so; 0 for
    every other plan. Each image's own would fill a vector of their
    own only in part (4 lanes of 16 on 14 x 14: a 13th vector for 12.25
    vectors' work, 5-8% of the plan), where all images' together fill
    theirs (benchmarks/RESULTS.md, issue 17, forty-first session). The
    forward's plans only: backward-data's on w read transposed (a_t) ran no
    faster with it on the EPYC."""
    if pass_ != "fwd" or dtype != "f32" or pairs or not g.pointwise_tail:
        return 0
    HW = g.H * g.W
    return HW % 16 if HW > 16 else 0


def gather_tail(x, xt, g, tail):
    """Each image's last `tail` pixels of x [N][C][>= H W] into xt [C][N tail]
    (images side by side: pointwise_nest's tail tensor), in parallel."""
    HW = g.H * g.W
    copy_windows(x.reshape(g.N, g.C, -1)[:, :, HW - tail:HW],
                 xt.reshape(g.C, g.N, tail).transpose(1, 0, 2))


def store_tail(yt, y, g, tail):
    """gather_tail's inverse for the products: yt [K][N tail] back into each
    image's last `tail` pixels of y [N, K, H, W]."""
    HW = g.H * g.W
    copy_windows(yt.reshape(g.K, g.N, tail).transpose(1, 0, 2),
                 y.reshape(g.N, g.K, HW)[:, :, HW - tail:])


def pointwise_rows(g):
    """x's row length in the f32 functional forward's pointwise plan where it
    reads a copy of x on whole-line rows rather than x itself, else None: rows
    of HW floats back to back leave 3 in 4 of 196-pixel rows (14 x 14) starting
    off a 64-byte line, and every 16-float load of theirs then straddles two
    lines. The copy [N][C][HWp] (HWp: HW rounded up to 16 floats) starts each
    row on a line, in one streaming pass over x: where the config's
    pointwise_rows says so (CPUs whose kernel pays for those loads) and HW is
    not a multiple of 16 (benchmarks/RESULTS.md, issue 17, twenty-second
    session)."""
    HW = g.H * g.W
    if not g.pointwise_rows or HW % 16 == 0:
        return None
    return 16 * nblocks(HW, 16)


def rows_on_lines(x, hx, out=None):
    """x [N, C, H, W] copied onto rows of hx floats (64-byte aligned, each row's
    tail past H W zero): [N][C][hx], in parallel."""
    N, C, H, W = x.shape
    return to_blocks(x.reshape(N * C, H * W), 1, hx, out=None if out is None else
                     out.reshape(N * C, 1, 1, hx)).reshape(N, C, hx)


def pointwise_pairs(g, dtype, backend, x, w, token):
    """The pixel block of the bf16 functional forward's pointwise plan, or None:
    pointwise's layers, in bf16 on the CPU backend where x and w are bf16
    already (nothing to round), w C-contiguous and not kept blocked (reuse=):
    w read in place as the broadcast operand, x's one copy its channel rows in
    VNNI pairs (brgemm.vnni.vnni_tiles, C even), y stored in bf16 by the
    plan (pointwise_plan's pairs); where the config's pointwise_pairs says so
    and its fwd `pointwise` is on."""
    if (dtype != "bf16" or backend != "cpu" or not g.pointwise_pairs or not g.pointwise[0]
            or token is not None
            or g.C % 2
            or x.dtype != dtypes.bfloat16 or w.dtype != dtypes.bfloat16
            or not w.flags.c_contiguous or not takes_vnni_b(g.bc, dtype, backend)):
        return None
    return _pixel_block(g)


def pointwise_update(g, dtype, backend, dy):
    """(pixel block, shares) of the functional weight update of a 1x1 layer
    with stride 1 and no padding (pointwise_update_plan), or None: f32 on the
    CPU backend, dy f32 and C-contiguous (read in place). dW = sum over images
    of dy[n] (K x HW) @ x[n]^T, x's one copy the transposed tiles; dW comes
    out in w's own layout. Shares of the reduction where there are fewer than
    4 tiles a thread, as the layer's update (conv_plans.geometry), or with the
    config's pointwise_shares that many (runs of whole images where they
    divide the images; its pointwise_images: one share per image)."""
    if ((g.R, g.S, g.sh, g.sw, g.ph, g.pw) != (1, 1, 1, 1, 0, 0) or dtype != "f32"
            or backend != "cpu" or dy.dtype != np.float32 or not dy.flags.c_contiguous):
        return None
    bp = pick_block(g.H * g.W, 256)
    units = g.N * nblocks(g.H * g.W, bp)
    if g.pointwise_shares:  # config: that many shares, images outermost (pointwise_update_plan)
        shares = min(units, g.pointwise_shares)
    else:
        shares = max(1, min(units, -(-4 * cpu_threads() // (g.Kb * g.Cb))))
    return bp, -(-units // -(-units // shares))  # no share left without units


def pointwise_copies_dy(g):
    """Whether the pointwise weight update copies dy rather than x: it then
    computes dW^T = sum of x[n] (read in place) @ dy[n]^T (the copy), and dW^T
    is transposed after. Where dy's copy and that transpose (counted three
    times: a K x C transpose runs at a third of a copy's speed or less) move
    fewer elements than x's copy: layers that narrow the channels (C > K),
    on images large enough (benchmarks/RESULTS.md)."""
    HW = g.H * g.W
    return g.N * g.K * HW + 3 * g.K * g.C < g.N * g.C * HW


def pointwise_plan(g, dtype, bp, plain_w=True, pairs=False, hx=None, has_bias=False, w_t=False):
    """conv.pointwise's plan (conv_forward.pointwise_nest), w plain or in tiles
    (or, w_t, the plain transpose of the w it multiplies: backward-data's);
    pairs: x's channel rows in VNNI pairs, y also stored in bf16 (tensor y16);
    hx: x's rows that far apart (pointwise_rows' copy); has_bias: b [K] added.
    The f32 forward's (neither pairs nor w_t) leaves each image's last
    pointwise_tail(g) pixels to its tail calls (tensors xt, yt: conv's
    _pointwise gathers and stores them). Pixel blocks outside output-channel blocks: a block of x's pixels stays in
    cache while w's rows pass (faster than NKP on every 1x1 ResNet-50 layer
    timed, most where x[n] is large: benchmarks/RESULTS.md)."""
    tail = pointwise_tail(g, "bwd" if w_t else "fwd", dtype, pairs)

    def record():
        loops = parse_spec("NPK", [Loop("n", 0, g.N, 1), Loop("k", 0, g.Kb, 1),
                                   Loop("p", 0, nblocks(g.H * g.W - tail, bp), 1)])
        tensors = {"w": dtype, "x": dtype, "y": "f32"}
        if pairs:
            tensors["y16"] = "bf16"
        if has_bias:
            tensors["b"] = "f32"
        if tail:  # x's and y's last pixels of every image (pointwise_nest's tail)
            tensors.update(xt="f32", yt="f32")
        rec = bplan.Recorder(tensors, spec="NPK")
        pointwise_nest(rec, loops, g, dtype, bp, plain_w, pairs, hx, has_bias, w_t, tail)
        return rec.finish()
    return _plans.get((g, "pointwise", dtype, bp, plain_w, pairs, hx, has_bias, w_t, tail),
                      record)


def pointwise_update_plan(g, bp, shares):
    """The weight update conv.pointwise_update describes
    (conv_update.pointwise_update_nest): a task per tile and share; with the
    config's pointwise_shares (or pointwise_images: one share per image),
    shares outermost, so that the static schedule gives thread n image n's
    tasks (or a run of images with n's among them), as to_blocks gives it image
    n's tiles of x^T to copy (its tiles in the order of x's rows)."""
    spec = "JKC" if g.pointwise_shares else "KCJ"

    def record():
        loops = parse_spec(spec, [Loop("k", 0, g.Kb, 1), Loop("c", 0, g.Cb, 1),
                                  Loop("j", 0, shares, 1)])
        rec = bplan.Recorder({"dy": "f32", "xt": "f32", "dw": "f32"}, spec=spec)
        pointwise_update_nest(rec, loops, g, "f32", bp, shares)
        return rec.finish()
    return _plans.get((g, "pointwise_upd", bp, shares, spec), record)


def dw_from_transposed(dwt, dw):
    """dW^T (C x K) transposed into dW [K, C, 1, 1]: in row tiles of 16 (in
    parallel, 3 times a one-tile transpose's speed: benchmarks/RESULTS.md)
    where 16 divides K, else as one tile."""
    C, K = dwt.shape
    rows = 16 if K % 16 == 0 else K
    to_blocks(dwt, rows, C, transpose=True, out=dw.reshape(K // rows, 1, rows, C))
    return dw


def aligned_plan(g, dtype, bp, align):
    """pointwise_plan's product by classes of x's rows, every x vector loaded
    from whole lines (conv_forward.aligned_pointwise_nest), for x's first
    element `align` floats past a 64-byte line; w in class_tiles. A task
    per image and output block."""
    def record():
        loops = parse_spec("NK", [Loop("n", 0, g.N, 1), Loop("k", 0, g.Kb, 1)])
        rec = bplan.Recorder({"w": dtype, "x": dtype, "y": "f32"}, spec="NK")
        aligned_pointwise_nest(rec, loops, g, dtype, bp, align)
        return rec.finish()
    return _plans.get((g, "pointwise_aligned", dtype, bp, align), record)


def class_tiles(w, L, bc, bk, out=None):
    """w [K, C] as backward-data's operand (w^T, the forward's w of the
    transposed geometry, whose reduction runs along w's rows) in
    aligned_pointwise_nest's tiles of each class of w's rows (r, r + L, ..):
    [L][C / bc][K / L / bk][bc][bk], tile (r, i, j) at [u][t] holding
    w[r + L (j bk + t)][i bc + u]. bc divides C, L bk divides K."""
    K, C = w.shape  # w's rows by class, side by side: [K / L][L C], then its transpose in tiles
    return to_blocks(w.reshape(K // L, L * C), bc, bk, transpose=True, out=None if out is None else
                     out.reshape(L * C // bc, K // L // bk, bc, bk)).reshape(L, C // bc, -1, bc, bk)


def data_operands(p, gt, g, dtype, dy, w, token, scratch):
    """Backward-data's pointwise plan (gt: g transposed) and its w: p (w_t)
    on w itself, read in place as the kernel's transposed A (a copy of w^T
    into tiles first, then the plan, ran 10% slower than this on
    res4a_branch2c on the EPYC: benchmarks/RESULTS.md, issue 17,
    twenty-sixth session); or where pointwise_classes says so, the plan by
    classes of dy's rows (aligned_plan) on class_tiles, kept under `token`
    while unchanged (primitives.reuse), where the rows fall into at most 4
    classes (more leave few rows a call) of whole tiles, and C fills whole
    blocks (a class's rows of w^T start on a tile). dy stays in place."""
    L = line_period(g.H * g.W)
    if not gt.pointwise_classes or L > 4 or gt.C % (L * gt.bc) or g.C % g.bc:
        return p, np.ascontiguousarray(w).reshape(g.K, g.C)
    wt = reuse.blocked(token, ("conv", "wt_classes", g, dtype), (w,), lambda: class_tiles(
        w.reshape(g.K, g.C), L, g.bc, g.bk, out=None if token else scratch.get(
            "wt_classes", (L, g.Cb, g.K // L // g.bk, g.bc, g.bk), np.float32)))
    bp = max(16, gt.classes_bp // 16 * 16)
    return aligned_plan(gt, dtype, bp, dy.ctypes.data // 4 % 16), wt
