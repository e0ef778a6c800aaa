"""2-D convolution, weight update: the loop nests (see primitives/conv.py for
the layouts, the geometry and the plans that record these nests)."""
from brgemm import plan as bplan
from brgemm.layouts import nblocks
from primitives._calls import blocks_per_call

UPDATE_ROW = 64  # the weight update reduces over whole output rows up to this width


def update_nest(ex, loops, g, dtype):
    """dw[j][k][c][r][s] (bk x bc) = sum over the j-th share of the (n, p) rows and
    the q-blocks of dyt[n][k][p][:, q0:] @ the tap's x rows. Splitting the
    reduction into shares j (summed afterwards) gives the threads work when
    there are few weight tiles (1x1 layers with 64 channels have one)."""
    rows = [(n, p) for n in range(g.N) for p in range(g.P)]
    share = -(-len(rows) // g.splits)
    for phase, task, at in loops.walk():
        k, c, r, s, j = at["k"], at["c"], at["r"], at["s"], at["j"]
        mine = rows[j * share:(j + 1) * share]
        ex.at(phase, task)
        for i, (m, pairs) in enumerate(_update_calls(g, mine, dtype)):
            ex.gemm(bplan.Block(g.bk, g.bc, m, lda=g.Q, ldb=g.sw * g.bc, ldc=g.bc, dtype=dtype,
                                beta=0.0 if i == 0 else 1.0),
                    "dyt", [(((n * g.Kb + k) * g.P + p) * g.bk) * g.Q + q0 for n, p, q0 in pairs],
                    "x", [(((n * g.Cb + c) * g.Hp + p * g.sh + r) * g.Wp + q0 * g.sw + s) * g.bc
                          for n, p, q0 in pairs],
                    "dw", ((((j * g.Kb + k) * g.Cb + c) * g.R + r) * g.S + s) * g.bk * g.bc)


def update_narrow_nest(ex, loops, g, dtype):
    """The weight update for layers with few input channels (bc < 16, e.g. the
    RGB input layer): there the tile above would have the channels as its
    vector dimension, so this computes dw^T[j][k][c][r][s] (bc x bk) = sum of
    x^T (bc x pixels) @ dy (pixels x bk), with x read from xs, a copy whose
    pixels are innermost and split by phase modulo the stride (so a tap's
    strided pixels are contiguous), and dy from its plain blocked layout."""
    rows = [(n, p) for n in range(g.N) for p in range(g.P)]
    share = -(-len(rows) // g.splits)
    Ws = nblocks(g.Wp, g.sw)
    for phase, task, at in loops.walk():
        k, c, r, s, j = at["k"], at["c"], at["r"], at["s"], at["j"]
        mine = rows[j * share:(j + 1) * share]
        ex.at(phase, task)
        for i, (m, pairs) in enumerate(_update_calls(g, mine, dtype)):
            ex.gemm(bplan.Block(g.bc, g.bk, m, lda=Ws, ldb=g.bk, ldc=g.bk, dtype=dtype,
                                beta=0.0 if i == 0 else 1.0),
                    "xs", [((((n * g.Cb + c) * g.Hp + p * g.sh + r) * g.sw + s % g.sw) * g.bc) * Ws
                           + q0 + s // g.sw for n, p, q0 in pairs],
                    "dyb", [(((n * g.Kb + k) * g.P + p) * g.Q + q0) * g.bk for n, p, q0 in pairs],
                    "dw", ((((j * g.Kb + k) * g.Cb + c) * g.R + r) * g.S + s) * g.bk * g.bc)


def _update_calls(g, rows, dtype):
    """The weight update's kernel calls for one tile and share of rows: lists of
    (pixels per block, [(n, p, q0), ...]) whose blocks all accumulate into the
    tile. Whole output rows up to UPDATE_ROW pixels are one block; a short last
    block gets calls of its own; each call reads at most about the pass's
    call_kb KiB of A and B (primitives/_calls.py)."""
    bq = g.Q if g.Q <= UPDATE_ROW else g.bq
    full = [(q0, bq) for q0 in range(0, g.Q - bq + 1, bq)]
    rest = [(q0, g.Q - q0) for q0 in range(len(full) * bq, g.Q, bq)]
    calls = []
    for blocks in (full, rest):
        if blocks:
            m = blocks[0][1]
            pairs = [(n, p, q0) for n, p in rows for q0, _ in blocks]
            per_call = blocks_per_call(g.call_kb[2], (g.bk + g.bc) * m, dtype)
            calls += [(m, pairs[i:i + per_call]) for i in range(0, len(pairs), per_call)]
    return calls


def narrow(g):
    """Few input channels: the weight update takes update_narrow_nest."""
    return g.bc < 16
