"""What recording and replaying a loop nest costs, and what threads buy.

Table 1, overhead: the GEMM loop nest of primitives/gemm.py (the docs' first
example) replayed by Plan.run on one thread, against the same kernel calls
run back to back from a plain C loop (Plan.time_bare: no OpenMP, no epilogue
dispatch, no Python) and against running the nest eagerly from Python.
Table 2, scaling: FC forward, layer path, 1 thread against 2 (or --threads)."""
import numpy as np

import brgemm
from benchmarks.common import interleaved, machine
from brgemm.layouts import to_blocks
from primitives import fc, gemm

GEMMS = [  # M, N, K, blocks bm, bn, bk: from large blocks to many small calls
    (512, 512, 512, 32, 64, 64),
    (256, 256, 256, 16, 32, 32),
    (128, 128, 64, 8, 16, 16),
]
FC_SCALING = [(256, 4096, 4096), (1024, 1024, 1024), (256, 768, 3072)]


def overhead(quick=False):
    rng = np.random.default_rng()
    print(f"plan replay vs kernel calls from C, 1 thread, {machine()}")
    print(f"{'M x N x K (bm,bn,bk)':<28}{'calls':>7}{'C loop ms':>10}{'replay ms':>10}"
          f"{'C/replay':>9}{'eager ms':>9}")
    for M, N, K, bm, bn, bk in GEMMS[:2] if quick else GEMMS:
        cfg = {"fwd": {"spec": "IJk", "bm": bm, "bn": bn, "bk": bk, "kc": 4096 // bk * bk}}
        p = gemm.plan(M, N, K, config=cfg)
        arrays = dict(A=rng.standard_normal((M, K)).astype(np.float32),
                      B=rng.standard_normal((K, N)).astype(np.float32),
                      C=brgemm.aligned_empty((M, N), np.float32))
        (t_bare, t_replay), _ = interleaved([lambda: p.time_bare(1, **arrays),
                                             lambda: p.run(threads=1, **arrays)], reps=9)
        (t_eager,), _ = interleaved([lambda: gemm.forward(arrays["A"], arrays["B"], config=cfg,
                                                          eager=True)], reps=3)
        print(f"{f'{M}x{N}x{K} ({bm},{bn},{bk})':<28}{len(p.calls):>7}{t_bare * 1e3:>10.3f}"
              f"{t_replay * 1e3:>10.3f}{t_bare / t_replay:>9.3f}{t_eager * 1e3:>9.2f}", flush=True)


def scaling(threads=2, quick=False):
    rng = np.random.default_rng()
    print(f"FC forward, layer path, 1 vs {threads} threads, {machine()}")
    print(f"{'N x C x K':<20}{'1 thr GF/s':>11}{f'{threads} thr GF/s':>11}{'speedup':>9}")
    for N, C, K in FC_SCALING[:1] if quick else FC_SCALING:
        lin = fc.Linear(C, K, rng=rng)
        g = lin.prepare(N)
        xb = to_blocks(rng.standard_normal((N, C)).astype(np.float32), g.bn, g.bc)
        fwd = lin.plans["fwd"]
        t = dict(x=xb, w=lin.w, y=lin.y, b=lin.b)
        (t1, tn), _ = interleaved([lambda: fwd.run(threads=1, **t),
                                   lambda: fwd.run(threads=threads, **t)], reps=7)
        f = 2.0 * N * C * K
        print(f"{f'{N}x{C}x{K}':<20}{f / t1 * 1e-9:>11.1f}{f / tn * 1e-9:>11.1f}{t1 / tn:>9.2f}",
              flush=True)


def run(quick=False, threads=2):
    overhead(quick)
    print()
    scaling(threads, quick)
