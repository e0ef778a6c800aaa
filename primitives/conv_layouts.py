"""Convolution's blocked layouts (primitives/conv.py's docstring draws them)
to and from NCHW arrays and weights. One parallel pass each in C
(brgemm.layouts): padding, channel blocking, transposition and the f32 -> bf16
rounding fused. `out`: a buffer to fill."""
from brgemm import dtypes
from brgemm.layouts import (blocks_to_image, image_to_blocks, nblocks, taps_from_blocks,
                            taps_to_blocks)
from brgemm.layouts import image_to_planes
from primitives.conv_update import c_rows as update_c_rows, flat_layout


def block_x(x, g, dtype, out=None):
    """[N, C, H, W] -> [N][Cb][Hp][Wp][bc], zero-padded channels and border."""
    return image_to_blocks(x, g.bc, g.Hp, g.Wp, g.ph, g.pw, dtype=dtypes.NUMPY[dtype], out=out)


def unblock_x(t, g, dtype, out=None):
    """[N][Cb][Hp][Wp][bc] -> [N, C, H, W] (padding dropped)."""
    return blocks_to_image(t, g.C, g.H, g.W, g.ph, g.pw, dtype=dtype, out=out)


def block_y(y, g, dtype, bordered=False, pixels_last=False, out=None):
    """[N, K, P, Q] -> [N][Kb][P][Q][bk]; bordered: [N][Kb][Pp][Qp][bk] with dy at
    (bp, bw) in a zero border (backward-data); pixels_last: [N][Kb][P][bk][Q]."""
    dt = dtypes.NUMPY[dtype]
    if pixels_last:
        out = out if out is None else out.reshape(g.N, g.Kb, g.P, 1, g.bk, g.Q)
        t = image_to_blocks(y, g.bk, g.P, g.Q, pixels_last=True, dtype=dt, out=out)
        return t.reshape(g.N, g.Kb, g.P, g.bk, g.Q)
    if bordered:
        return image_to_blocks(y, g.bk, g.Pp, g.Qp, g.bp, g.bw, dtype=dt, out=out)
    return image_to_blocks(y, g.bk, g.P, g.Q, dtype=dt, out=out)


def unblock_y(t, g, dtype, out=None):
    return blocks_to_image(t, g.K, g.P, g.Q, dtype=dtype, out=out)


def block_w(w, g, dtype, transposed=False, out=None, vnni=False):
    """[K, C, R, S] -> w [Kb][Cb][R][S][bc][bk], or wt [Cb][Kb][R][S][bk][bc];
    in VNNI pairs with vnni, in the same pass."""
    if out is not None:
        out = out.reshape(out.shape[:2] + (g.R * g.S,) + out.shape[4:])
    t = taps_to_blocks(w, g.bk, g.bc, transposed, dtype=dtypes.NUMPY[dtype], out=out, vnni=vnni)
    return t.reshape(t.shape[:2] + (g.R, g.S) + t.shape[3:])


def layer_weights(w, g, dtype, vnni=frozenset()):
    """w and wt as the layer keeps them: blocked, and in VNNI pairs for the
    passes in `vnni` (vnni_passes: AMX reads them so, repacked per change)."""
    return (block_w(w, g, dtype, vnni="fwd" in vnni),
            block_w(w, g, dtype, transposed=True, vnni="bwd" in vnni))


def unblock_dw(t, g, dtype, out=None, c_rows=None):
    """The update's output (shares summed) [J][Kb][Cb][R][S][bk][bc], or
    [..][bc][bk] where c_rows (default: the update nest's, conv_update.c_rows)
    -> [K, C, R, S]."""
    t = t.reshape(t.shape[:3] + (g.R * g.S,) + t.shape[5:])
    rows = update_c_rows(g) if c_rows is None else c_rows
    return taps_from_blocks(t, g.K, g.C, (g.R, g.S), c_rows=rows, dtype=dtype, out=out)


def block_xs(x, g, dtype, out=None):
    """[N, C, H, W] -> xs [N][Cb][Hp][sw][bc][ceil(Wp/sw)]: padded x with pixels
    innermost, split by phase modulo the stride (update_narrow_nest reads it)."""
    Ws = nblocks(g.Wp, g.sw)
    return image_to_blocks(x, g.bc, g.Hp, Ws * g.sw, g.ph, g.pw, pixels_last=True, phases=g.sw,
                           dtype=dtypes.NUMPY[dtype], out=out)


def block_xf(x, g, dtype, out=None):
    """[N, C, H, W] -> xf [N][Cb][sh][sw][bc][L]: the padded x's phase planes of
    the stride, pixels innermost (update_flat_nest reads it)."""
    f = flat_layout(g)
    return image_to_planes(x, g.bc, (g.sh, g.sw), f.Hs, f.Ws, f.L, g.ph, g.pw,
                           dtype=dtypes.NUMPY[dtype], out=out)


def block_dyf(dy, g, dtype, out=None):
    """[N, K, P, Q] -> dyf [N][Kb][Pt][Ws][bk]: dy's rows Ws wide, zeros in
    the columns from Q and the rows from P (update_flat_nest reads it, in VNNI
    pairs on AMX)."""
    f = flat_layout(g)
    return image_to_blocks(dy, g.bk, f.Pt, f.Ws, dtype=dtypes.NUMPY[dtype], out=out)
