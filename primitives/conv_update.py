"""2-D convolution, weight update: the loop nests (see primitives/conv.py for
the layouts, the geometry and the plans that record these nests)."""
import dataclasses

from brgemm import plan as bplan
from brgemm.layouts import Layout, nblocks
from brgemm.lru import LRU
from primitives._calls import blocks_per_call
from primitives.conv_forward import columns_operands
from primitives.fc_nest import Product

UPDATE_ROW = 64  # the weight update reduces over whole output rows up to this width
SPAN = 256  # the flat update's reduction comes in chunks of about this many pixels
FLAT_TILE = 32  # the flat update's C blocks: at most this many rows and columns of a tile


def update_nest(ex, loops, g, dtype, dy_nchw=False):
    """dw[j][k][c][r][s] (bk x bc) = sum over the j-th share of the (n, p) rows and
    the q-blocks of dyt[n][k][p][:, q0:] @ the tap's x rows. Splitting the
    reduction into shares j (summed afterwards) gives the threads work when
    there are few weight tiles (1x1 layers with 64 channels have one).
    dy_nchw: dyt is dy [N,K,P,Q] itself (K whole blocks), its A rows P Q apart."""
    dyt = Layout(N=g.N, Kb=g.Kb, P=g.P, bk=g.bk, Q=g.Q)       # dy, pixels innermost
    if dy_nchw:
        dyt = Layout(N=g.N, Kb=g.Kb, bk=g.bk, P=g.P, Q=g.Q).transpose("N", "Kb", "P", "bk", "Q")
    x = Layout(N=g.N, Cb=g.Cb, Hp=g.Hp, Wp=g.Wp, bc=g.bc)
    dw = Layout(J=g.splits, Kb=g.Kb, Cb=g.Cb, R=g.R, S=g.S, bk=g.bk, bc=g.bc)
    for phase, task, (k, c, r, s, j), calls in _row_tasks(loops, g, dtype):
        ex.at(phase, task)
        for i, (m, pairs) in enumerate(calls):  # B's rows: pixels sw apart
            ex.gemm(bplan.Block(g.bk, g.bc, m, lda=dyt.ld("bk"), ldb=g.sw * x.ld("Wp"), ldc=g.bc,
                                dtype=dtype, beta=0.0 if i == 0 else 1.0),
                    "dyt", [dyt.at(n, k, p, 0, q0) for n, p, q0 in pairs],
                    "x", [x.at(n, c, p * g.sh + r, q0 * g.sw + s) for n, p, q0 in pairs],
                    "dw", dw.at(j, k, c, r, s))


