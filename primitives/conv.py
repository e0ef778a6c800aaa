"""2-D convolution as loop nests around the batch-reduce kernel (F.conv2d: no
bias, dilation 1, groups 1).

    x [N,C,H,W], w [K,C,R,S] -> y [N,K,P,Q],  P = (H + 2ph - R) // sh + 1

Blocked layouts (channels in blocks of bc / bk, innermost; zero-padded):
    x, dx  [N][Cb][Hp][Wp][bc]   Hp = H + 2ph, Wp = W + 2pw (padding kept physically)
    y      [N][Kb][P][Q][bk]     w [Kb][Cb][R][S][bc][bk]    wt [Cb][Kb][R][S][bk][bc]
    dyp    [N][Kb][Pp][Qp][bk]   dy with a zero border for the backward-data pass
    dyt    [N][Kb][P][bk][Q]     dy with pixels innermost, for the weight update
    xf     [N][Cb][sh][sw][bc][L]   the flat update's x: phase planes of the stride
    dyf    [N][Kb][Pt][Ws][bk]   the flat update's dy: rows Ws wide (VNNI pairs on AMX)
    dw     [J][Kb][Cb][R][S][bk][bc]  J shares of the weight gradient, summed after
Forward (the seed paper's nest): a row segment of bq output pixels of one
output-channel block = sum over input-channel blocks, r and s of a bq x bc
strip of x (rows sw*bc apart: the stride is a row stride) times a bc x bk tap.
Backward-data: a transposed convolution, written per residue class of the
padded input pixels modulo the stride, so each call reads contiguous dy
pixels and only the taps that reach them. Weight update: a tap's bk x bc tile
= sum over images, rows and pixel blocks of dy^T (bk x bq) times x (bq x bc);
or (config flat, the default on AMX) its transpose over runs of pixels that
span rows (conv_update.update_flat_nest).

Each pass's loop nest has a file of its own (conv_forward.py, conv_backward.py,
conv_update.py); conv_plans.py holds the geometry and the plans, conv_layouts.py
the layout copies, conv_layer.py the layer, conv_pointwise.py the rules and
plans of the 1x1 layers' in-place paths, conv_columns.py those of the small
images' (w in place, x's im2col tiles), conv_in_place.py those of the blocked
path's (NCHW stores, x or w in place, the update reading dy or x),
conv_search.py the tuner's search space; this module the functional forms,
where all of them are reached.
"""
import dataclasses
import functools

import numpy as np

from brgemm import dtypes
from brgemm.arrays import Recycler, Scratch
from brgemm.info import kernel_path
from brgemm.machine import cpu_threads
from brgemm.lru import LRU
from brgemm.im2col import columns_to_image, image_to_columns
from brgemm.layouts import column_sums, convert, from_blocks, nblocks, to_blocks
from brgemm.vnni import vnni_tiles
from primitives import reuse as _reuse
from primitives._args import backend_name, bias_vector, fits, flag, operands
from primitives._config import cached
from primitives.call_memo import CallMemo
from primitives.conv_backward import backward_nest, columns_data_product  # noqa: F401
from primitives.conv_forward import forward_nest  # noqa: F401  (public names)
from primitives.conv_update import pointwise_x_block
from primitives.conv_pointwise import (aligned_plan, class_tiles, data_operands,  # noqa: F401
                                       dw_from_transposed, gather_tail, pointwise,
                                       pointwise_copies_dy, pointwise_pairs, pointwise_plan,
                                       pointwise_rows, pointwise_tail, pointwise_update,
                                       pointwise_update_plan, rows_on_lines, store_tail)
from primitives.conv_update import (  # noqa: F401  (public names)
    narrow, update_flat_nest, update_form, update_narrow_nest, update_nest)
from primitives.conv_in_place import (copies_w_nchw, copies_x_rows, dy_plan, nchw_copying_plan,
                                      nchw_dx_plan, nchw_plan, nchw_ring_plan, reads_dy, reads_x,
                                      reads_x_nchw, stores_nchw, stores_nchw_dx, x_plan)
