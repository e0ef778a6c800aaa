"""2-D convolution, forward: the loop nest (see primitives/conv.py for the
layouts, the geometry and the plans that record this nest)."""
from brgemm import plan as bplan
from primitives._calls import blocks_per_call


def forward_nest(ex, loops, g, dtype, vnni=False):
    """y[n][k][p][q0:q0+bq] = sum_{c, r, s} x[n][c][p*sh + r][(q0 + i)*sw + s] @ w[k][c][r][s]."""
    for phase, task, at in loops.walk():
        n, k, p, q0 = at["n"], at["k"], at["p"], at["q"]
        m = min(g.bq, g.Q - q0)
        ex.at(phase, task)
        taps = [(c, r, s) for c in range(g.Cb) for r in range(g.R) for s in range(g.S)]
        per_call = blocks_per_call(g.call_kb[0], (m + g.bk) * g.bc, dtype)
        for i in range(0, len(taps), per_call):
            ex.gemm(bplan.Block(m, g.bk, g.bc, lda=g.sw * g.bc, ldb=g.bk, ldc=g.bk, dtype=dtype,
                                beta=0.0 if i == 0 else 1.0, b_vnni=vnni),
                    "x", [(((n * g.Cb + c) * g.Hp + p * g.sh + r) * g.Wp + q0 * g.sw + s) * g.bc
                          for c, r, s in taps[i:i + per_call]],
                    "w", [(((k * g.Cb + c) * g.R + r) * g.S + s) * g.bc * g.bk
                          for c, r, s in taps[i:i + per_call]],
                    "y", (((n * g.Kb + k) * g.P + p) * g.Q + q0) * g.bk)


def pointwise_nest(ex, loops, g, dtype, bp):
    """1x1, stride 1, no padding, C a multiple of bc (see conv.pointwise): per
    image y[n] (K x HW, plain NCHW) = w (K x C, plain, read in place as the
    broadcast operand) @ x[n] (C x HW), x as tiles xt [HWb][N*Cb][bc][bp]
    (pixels innermost). No weight copy and no copy of y."""
    HW, Cb = g.H * g.W, g.Cb
    per_call = blocks_per_call(g.call_kb[0], (g.bk + bp) * g.bc, dtype)
    for phase, task, at in loops.walk():
        n, k, p = at["n"], at["k"], at["p"]
        m, width = min(g.bk, g.K - k * g.bk), min(bp, HW - p * bp)
        ex.at(phase, task)
        for c0 in range(0, Cb, per_call):
            cs = range(c0, min(c0 + per_call, Cb))
            ex.gemm(bplan.Block(m, width, g.bc, lda=g.C, ldb=bp, ldc=HW, dtype=dtype,
                                beta=0.0 if c0 == 0 else 1.0),
                    "w", [k * g.bk * g.C + c * g.bc for c in cs],
                    "xt", [((p * g.N + n) * Cb + c) * g.bc * bp for c in cs],
                    "y", (n * g.K + k * g.bk) * HW + p * bp)
