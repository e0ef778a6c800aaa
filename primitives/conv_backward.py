"""2-D convolution, backward-data: the loop nest (see primitives/conv.py for the
layouts, the geometry and the plans that record this nest)."""
from brgemm import plan as bplan
from primitives._calls import blocks_per_call


def backward_nest(ex, loops, g, dtype, vnni=False):
    """dx[n][c][h][w] for the input's pixels w = first + sw*u of one residue class
    (one class per call) = sum over k and the taps (r, s) with h - r = sh*p and
    w - s = sw*q of dy[n][k][p][q] @ wt[c][k][r][s]; dy is read from its
    zero-bordered copy. Only the unpadded interior of dx is written."""
    for phase, task, at in loops.walk():
        n, c, h, ru = at["n"], at["c"], g.ph + at["h"], at["u"]
        rho, u0 = ru % g.sw, (ru // g.sw) * g.bq   # loop u runs over residue x pixel block
        first = g.pw + (rho - g.pw) % g.sw         # the class's first interior pixel
        width = len(range(first, g.pw + g.W, g.sw))
        if u0 >= width:
            continue
        m = min(g.bq, width - u0)
        taps = [(k, r, s) for k in range(g.Kb) for r in range(g.R) for s in range(g.S)
                if (h - r) % g.sh == 0 and (first - s) % g.sw == 0
                and 0 <= (h - r) // g.sh + g.bp < g.Pp]
        ex.at(phase, task)
        dy_at = lambda k, r, s: ((((n * g.Kb + k) * g.Pp + (h - r) // g.sh + g.bp) * g.Qp  # noqa: E731
                                  + u0 + (first - s) // g.sw + g.bw) * g.bk)
        per_call = blocks_per_call(g.call_kb[1], (m + g.bc) * g.bk, dtype)
        for i in range(0, len(taps), per_call) or [0]:  # no taps: one call zeroes the block
            ex.gemm(bplan.Block(m, g.bc, g.bk, lda=g.bk, ldb=g.bc, ldc=g.sw * g.bc, dtype=dtype,
                                beta=0.0 if i == 0 else 1.0, b_vnni=vnni),
                    "dyp", [dy_at(k, r, s) for k, r, s in taps[i:i + per_call]],
                    "wt", [(((c * g.Kb + k) * g.R + r) * g.S + s) * g.bk * g.bc
                           for k, r, s in taps[i:i + per_call]],
                    "dx", (((n * g.Cb + c) * g.Hp + h) * g.Wp + first + g.sw * u0) * g.bc)