from primitives.conv_layouts import block_w, block_x, block_y, unblock_dw, unblock_x, unblock_y
from primitives.conv_layouts import block_dyf, block_xf, block_xs, layer_weights  # noqa: F401
from primitives.conv_plans import (SCHEMA, _check, geometry, plan,  # noqa: F401  (SCHEMA)
                                   update_inputs, update_output, vnni_passes)
from primitives.conv_plans import Geometry, SHAPE  # noqa: F401  (public names)
from primitives.conv_columns import (COLUMNS_DATA_PIXELS, COLUMNS_DATA_WIDTH,  # noqa: F401
                                     COLUMNS_UPDATE_WIDTH, MAX_SHARES, columns,
                                     columns_blocks, columns_data_blocks, columns_data_copying,
                                     columns_plan, columns_shares, columns_update_width,
                                     columns_vnni, columns_y_rows)
from primitives.conv_layer import Conv2d  # noqa: F401  (public names)
from primitives.conv_search import search  # noqa: F401  (public names)


# ---------------------------------------------------------------- functional API


_scratch = Scratch()  # blocked copies of one call's operands
_results = Recycler()  # the arrays the functional forms return
_forward_calls, _backward_calls = CallMemo("conv"), CallMemo("conv")  # see call_memo


def _weights(w, g, dtype, transposed, token, vnni=False):
    """w blocked for the forward (or, transposed, backward-data), in VNNI pairs
    with vnni, kept under `token` while provably unchanged (primitives.reuse)."""
    shape = (g.Cb, g.Kb, g.R, g.S, g.bk, g.bc) if transposed else \
        (g.Kb, g.Cb, g.R, g.S, g.bc, g.bk)

    def blocked():  # VNNI pairs made in the same pass
        return block_w(w, g, dtype, transposed, vnni=vnni, out=None if token else _scratch.get(
            "w_vnni" if vnni else "w", shape, dtypes.NUMPY[dtype]))
    return _reuse.blocked(token, ("conv", "wt" if transposed else "w", g, dtype, vnni), (w,),
                          blocked)


def _pointwise(p, g, backend, x, w, name, **tb):
    """p, a pointwise plan of g (pointwise_plan), on images x [N, C, H, W] (read
    in place; or their copy [N][C][hx] on whole-line rows, rows_on_lines) and
    w (K x C, plain and read in place, or tiles [Kb][Cb][bk][bc] where the
    plan's w is not plain), tb: {"b": the bias} where the plan adds one: the
    result [N, K, H, W] (`name` among the returned arrays)."""
    y = _results.empty(name, (g.N, g.K, g.H, g.W), np.float32)
    x = np.ascontiguousarray(x)
    tail = pointwise_tail(g) if "xt" in p.extent else 0
    if not tail:
        p.run(backend=backend, w=w, x=x, y=y, **tb)
        return y
    # each image's last pixels: gathered side by side, their products stored back
    xt, yt = (_scratch.get(name + "_tail_" + s, (rows, g.N * tail), np.float32)
              for s, rows in (("x", g.C), ("y", g.K)))
    gather_tail(x, xt, g, tail)
    p.run(backend=backend, w=w, x=x, y=y, xt=xt, yt=yt, **tb)
    store_tail(yt, y, g, tail)
    return y


