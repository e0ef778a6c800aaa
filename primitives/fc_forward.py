"""Fully connected layers, forward: the blocked nest and the plain one (see
primitives/fc.py for the layouts, the geometry and the plans that record them)."""
import dataclasses

from brgemm import plan as bplan
from primitives._calls import reduction_calls


def forward_nest(ex, loops, g, dtype, epilogue, vnni=False):
    """y[n][k] = sum_c x[n][c] @ w[k][c]; epilogue(n, k) runs on the last c chunk."""
    first = bplan.Block(g.bn, g.bk, g.bc, lda=g.bc, ldb=g.bk, ldc=g.bk, dtype=dtype, beta=0.0,
                        b_vnni=vnni)
    rest = dataclasses.replace(first, beta=1.0)
    for phase, task, at in loops.walk():
        n, k, c0 = at["n"], at["k"], at["c"]
        cs = range(c0, min(c0 + g.chunk["fwd"], g.Cb))
        ex.at(phase, task)
        ex.gemm(first if c0 == 0 else rest,
                "x", [(n * g.Cb + c) * g.bn * g.bc for c in cs],
                "w", [(k * g.Cb + c) * g.bc * g.bk for c in cs],
                "y", (n * g.Kb + k) * g.bn * g.bk,
                ops=epilogue(n, k) if cs[-1] == g.Cb - 1 else ())


def forward_plain_nest(ex, loops, g, dtype, epilogue, vnni=False):
    """y (N x K) = x (N x C) @ W^T from w tiles; epilogue(n, k) on the last c."""
    for phase, task, at in loops.walk():
        n, k, c0 = at["n"], at["k"], at["c"]
        m, width = min(g.bn, g.N - n * g.bn), min(g.bk, g.K - k * g.bk)
        ex.at(phase, task)
        for cs, depth in reduction_calls(range(c0, min(c0 + g.chunk["fwd"], g.Cb)), g.Cb, g.C, g.bc):
            ex.gemm(bplan.Block(m, width, depth, lda=g.C, ldb=g.bk, ldc=g.K, dtype=dtype,
                                beta=0.0 if cs[0] == 0 else 1.0, b_vnni=vnni),
                    "x", [n * g.bn * g.C + c * g.bc for c in cs],
                    "w", [(k * g.Cb + c) * g.bc * g.bk for c in cs],
                    "y", n * g.bn * g.K + k * g.bk,
                    ops=epilogue(n, k) if cs[-1] == g.Cb - 1 else ())
