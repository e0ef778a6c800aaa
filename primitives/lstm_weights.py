"""The LSTM layer's weight copies (lstm_layer.LSTM): which operands its kernel
path reads in VNNI pairs, W_ih^T's and W_hh^T's tiles for the forward, and
the tiles' transposes for the backward."""
import numpy as np

from brgemm import dtypes
from brgemm.arrays import aligned_empty
from brgemm.layouts import to_blocks, transpose_blocks
from brgemm.vnni import takes_vnni_b
from primitives._args import widened


def vnni_operands(g, dtype, backend):
    """What this layer keeps in VNNI pairs here (AMX): "x" the W_ih tiles the
    input projection reads (depth bc), "h" every W_hh tile and W_ih^T (depth
    bk), "upd" dG for the weight updates (depth bn, repacked once per call)."""
    depth = {"x": g.bc, "h": g.bk, "upd": g.bn}
    return frozenset(o for o, k in depth.items() if takes_vnni_b(k, dtype, backend))


def block_weights(w_ih, w_hh, b, g, dtype, vnni=frozenset(), buffer=None, skip=frozenset()):
    """The layer's blocked weights for the forward: wx (W_ih^T tiles,
    [4Kb][Cb][bc][bk]), wh (W_hh^T tiles, [4Kb][Kb][bk][bk]) and bp (b with each
    gate padded to Kp). Each gate straight from its rows of the plain weights,
    rounded to bf16 and packed in VNNI pairs where `vnni` says so (AMX: "x"
    for wx, "h" for wh) on the way, one parallel pass per copy. The
    backward's tiles of the untransposed weights (w_ih_tiles, w_hh_tiles) are
    made when first asked for (LSTM.w_ih_tiles, LSTM.w_hh_tiles): a forward
    alone never pays for them.
    buffer(name, shape, dtype): where each copy goes (default: new arrays).
    skip: "wx", "wh" not made (None): their weight read in place
    (lstm_strips.reads_in_place: W read as it is, no copy)."""
    ab, Kb, K = dtypes.NUMPY[dtype], g.Kb, g.K
    w_ih, w_hh = widened(w_ih, ab), widened(w_hh, ab)
    buffer = buffer or (lambda name, shape, dt: aligned_empty(shape, dt))
    wx = None if "wx" in skip else buffer("wx", (4 * Kb, g.Cb, g.bc, g.bk), ab)
    wh = None if "wh" in skip else buffer("wh", (4 * Kb, Kb, g.bk, g.bk), ab)
    # gates of whole hidden blocks (K % bk == 0) need no padding of their own:
    # each matrix in one copy, else gate by gate
    gates = [slice(0, 4 * K)] if K % g.bk == 0 else [slice(q * K, (q + 1) * K) for q in range(4)]
    for rows in gates:
        tiles = slice(rows.start // K * Kb, rows.stop // K * Kb)
        if wx is not None:
            to_blocks(w_ih[rows], g.bc, g.bk, transpose=True, swap_grid=True, dtype=ab,
                      vnni="x" in vnni, out=wx[tiles])
        if wh is not None:
            to_blocks(w_hh[rows], g.bk, g.bk, transpose=True, swap_grid=True, dtype=ab,
                      vnni="h" in vnni, out=wh[tiles])
    bp = buffer("bp", (4, g.Kp), np.float32)
    if g.Kp > K:
        bp[:, K:] = 0
    bp[:, :K] = b.reshape(4, K)
    return dict(wx=wx, wh=wh, bp=bp.reshape(-1))


def transpose_tiles(t, name, buffer=None):
    """transpose_blocks(t) into buffer(name, ...) (block_weights' buffer), or new."""
    Rb, Sb, br, bs = t.shape
    return transpose_blocks(t, out=buffer(name, (Sb, Rb, bs, br), t.dtype) if buffer else None)