def update_narrow_nest(ex, loops, g, dtype):
    """The weight update for layers with few input channels (bc < 16, e.g. the
    RGB input layer): there the tile above would have the channels as its
    vector dimension, so this computes dw^T[j][k][c][r][s] (bc x bk) = sum of
    x^T (bc x pixels) @ dy (pixels x bk), with x read from xs, a copy whose
    pixels are innermost and split by phase modulo the stride (so a tap's
    strided pixels are contiguous), and dy from its plain blocked layout."""
    xs = Layout(N=g.N, Cb=g.Cb, Hp=g.Hp, sw=g.sw, bc=g.bc, Ws=nblocks(g.Wp, g.sw))
    dyb = Layout(N=g.N, Kb=g.Kb, P=g.P, Q=g.Q, bk=g.bk)
    dw = Layout(J=g.splits, Kb=g.Kb, Cb=g.Cb, R=g.R, S=g.S, bc=g.bc, bk=g.bk)
    for phase, task, (k, c, r, s, j), calls in _row_tasks(loops, g, dtype):
        ex.at(phase, task)
        for i, (m, pairs) in enumerate(calls):
            ex.gemm(bplan.Block(g.bc, g.bk, m, lda=xs.ld("bc"), ldb=dyb.ld("Q"), ldc=g.bk,
                                dtype=dtype, beta=0.0 if i == 0 else 1.0),
                    "xs", [xs.at(n, c, p * g.sh + r, s % g.sw, 0, q0 + s // g.sw)
                           for n, p, q0 in pairs],
                    "dyb", [dyb.at(n, k, p, q0) for n, p, q0 in pairs],
                    "dw", dw.at(j, k, c, r, s))


def update_x_nest(ex, loops, g, dtype):
    """The weight update with x read in place (conv.reads_x: stride 1 across):
    dw^T[j][k][c][r][s] (bc x bk) = sum over the j-th share of the (n, p) rows
    of x[n][c-block][p sh + r - ph][q + s - pw] (bc x pixels: NCHW, rows H W
    apart) @ dyp[n][k][p + bp][q + bw] (pixels x bk: backward-data's bordered
    dy). Each tap's runs of q are clipped to x's real pixels and its rows to
    x's real rows (x_rows): the padding only adds zero products."""
    dyp = Layout(N=g.N, Kb=g.Kb, Pp=g.Pp, Qp=g.Qp, bk=g.bk)
    dw = Layout(J=g.splits, Kb=g.Kb, Cb=g.Cb, R=g.R, S=g.S, bc=g.bc, bk=g.bk)
    rows = x_rows(g)
    for phase, task, at in loops.walk():
        k, c, r, s, j = (at[n] for n in ("k", "c", "r", "s", "j"))
        q0, q1 = max(0, g.pw - s), min(g.Q, g.W + g.pw - s)  # the tap's real pixels
        ex.at(phase, task)
        for i, (m, pairs) in enumerate(_update_calls(g, rows[j][r], dtype, q0, q1)):
            ex.gemm(bplan.Block(g.bc, g.bk, m, lda=g.H * g.W, ldb=g.bk, ldc=g.bk, dtype=dtype,
                                beta=0.0 if i == 0 else 1.0),
                    "x", [((n * g.C + c * g.bc) * g.H + p * g.sh + r - g.ph) * g.W + q + s - g.pw
                          for n, p, q in pairs],
                    "dyp", [dyp.at(n, k, p + g.bp, q + g.bw, 0) for n, p, q in pairs],
                    "dw", dw.at(j, k, c, r, s))


def x_rows(g):
    """rows[j][r]: the (n, p) output rows of the update's j-th share whose tap
    row r reads a real row of x (update_x_nest); an empty list where none does."""
    rows = [(n, p) for n in range(g.N) for p in range(g.P)]
    share = -(-len(rows) // g.splits)
    return [[[(n, p) for n, p in rows[j * share:(j + 1) * share] if 0 <= p * g.sh + r - g.ph < g.H]
             for r in range(g.R)] for j in range(g.splits)]


def _row_tasks(loops, g, dtype):
    """The walk update_nest and update_narrow_nest share: per task, (phase,
    task, its weight tile (k, c, r, s, j), the tile's calls over its share
    of the (n, p) output rows as _update_calls makes them)."""
    rows = [(n, p) for n in range(g.N) for p in range(g.P)]
    share = -(-len(rows) // g.splits)
    for phase, task, at in loops.walk():
        j = at["j"]
        yield (phase, task, (at["k"], at["c"], at["r"], at["s"], j),
               _update_calls(g, rows[j * share:(j + 1) * share], dtype))


def _update_calls(g, rows, dtype, q0=0, q1=None):
    """The weight update's kernel calls for one tile and share of rows: lists of
    (pixels per block, [(n, p, q0), ...]) whose blocks all accumulate into the
    tile. Whole output rows (their pixels q0 to q1) up to UPDATE_ROW pixels are
    one block; a short last block gets calls of its own; each call reads at
    most about the pass's call_kb KiB of A and B (primitives/_calls.py)."""
    q1 = g.Q if q1 is None else q1
    run = q1 - q0
    bq = run if run <= UPDATE_ROW else g.bq
    full = [(q, bq) for q in range(q0, q1 - bq + 1, bq)]
    rest = [(q, q1 - q) for q in range(q0 + len(full) * bq, q1, bq)]
    calls = []
    for blocks in (full, rest):
        if blocks:
            m = blocks[0][1]
            pairs = [(n, p, q) for n, p in rows for q, _ in blocks]
            per_call = blocks_per_call(g.call_kb[2], (g.bk + g.bc) * m, dtype)
            calls += [(m, pairs[i:i + per_call]) for i in range(0, len(pairs), per_call)]
    return calls


def narrow(g):
    """Few input channels: the weight update takes update_narrow_nest."""
    return g.bc < 16


# ---------------------------------------------------------------- the flat update
#
# Output rows of 7 or 14 pixels give the row nests blocks of depth 7 or 14:
# an AMX tile product takes 32. The flat nest reduces over runs of pixels that
# span rows instead. With x split into phase planes of the stride (xf
# [N][Cb][sh][sw][bc][L], pixel (i, j) of phase (a, b) at i * Ws + j) and dy
# flattened to the same row width Ws (dyf [N][Kb][Lt][bk], zero in columns
# Q..Ws-1 and after the last row), output pixel t = p * Ws + q meets tap (r, s)
# at xf's plane (r % sh, s % sw), element t + (r // sh) * Ws + s // sw: one
# offset per tap, so any run of t is one block, its x rows contiguous. The
# columns past Q cost Ws / Q more products (9 / 7 on 7 x 7 layers with a 3 x 3
# kernel) against k slots otherwise 7 / 32 full.
#
# dw^T tiles (bc x bk, as the narrow nest's) are tasks; where they are too few
# for the config's `tiles`, C blocks of at most FLAT_TILE x FLAT_TILE are: the
# AMX kernel walks macro blocks of that size over all of a call's blocks
# anyway, so separate tasks stream no more and give the threads 4 times the
# tasks without more shares to sum.


def flat_chunks(P, Ws):
    """(chunks per image, pixels per chunk: a multiple of 32) for P rows of Ws."""
    T = P * Ws
    chunks = -(-T // SPAN)
    return chunks, -(-(-(-T // chunks)) // 32) * 32


@dataclasses.dataclass(frozen=True)
class FlatLayout:
    Hs: int  # rows and columns of a phase plane
    Ws: int
    chunks: int  # of each image's flattened output pixels
    Tc: int  # pixels per chunk
    L: int  # elements per plane of xf: the planes, and every tap's furthest read
    Pt: int  # rows of Ws pixels per (image, channel block) of dyf: P, zeros after

    Lt = property(lambda f: f.Pt * f.Ws)  # pixels per (image, channel block) of dyf: even


def flat_sizes(P, Hp, Wp, R, S, sh, sw):
    """The FlatLayout of output rows P, a padded input Hp x Wp, an R x S kernel
    and strides sh, sw."""
    Hs, Ws = nblocks(Hp, sh), nblocks(Wp, sw)
    chunks, Tc = flat_chunks(P, Ws)
    reach = ((R - 1) // sh) * Ws + (S - 1) // sw + chunks * Tc
    L = -(-max(Hs * Ws, reach) // 32) * 32
    Pt = nblocks(chunks * Tc, Ws)
    return FlatLayout(Hs, Ws, chunks, Tc, L, Pt + Pt * Ws % 2)  # VNNI pairs: an even Lt


_flat_layouts = LRU(64)  # geometry -> its FlatLayout


def flat_layout(g):
    return _flat_layouts.get_or_make(g, lambda: flat_sizes(g.P, g.Hp, g.Wp, g.R, g.S, g.sh, g.sw))


def flat_parts(g):
    """C blocks per tile along bc and bk in the flat nest (its c and k loops
    count them): of FLAT_TILE where the geometry has too few tiles for its
    threads (g.parts), else one."""
    return (nblocks(g.bc, FLAT_TILE), nblocks(g.bk, FLAT_TILE)) if g.parts else (1, 1)


def update_flat_nest(ex, loops, g, dtype, vnni=False):
    """dw^T[j][k][c][r][s] (bc x bk, by C blocks) = sum over the j-th share of
    the (image, chunk) units of xf's tap run (bc x Tc) @ dyf's (Tc x bk), in
    VNNI pairs with vnni. See the section comment above."""
    f = flat_layout(g)
    units = [(n, u) for n in range(g.N) for u in range(f.chunks)]
    share = -(-len(units) // g.splits)
    parts_c, parts_k = flat_parts(g)
    xf = Layout(N=g.N, Cb=g.Cb, sh=g.sh, sw=g.sw, bc=g.bc, L=f.L)
    # dyf's rows, in VNNI pairs of rows with vnni (f.Lt and f.Tc are even)
    dyf = (Layout(N=g.N, Kb=g.Kb, Lt2=f.Lt // 2, bk=g.bk, pair=2) if vnni else
           Layout(N=g.N, Kb=g.Kb, Lt=f.Lt, bk=g.bk))
    chunk_rows = f.Tc // 2 if vnni else f.Tc
    dw = Layout(J=g.splits, Kb=g.Kb, Cb=g.Cb, R=g.R, S=g.S, bc=g.bc, bk=g.bk)
    for phase, task, at in loops.walk():
        (k, k0), (c, c0) = divmod(at["k"], parts_k), divmod(at["c"], parts_c)
        r, s, j = at["r"], at["s"], at["j"]
        size = FLAT_TILE if g.parts else max(g.bc, g.bk)
        k0, c0 = k0 * size, c0 * size
        m, n_ = min(size, g.bc - c0), min(size, g.bk - k0)
        mine = units[j * share:(j + 1) * share]
        tap = (r // g.sh) * f.Ws + s // g.sw
        ex.at(phase, task)
        per_call = blocks_per_call(g.call_kb[2], (m + n_) * f.Tc, dtype)
        for i in range(0, len(mine), per_call):
            part = mine[i:i + per_call]
            ex.gemm(bplan.Block(m, n_, f.Tc, lda=xf.ld("bc"), ldb=g.bk, ldc=dw.ld("bc"),
                                dtype=dtype, beta=0.0 if i == 0 else 1.0, b_vnni=vnni),
                    "xf", [xf.at(n, c, r % g.sh, s % g.sw, c0, tap + u * f.Tc) for n, u in part],
                    "dyf", [dyf.at(n, k, u * chunk_rows, k0) for n, u in part],
                    "dw", dw.at(j, k, c, r, s, c0, k0))


def update_form(g):
    """Which nest the weight update records: "flat" (update_flat_nest, where
    the config asks), "narrow" (update_narrow_nest) or "rows" (update_nest)."""
    return "flat" if g.flat else "narrow" if narrow(g) else "rows"


def c_rows(g):
    """Whether the update's tiles are dw^T (bc x bk) rather than dw (bk x bc)."""
    return update_form(g) != "rows"



def columns_update_product(g, bd, bp):
    """dw (K x C R S, plain: the weights' own layout) = dy (read in place:
    [N][K][P Q], each image's K x P Q block one block of the reduction) @ the
    im2col matrix's transpose, as tiles xct [Db][N][P Q][bd] (bp: P Q, one
    image a pixel block): the tiled product (primitives.fc_nest) of the update
    conv.columns' layers take. No copy of dy nor of dw, and no shares; the
    reduction runs over all images' pixels."""
    PQ = g.P * g.Q
    if bp != PQ:
        raise ValueError(f"bp: the update's pixel blocks are whole images, P Q = {PQ}, got {bp}")
    D, cols, weights, _, sizes = columns_operands(g, bd, bp)
    dy = Layout((g.bk * PQ, g.K * PQ, PQ, 1), k=nblocks(g.K, g.bk), p=g.N, bk=g.bk, bp=PQ)
    xct = Layout(d=nblocks(D, bd), p=nblocks(cols, bp), bp=bp, bd=bd)
    return Product("k", "d", "p", a=("dy", dy), b=("xct", xct.transpose("p", "d", "bp", "bd")),
                   c=("dw", weights), sizes=sizes, epilogue=())


def pointwise_update_nest(ex, loops, g, dtype, bp, shares):
    """The weight update of a 1x1 layer with stride 1 and no padding (see
    conv.pointwise_update): dw[j] (K x C, plain: w's own layout) = sum over
    the j-th of `shares` parts of the (image, pixel block) pairs of dy[n] (K
    x HW, plain NCHW, read in place as the broadcast operand, rows HW apart)
    @ x[n]'s pixels transposed, as tiles xt [HWb][N * C / bx][bp][bx]
    (brgemm.layouts.to_blocks of x's rows, transposed; bx = pointwise_x_block).
    Ragged last pixel blocks in calls of their own; no copy of dy and no
    weight tiles to unblock."""
    HW, bx = g.H * g.W, pointwise_x_block(g)
    dy = Layout(N=g.N, K=g.K, HW=HW)
    xt = Layout(HWb=nblocks(HW, bp), N=g.N, Cx=g.C // bx, bp=bp, bx=bx)
    dw = Layout(J=shares, K=g.K, C=g.C)
    units = [(n, p) for n in range(g.N) for p in range(nblocks(HW, bp))]
    share = -(-len(units) // shares)
    for phase, task, at in loops.walk():
        k, c, j = at["k"], at["c"], at["j"]
        m, width = min(g.bk, g.K - k * g.bk), min(g.bc, g.C - c * g.bc)
        cx, col = divmod(c * g.bc, bx)  # x's tile and column of the block's first channel
        mine = units[j * share:(j + 1) * share]
        ex.at(phase, task)
        calls = []
        for depth in sorted({min(bp, HW - p * bp) for _, p in mine}, reverse=True):
            part = [(n, p) for n, p in mine if min(bp, HW - p * bp) == depth]
            per_call = blocks_per_call(g.call_kb[2], (g.bk + g.bc) * depth, dtype)
            calls += [(depth, part[i:i + per_call]) for i in range(0, len(part), per_call)]
        for i, (depth, part) in enumerate(calls):
            ex.gemm(bplan.Block(m, width, depth, lda=dy.ld("K"), ldb=bx, ldc=dw.ld("K"),
                                dtype=dtype, beta=0.0 if i == 0 else 1.0),
                    "dy", [dy.at(n, k * g.bk, p * bp) for n, p in part],
                    "xt", [xt.at(p, n, cx, 0, col) for n, p in part],
                    "dw", dw.at(j, k * g.bk, c * g.bc))


def pointwise_x_block(g):
    """The channels per tile of pointwise_update_nest's transposed x: bc where
    it divides C (tiles of one image each; a transposed copy into C-wide
    rows runs at half the speed), else C."""
    return g.bc if g.C % g.bc == 0 else g.C
