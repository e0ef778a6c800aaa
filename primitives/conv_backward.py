"""2-D convolution, backward-data: the loop nest (see primitives/conv.py for the
layouts, the geometry and the plans that record this nest)."""
from brgemm import plan as bplan
from brgemm.layouts import Layout, matrix_tiles
from primitives._calls import blocks_per_call, record_grouped, slot_in_group
from primitives.conv_forward import columns_operands
from primitives.fc_nest import Product


def backward_nest(ex, loops, g, dtype, vnni=False, epilogue=None, tile=None):
    """dx[n][c][h][w] for the input's pixels w = first + sw*u of one residue class
    (one class per call) = sum over k and the taps (r, s) with h - r = sh*p and
    w - s = sw*q of dy[n][k][p][q] @ wt[c][k][r][s]; dy is read from its
    zero-bordered copy. Only the unpadded interior of dx is written. With
    g.span[1] (conv_plans.spans_rows: stride 1, so one class) h is the first
    interior row and the class's pixels are all H x W, in blocks of bs that
    run on across rows. epilogue(n, c, row, u0): the ops of a block's last
    call (row: its interior row); tile(task, j): where in dx the task sums
    its blocks, j (0 .. g.w_reuse[1] - 1) counting them in turn (the epilogue
    stores them), instead of their places. g.w_reuse[1] blocks of a task take
    each call's weight blocks in turn (_calls.record_grouped)."""
    dyp = Layout(N=g.N, Kb=g.Kb, Pp=g.Pp, Qp=g.Qp, bk=g.bk)  # dy at (bp, bw) in a zero border
    wt = Layout(Cb=g.Cb, Kb=g.Kb, R=g.R, S=g.S, bk=g.bk, bc=g.bc)
    dx = Layout(N=g.N, Cb=g.Cb, Hp=g.Hp, Wp=g.Wp, bc=g.bc)
    bq, rows = (g.bs, g.H) if g.span[1] else (g.bq, 1)

    blocks = {}  # (m, beta) -> its Block, made once (as forward_nest's)

    def block(m, beta):
        if (m, beta) not in blocks:  # C's rows: pixels sw apart
            blocks[m, beta] = bplan.Block(m, g.bc, g.bk, lda=dyp.ld("Qp"), ldb=wt.ld("bk"),
                                          ldc=g.sw * dx.ld("Wp"), dtype=dtype, beta=beta,
                                          b_vnni=vnni)
        return blocks[m, beta]
    slot = slot_in_group(g.w_reuse[1])

    def tiles():
        for phase, task, at in loops.walk():
            n, c, h, ru = at["n"], at["c"], g.ph + at["h"], at["u"]
            rho, u0 = ru % g.sw, (ru // g.sw) * bq     # loop u runs over residue x pixel block
            first = g.pw + (rho - g.pw) % g.sw         # the class's first interior pixel
            width = rows * len(range(first, g.pw + g.W, g.sw))
            if u0 >= width:
                continue
            m = min(bq, width - u0)
            taps = [(k, r, s) for k in range(g.Kb) for r in range(g.R) for s in range(g.S)
                    if (h - r) % g.sh == 0 and (first - s) % g.sw == 0
                    and 0 <= (h - r) // g.sh + g.bp < g.Pp]
            per_call = blocks_per_call(g.call_kb[1], (m + g.bc) * g.bk, dtype)
            to = dx.at(n, c, h, first + g.sw * u0) if tile is None else tile(task, slot(task))
            calls = []
            for i in range(0, len(taps), per_call) or [0]:  # no taps: one call zeroes the block
                last = epilogue is not None and i + per_call >= len(taps)
                calls.append((block(m, 0.0 if i == 0 else 1.0),
                              "dyp", [dyp.at(n, k, (h - r) // g.sh + g.bp,
                                             u0 + (first - s) // g.sw + g.bw)
                                      for k, r, s in taps[i:i + per_call]],
                              "wt", [wt.at(c, k, r, s) for k, r, s in taps[i:i + per_call]],
                              "dx", to, epilogue(n, c, h - g.ph, u0) if last else ()))
            yield phase, task, calls
    record_grouped(ex, tiles(), g.w_reuse[1])


def columns_data_product(g, bd, bp):
    """dx^c (N P Q x C R S, plain: the im2col matrix's gradient, transposed) =
    dy^t (N P Q x K, plain: each image's dy transposed) @ w (K x C R S, plain,
    read in place): the tiled product (primitives.fc_nest) of conv.columns'
    backward-data, before brgemm.im2col.columns_to_image sums dx^c into dx.
    No weight copy."""
    D, cols, weights, _, sizes = columns_operands(g, bd, bp)
    return Product("p", "d", "k", a=("dyt", matrix_tiles(cols, g.K, bp, g.bk, ("p", "k"),
                                                         plain=True)),
                   b=("w", weights), c=("dxc", matrix_tiles(cols, D, bp, bd, ("p", "d"),
                                                            plain=True)),
                   sizes=sizes, epilogue=())
