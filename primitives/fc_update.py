"""Fully connected layers, weight update: the blocked nest and the plain one (see
primitives/fc.py for the layouts, the geometry and the plans that record them)."""
import dataclasses

from brgemm import plan as bplan


def update_nest(ex, loops, g, dtype, epilogue, vnni=False):
    """dw[k][c] = sum_n xt[c][n] @ dy[n][k]: the minibatch is the reduction."""
    first = bplan.Block(g.bc, g.bk, g.bn, lda=g.bn, ldb=g.bk, ldc=g.bk, dtype=dtype, beta=0.0,
                        b_vnni=vnni)
    rest = dataclasses.replace(first, beta=1.0)
    for phase, task, at in loops.walk():
        k, c, n0 = at["k"], at["c"], at["n"]
        ns = range(n0, min(n0 + g.chunk["upd"], g.Nb))
        ex.at(phase, task)
        ex.gemm(first if n0 == 0 else rest,
                "xt", [(c * g.Nb + n) * g.bc * g.bn for n in ns],
                "dy", [(n * g.Kb + k) * g.bn * g.bk for n in ns],
                "dw", (k * g.Cb + c) * g.bc * g.bk,
                ops=epilogue(k, c) if ns[-1] == g.Nb - 1 else ())


def update_plain_nest(ex, loops, g, dtype, epilogue, vnni=False):
    """dW (K x C) = dy^T (tiles) @ x (tiles): both zero-padded, so the reduction
    needs no ragged call; only dW's edges are."""
    for phase, task, at in loops.walk():
        k, c, n0 = at["k"], at["c"], at["n"]
        m, width = min(g.bk, g.K - k * g.bk), min(g.bc, g.C - c * g.bc)
        ns = range(n0, min(n0 + g.chunk["upd"], g.Nb))
        ex.at(phase, task)
        ex.gemm(bplan.Block(m, width, g.bn, lda=g.bn, ldb=g.bc, ldc=g.C, dtype=dtype,
                            beta=0.0 if n0 == 0 else 1.0, b_vnni=vnni),
                "dyt", [(k * g.Nb + n) * g.bk * g.bn for n in ns],
                "x", [(n * g.Cb + c) * g.bn * g.bc for n in ns],
                "dw", k * g.bk * g.C + c * g.bc,
                ops=epilogue(k, c) if ns[-1] == g.Nb - 1 else ())
