"""Fully connected layers, backward-data: the blocked nest and the plain one (see
primitives/fc.py for the layouts, the geometry and the plans that record them)."""
import dataclasses

from brgemm import plan as bplan
from primitives._calls import reduction_calls


def backward_nest(ex, loops, g, dtype, epilogue, vnni=False):
    """dx[n][c] = sum_k dy[n][k] @ wt[c][k]"""
    first = bplan.Block(g.bn, g.bc, g.bk, lda=g.bk, ldb=g.bc, ldc=g.bc, dtype=dtype, beta=0.0,
                        b_vnni=vnni)
    rest = dataclasses.replace(first, beta=1.0)
    for phase, task, at in loops.walk():
        n, c, k0 = at["n"], at["c"], at["k"]
        ks = range(k0, min(k0 + g.chunk["bwd"], g.Kb))
        ex.at(phase, task)
        ex.gemm(first if k0 == 0 else rest,
                "dy", [(n * g.Kb + k) * g.bn * g.bk for k in ks],
                "wt", [(c * g.Kb + k) * g.bk * g.bc for k in ks],
                "dx", (n * g.Cb + c) * g.bn * g.bc,
                ops=epilogue(n, c) if ks[-1] == g.Kb - 1 else ())


def backward_plain_nest(ex, loops, g, dtype, epilogue, vnni=False):
    """dx (N x C) = dy (N x K) @ W from wt tiles."""
    for phase, task, at in loops.walk():
        n, c, k0 = at["n"], at["c"], at["k"]
        m, width = min(g.bn, g.N - n * g.bn), min(g.bc, g.C - c * g.bc)
        ex.at(phase, task)
        for ks, depth in reduction_calls(range(k0, min(k0 + g.chunk["bwd"], g.Kb)), g.Kb, g.K, g.bk):
            ex.gemm(bplan.Block(m, width, depth, lda=g.K, ldb=g.bc, ldc=g.C, dtype=dtype,
                                beta=0.0 if ks[0] == 0 else 1.0, b_vnni=vnni),
                    "dy", [n * g.bn * g.K + k * g.bk for k in ks],
                    "wt", [(c * g.Kb + k) * g.bk * g.bc for k in ks],
                    "dx", n * g.bn * g.C + c * g.bc,
                    ops=epilogue(n, c) if ks[-1] == g.Kb - 1 else ())