def _pointwise_update(dy, x, g, bp, shares, out):
    """dW (K x C) of a 1x1 layer (pointwise_update) into `out`: x's pixels
    transposed into tiles [HWb][N C / bx][bp][bx], dy read in place, the
    shares (if more than one) summed into `out`. With x and dy swapped and g
    transposed, dW^T from dy's copy and x in place (pointwise_copies_dy)."""
    HW = g.H * g.W
    bx = pointwise_x_block(g)
    xt = to_blocks(x.reshape(g.N * g.C, HW), bp, bx, transpose=True, out=_scratch.get(
        "xt", (nblocks(HW, bp), g.N * g.C // bx, bp, bx), np.float32))
    parts = out if shares == 1 else _scratch.get("dw_shares", (shares, g.K * g.C), np.float32)
    pointwise_update_plan(g, bp, shares).run(dy=dy, xt=xt, dw=parts)
    if shares > 1:
        column_sums(parts, out=out.reshape(-1))
    return out


def _pointwise_dw(dy, x, g, upd):
    """dW [K, C, 1, 1] of a 1x1 layer: the update on x's copy, or where
    pointwise_copies_dy says so (and x is C-contiguous f32), on dy's: dW^T,
    then transposed into dW."""
    dw = _results.empty("dw", (g.K, g.C, 1, 1), np.float32)
    gt = _transposed(g)
    swapped = pointwise_copies_dy(g) and pointwise_update(gt, "f32", "cpu", x)
    if not swapped:
        return _pointwise_update(dy, x, g, *upd, out=dw)
    dwt = _pointwise_update(x, dy, gt, *swapped, out=_scratch.get("dwt", (g.C, g.K), np.float32))
    return dw_from_transposed(dwt, dw)


def _route(pass_, dims, stride, padding, config, dtype, backend, token, x, w, dy=None,
           has_bias=False):
    """(g, the path, its plan, its blocks or VNNI choice) of conv.forward (pass_
    "fwd") or of conv.backward's backward-data ("bwd"; also the transposed
    geometry and the weight update's path), decided once per call signature:
    the sizes, the options and, of the arrays, what the path rules read (their
    dtypes, C-contiguity; reuse= or not). has_bias: the forward's plans add b."""
    key = (pass_, dims, stride, padding, dtype, backend, token is None, cpu_threads(),
           x.dtype, w.dtype, x.flags.c_contiguous, w.flags.c_contiguous, has_bias) + (
        () if dy is None else (dy.dtype, dy.flags.c_contiguous))
    g = lambda: geometry(*dims, stride, padding, config, kernel_path(dtype, backend))  # noqa: E731
    if pass_ == "fwd":
        return cached("conv", key, config,
                      lambda: _forward_route(g(), dtype, backend, token, x, w, has_bias))
    return cached("conv", key, config, lambda: _backward_route(g(), dtype, backend, token, x, w,
                                                               dy))


def _forward_route(g, dtype, backend, token, x, w, has_bias):
    bp = pointwise(g, dtype, backend)
    if bp and x.dtype == np.float32 and w.dtype == np.float32:
        hx = pointwise_rows(g)  # x's copy on whole-line rows, or x itself
        return g, "pointwise", pointwise_plan(g, dtype, bp, hx=hx, has_bias=has_bias), hx
    bp = pointwise_pairs(g, dtype, backend, x, w, token)
    if bp:  # bf16: w in place, x's one copy in VNNI pairs
        return g, "pairs", pointwise_plan(g, dtype, bp, pairs=True, has_bias=has_bias), bp
    blocks = columns(g, dtype, backend) if token is None else None
    # w in place; bf16: x rounded into its tiles, and not on 1x1 layers, whose
    # im2col tiles are x's copy transposed (behind the blocked path on the lent
    # Xeon's AMX: benchmarks/RESULTS.md, issue 17, eighteenth session)
    if blocks and w.dtype == dtypes.NUMPY[dtype] and w.flags.c_contiguous and (
            x.dtype == np.float32 if dtype == "f32" else g.R * g.S > 1):
        vnni = columns_vnni(g, dtype, backend, blocks[0])
        shares = columns_shares(g, dtype, blocks[0], cpu_threads())
        return g, "columns", columns_plan(g, dtype, *blocks, vnni=vnni, has_bias=has_bias,
                                          shares=shares), (blocks, vnni, shares)
    if reads_x_nchw(g, dtype, backend, x):  # x in place, y stored by the plan
        if copies_w_nchw(g, token, w):  # and w, its tiles copied by the plan
            return g, "nchw_w", nchw_copying_plan(g, has_bias), False
        return g, "nchw_x", nchw_plan(g, dtype, False, x_nchw=True, has_bias=has_bias), False
    if copies_x_rows(g, dtype, backend, x):  # x in place, its rows copied by the plan
        return g, "nchw_r", nchw_ring_plan(g, has_bias), False
    vnni = "fwd" in vnni_passes(g, dtype, backend)
    if stores_nchw(g, dtype, backend, x.dtype):
        return g, "nchw", nchw_plan(g, dtype, vnni, x.dtype != np.float32, has_bias=has_bias), \
            vnni
    return g, "blocked", plan(g, "fwd", dtype, vnni, has_bias=has_bias), vnni


def _backward_route(g, dtype, backend, token, x, w, dy):
    """g, the passes in VNNI pairs, and (path, plan, blocks) of backward-data and
    of the weight update (see backward)."""
    vnni = vnni_passes(g, dtype, backend)
    gt = _transposed(g)  # backward-data of a pointwise layer: the pointwise forward of w^T
    bp = pointwise(gt, dtype, backend, "bwd")
    blocks = columns(g, dtype, backend, "bwd") if dtype == "f32" else None  # f32 only
    f32 = x.dtype == np.float32 and w.dtype == np.float32
    if blocks and token is None and f32 and w.flags.c_contiguous and g.R * g.S > 1:
        data = "columns", None, None
    elif bp and dy.dtype == np.float32 and w.dtype == np.float32:
        data = "pointwise", pointwise_plan(gt, dtype, bp, w_t=True), gt
    elif stores_nchw_dx(g, dtype, backend, x.dtype):  # dx: each task's slot, written first
        data = "nchw", nchw_dx_plan(g, dtype, "bwd" in vnni, x.dtype != np.float32), None
    else:
        data = "blocked", plan(g, "bwd", dtype, "bwd" in vnni), None
    upd = pointwise_update(g, dtype, backend, dy) if x.dtype == np.float32 else None
    if upd:
        update = "pointwise", None, upd
    elif blocks and x.dtype == np.float32:
        update = "columns", None, None
    elif data[0] in ("nchw", "blocked") and reads_x(g, dtype, backend, x):
        update = "x", x_plan(g), None  # dw^T tiles from backward-data's dyp and x in place
    elif reads_dy(g, dtype, backend, dy):
        update = "dy", dy_plan(g), None
    else:
        update = "blocked", plan(g, "upd", dtype, "upd" in vnni), None
    return g, vnni, data, update


def forward(x, w, stride=1, padding=0, dtype="f32", backend=None, config=None, reuse=None,
            *, b=None):
    """F.conv2d(x, w, b, stride=stride, padding=padding): x [N,C,H,W], w [K,C,R,S],
    b [K] or None -> [N,K,P,Q]. reuse: keep w's blocked copy across calls
    (primitives.reuse). On the CPU backend the plans add b to each tile of y as
    it is finished, in cache (no pass over y of its own)."""
    key, run = _forward_calls.get((x, w, b), (stride, padding, dtype, backend), config, reuse)
    if run is None:
        dims, stride, padding = _check(x, w, dtype, stride, padding)
        token = _reuse.check(reuse)
        backend = backend_name(backend)
        bias = bias_vector(b, dims[2], dtype)
        if bias is not None and backend != "cpu":  # other backends: a pass after, on f32 results
            y = forward(x.astype(np.float32, copy=False), w, stride, padding, dtype, backend,
                        config, reuse)  # (x's bf16 values are exact: bf16 results round once)
            y += bias.reshape(1, -1, 1, 1)
            return y.astype(x.dtype, copy=False)
        token = _reuse.steady(token, ("conv.forward", dims, stride, padding, dtype, backend),
                              (w,))
        run = _forward_calls.put(key, functools.partial(
            _forward_run, dtype, backend, token, *_route(
                "fwd", dims, stride, padding, config, dtype, backend, token, x, w,
                has_bias=bias is not None)))
    return run(x, w, b)


def _forward_run(dtype, backend, token, g, path, p, choice, x, w, b):
    """conv.forward's work once its arguments are checked and its route (g,
    path, p, choice: _route) decided."""
    bias = bias_vector(b, g.K, dtype)
    ab = dtypes.NUMPY[dtype]
    tb = {} if bias is None else {"b": bias}  # the plan's tensor b
    if bias is not None and p.extent["b"] > g.K:  # a ragged last channel block: its tile's
        tb["b"] = _scratch.get("b", (p.extent["b"],), np.float32)  # padding lanes add 0
        tb["b"][:g.K], tb["b"][g.K:] = bias, 0
    if path == "pointwise":
        if choice:  # x's copy on rows of `choice` floats (pointwise_rows)
            x = rows_on_lines(x, choice, out=_scratch.get("x_rows", (g.N, g.C, choice),
                                                          np.float32))
        return _pointwise(p, g, backend, x, np.ascontiguousarray(w), "y", **tb)
    if path == "pairs":
        HW = g.H * g.W
        xv = vnni_tiles(np.ascontiguousarray(x).reshape(g.N, g.C, HW),
                        out=_scratch.get("x_pairs", (g.N, g.C, HW), ab))
        y = _results.empty("y", (g.N, g.K, g.H, g.W), ab)
        p.run(backend=backend, w=w, x=xv, y16=y,
              y=_scratch.get("y_f32", (g.N, g.K, g.H, g.W), np.float32), **tb)
        return y
    if path == "columns":
        (bd, bp), vnni, shares = choice
        PQ = g.P * g.Q
        shape = (nblocks(g.N * PQ, bp), nblocks(g.C * g.R * g.S, bd), bd, bp)
        xc = image_to_columns(x, (g.R, g.S), (g.sh, g.sw), (g.ph, g.pw), bd, bp, dtype=ab,
                              out=_scratch.get("xc", shape, ab))
        xc = vnni_tiles(xc, out=_scratch.get("xc_vnni", shape, ab)) if vnni else xc
        yc = _scratch.get("yc", (g.K, g.N * PQ), np.float32)  # shares: the threads' parts, summed
        parts = yc if shares == 1 else _scratch.get("yc_parts", (shares, yc.size), np.float32)
        p.run(backend=backend, w=w, xc=xc, yc=parts, **tb)
        if shares > 1:
            column_sums(parts, out=yc.reshape(-1))
        br = columns_y_rows(g)  # y^c into y in tiles (bf16 rounded on the way)
        y = _results.empty("y", (g.N, g.K, g.P, g.Q), x.dtype)
        to_blocks(yc, br, PQ, swap_grid=True, dtype=x.dtype,
                  out=y.reshape(g.N, g.K // br, br, PQ))
        return y
    t = dict(x=x if path in ("nchw_x", "nchw_w", "nchw_r") else
             block_x(x, g, dtype, out=_scratch.get("x", (g.N, g.Cb, g.Hp, g.Wp, g.bc), ab)),
             w=w if path == "nchw_w" else _weights(w, g, dtype, False, token, choice), **tb)
    if path == "nchw_w":  # the slots the tasks copy w's tiles into
        t["wt"] = _scratch.get("wt_slots", (p.extent["wt"],), np.float32)
    if path == "nchw_r":  # the rings the tasks copy x's rows into
        t["xr"] = _scratch.get("x_rings", (p.extent["xr"],), np.float32)
    out = _results.empty("y", (g.N, g.K, g.P, g.Q), x.dtype)
    if path != "blocked":  # y: each task's tile slots, all written first (stores_nchw)
        p.run(backend=backend, out=out, y=_scratch.get("y_tiles", (p.extent["y"],), np.float32),
              **t)
        return out
    y = _scratch.get("y", (g.N, g.Kb, g.P, g.Q, g.bk), np.float32)  # all written: beta 0 first
    p.run(backend=backend, y=y, **t)
    return unblock_y(y, g, x.dtype, out=out)


def backward(dy, x, w, stride=1, padding=0, dtype="f32", backend=None, config=None, reuse=None,
             *, need_dx=True, need_dw=True):
    """Gradients of F.conv2d: dx [N,C,H,W], dw [K,C,R,S]. reuse: keep w's
    blocked copy across calls (primitives.reuse). need_dx=False: dx is not
    computed (None comes back in its place), as for a network's first layer,
    whose input wants no gradient; need_dw=False likewise dw (frozen weights).
    dy may be of the other dtype that dtype= takes: dx and dw come back in
    dy's dtype, as fc.backward's do."""
    if isinstance(dy, np.ndarray) and isinstance(x, np.ndarray) and dy.dtype != x.dtype:
        x = _like_dy(dy, x, dtype)
    key, run = _backward_calls.get((dy, x, w), (stride, padding, dtype, backend, need_dx, need_dw),
                                   config, reuse)
    if run is None:
        need_dx, need_dw = flag(need_dx, "need_dx"), flag(need_dw, "need_dw")
        dims, stride, padding = _check(x, w, dtype, stride, padding)
        token = _reuse.check(reuse)
        backend = backend_name(backend)
        if not isinstance(dy, np.ndarray):
            raise ValueError(f"dy: expected a numpy.ndarray, got {type(dy).__name__}")
        # the weights' site: the call's sizes (its geometry, whatever the config)
        token = _reuse.steady(token, ("conv.backward", dims, stride, padding, dtype, backend),
                              (w,))
        g, vnni, data, update = _route("bwd", dims, stride, padding, config, dtype, backend,
                                       token, x, w, dy)
        if dy.shape != (g.N, g.K, g.P, g.Q):
            raise ValueError(f"dy: expected shape {(g.N, g.K, g.P, g.Q)}, got {dy.shape}")
        run = _backward_calls.put(key, functools.partial(
            _backward_run, dtype, backend, token, need_dx, need_dw, g, vnni, *data, *update))
    return run(dy, x, w)


def _like_dy(dy, x, dtype):
    """x in dy's dtype, where dtype= takes both (f32 and bf16 with "bf16"): a
    bf16 call rounds x to bf16 anyway, and bf16 widens to f32 exactly, so the
    gradients are those of x as given, in dy's dtype (fc.backward's)."""
    operands(dtype, x, dy, names=("x", "dy"), ndim=4, nonempty=True)
    fits(x.size * dy.itemsize, "x", lambda: f"x's copy in {dy.dtype}, {x.shape}")
    out = _scratch.get("x_like_dy", x.shape, dy.dtype)
    if dy.dtype == np.float32:  # widened: exact
        np.copyto(out, x)
        return out
    return convert(x, dy.dtype, out=out)  # rounded, in parallel


def _backward_run(dtype, backend, token, need_dx, need_dw, g, vnni, data, p, choice, update, pu,
                  upd, dy, x, w):
    """conv.backward's work once its arguments are checked and its route (g,
    vnni, then backward-data's and the update's path, plan and choice: _route)
    decided."""
    ab, dyp = dtypes.NUMPY[dtype], None
    if (need_dx and data in ("columns", "pointwise")) or (need_dw and update == "columns"):
        dy = np.ascontiguousarray(dy)  # their plans read dy's rows where they lie: copied once
    # dy bordered and blocked: what backward-data's nchw and blocked plans read,
    # and the update on x in place after them
    if (need_dx and data in ("nchw", "blocked")) or (need_dw and update == "x"):
        dyp = block_y(dy, g, dtype, bordered=True,
                      out=_scratch.get("dyp", (g.N, g.Kb, g.Pp, g.Qp, g.bk), ab))
    if not need_dx:
        dx = None
    elif data == "columns":
        dx = _columns_data(dy, w, g)
    elif data == "pointwise":
        p, wt = data_operands(p, choice, g, dtype, dy, w, token, _scratch)
        dx = _pointwise(p, choice, backend, dy, wt, "dx")
    else:
        t = dict(wt=_weights(w, g, dtype, True, token, "bwd" in vnni), dyp=dyp)
        dx = _results.empty("dx", (g.N, g.C, g.H, g.W), x.dtype)
        if data == "nchw":
            p.run(backend=backend, out=dx, dx=_scratch.get("dx_tiles", (p.extent["dx"],),
                                                           np.float32), **t)
        else:
            # the plan writes dx's interior (every residue class, a call even where no
            # tap reaches); the border stays unwritten and unblock_x never reads it
            dxb = _scratch.get("dx", (g.N, g.Cb, g.Hp, g.Wp, g.bc), np.float32)
            p.run(backend=backend, dx=dxb, **t)
            unblock_x(dxb, g, x.dtype, out=dx)
    if not need_dw:
        return dx, None
    if update == "pointwise":
        return dx, _pointwise_dw(dy, x, g, upd)
    if update == "columns":
        return dx, _columns_update(dy, x, g)
    if update == "x":  # dw^T tiles from dyp and x in place
        dw = _scratch.get("dw_t", (g.splits, g.Kb, g.Cb, g.R, g.S, g.bc, g.bk), np.float32)
        pu.run(backend=backend, dw=dw, x=x, dyp=dyp)
        return dx, unblock_dw(dw, g, x.dtype, out=_results.empty("dw", w.shape, x.dtype),
                              c_rows=True)
    dw = update_output(g, _scratch.get)
    if update == "dy":
        pu.run(backend=backend, dw=dw, dyt=dy, x=block_x(
            x, g, dtype, out=_scratch.get("x", (g.N, g.Cb, g.Hp, g.Wp, g.bc), ab)))
    else:
        pu.run(backend=backend, dw=dw,
               **update_inputs(x, dy, g, dtype, _scratch.get, "upd" in vnni))
    return dx, unblock_dw(dw, g, x.dtype, out=_results.empty("dw", w.shape, x.dtype))


_TRANSPOSED = LRU(64)


def _transposed(g):
    """g with C and K swapped (backward-data as a forward), made once: replace() is slow."""
    return _TRANSPOSED.get_or_make(g, lambda: dataclasses.replace(g, C=g.K, K=g.C, bc=g.bk,
                                                                  bk=g.bc))


def _columns_data(dy, w, g):
    """dx where the forward reads w in place (columns): dy^T (dy C-contiguous)
    times w in place (or its tiles copied by the plan: columns_copies_w); dx^c
    summed into dx."""
    PQ, D, cols = g.P * g.Q, g.C * g.R * g.S, g.N * g.P * g.Q
    dyt = from_blocks(dy.reshape(g.N, 1, g.K, PQ), g.K, cols, transpose=True, swap_grid=True,
                      out=_scratch.get("dyt", (cols, g.K), np.float32))
    dxc = _scratch.get("dxc", (cols, D), np.float32)  # all written: beta 0 first
    if g.columns_copies_w:  # w's tiles copied by the plan (the config's columns_copies_w)
        p = columns_data_copying(g)
        p.run(dy=dyt, w=w.reshape(g.K, D), dx=dxc,
              wt=_scratch.get("wt_copies", (p.extent["wt"],), np.float32))
    else:
        columns_plan(g, "f32", *columns_data_blocks(g), "bwd").run(dyt=dyt, w=w, dxc=dxc)
    return columns_to_image(dxc, (g.N, g.C, g.H, g.W), (g.R, g.S), (g.sh, g.sw), (g.ph, g.pw),
                            out=_results.empty("dx", (g.N, g.C, g.H, g.W), np.float32))


def _columns_update(dy, x, g):
    """dW where the forward reads w in place (columns): in w's own layout, from
    x's im2col tiles transposed (one pass, an image a pixel block) and dy
    (C-contiguous) read in place, by one plan."""
    PQ, D = g.P * g.Q, g.C * g.R * g.S
    bd = columns_update_width(g)
    xct = image_to_columns(x, (g.R, g.S), (g.sh, g.sw), (g.ph, g.pw), bd, PQ, transposed=True,
                           out=_scratch.get("xct", (nblocks(D, bd), g.N, PQ, bd), np.float32))
    dw = _results.empty("dw", (g.K, g.C, g.R, g.S), np.float32)
    columns_plan(g, "f32", bd, PQ, "upd").run(dy=dy, xct=xct, dw=dw)
    return dw
