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
