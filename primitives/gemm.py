"""GEMM as a loop nest around the batch-reduce kernel: C[M,N] = A[M,K] @ B[K,N].

    A [M, K], B [K, N], C [M, N], row-major, plain (unblocked) layouts.

The smallest primitive and the first example of the docs: the loop nest below
is all there is. Loops i (M by bm) and j (N by bn) pick the C block; loop k
walks the reduction in chunks of kc, and each kernel call reduces the chunk's
bk-wide blocks at once. Order and parallelism come from the spec in
configs/gemm.toml (or BRGEMM_CONFIG / config=).
"""
import numpy as np

from brgemm import dtypes
from brgemm.arrays import aligned_empty
from brgemm.loopspec import Loop, parse_spec
from brgemm.plan import Block, Eager, PlanCache, Recorder
from primitives._args import fits
from primitives._config import settings

SHAPE = ("M", "N", "K")  # the dimensions of a shape key
SCHEMA = {"spec": str, "bm": int, "bn": int, "bk": int, "kc": int}
_plans = PlanCache()


def nest(ex, loops, M, N, K, bm, bn, bk, kc, dtype="f32"):
    """The loop nest: one kernel call per C block and reduction chunk."""
    for phase, task, at in loops.walk():
        i, j, k0 = at["i"], at["j"], at["k"]
        k1 = min(k0 + kc, K)                        # this chunk's reduction range
        m, n, rest = min(bm, M - i), min(bn, N - j), (k1 - k0) % bk
        ex.at(phase, task)
        for ks, kb in ((range(k0, k1 - rest, bk), bk), (range(k1 - rest, k1, bk), rest)):
            if len(ks):                             # full bk blocks, then the remainder
                beta = 0.0 if ks[0] == 0 else 1.0   # zero C on the first k block
                ex.gemm(Block(m, n, kb, lda=K, ldb=N, ldc=N, dtype=dtype, beta=beta),
                        "A", [i * K + k for k in ks], "B", [k * N + j for k in ks], "C", i * N + j)


def loops(spec, M, N, K, bm, bn, kc):
    """The declared loops, ordered and parallelised by `spec`."""
    return parse_spec(spec, [Loop("i", 0, M, bm), Loop("j", 0, N, bn), Loop("k", 0, K, kc)],
                      where="config: ")


def _run_nest(ex, M, N, K, cfg, dtype):
    nest(ex, loops(cfg["spec"], M, N, K, cfg["bm"], cfg["bn"], cfg["kc"]), M, N, K,
         cfg["bm"], cfg["bn"], cfg["bk"], cfg["kc"], dtype)


def _check(A, B, dtype):
    # not _args.operands: gemm takes exactly dtype's arrays (no f32 inputs rounded for bf16)
    want = dtypes.NUMPY[dtypes.check_name(dtype)]
    for x, name in ((A, "A"), (B, "B")):
        if not isinstance(x, np.ndarray) or x.ndim != 2:
            raise TypeError(f"{name}: expected a 2-D numpy.ndarray")
        if x.dtype != want:
            raise TypeError(f"{name}: expected dtype {dtype} ({want}), got {x.dtype}")
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"B: has {B.shape[0]} rows, A has {A.shape[1]} columns")


def plan(M, N, K, dtype="f32", config=None):
    """The recorded plan for this shape and config (cached)."""
    cfg = settings("gemm", "fwd", {"M": M, "N": N, "K": K}, SCHEMA, config)
    if cfg["kc"] % cfg["bk"]:
        raise ValueError(f"kc: {cfg['kc']} is not a multiple of bk = {cfg['bk']}")
    key = (M, N, K, dtype, tuple(sorted(cfg.items())))

    def record():
        rec = Recorder({"A": dtype, "B": dtype, "C": "f32"}, spec=cfg["spec"])
        _run_nest(rec, M, N, K, cfg, dtype)
        return rec.finish()
    return _plans.get(key, record)


def forward(A, B, dtype="f32", config=None, threads=None, eager=False):
    """C = A @ B in f32 (A, B of `dtype`), through the recorded plan (or eagerly)."""
    _check(A, B, dtype)
    (M, K), N = A.shape, B.shape[1]
    # a broadcast A or B (strides 0) may be far larger than the memory it sits in
    fits(4 * (M * K + K * N + M * N), "A, B", lambda: f"gemm M={M}, N={N}, K={K}'s operands "
         "and result")
    if K == 0:  # no reduction: the nest makes no call, and C would stay unwritten
        return np.zeros((M, N), np.float32)
    A, B = np.ascontiguousarray(A), np.ascontiguousarray(B)
    C = aligned_empty((M, N), np.float32)  # the nest writes every block (beta 0 on its first k)
    if eager:
        cfg = settings("gemm", "fwd", {"M": M, "N": N, "K": K}, SCHEMA, config)
        _run_nest(Eager(A=A, B=B, C=C), M, N, K, cfg, dtype)
    else:
        plan(M, N, K, dtype, config).run(threads=threads, A=A, B=B, C=C)
    return C


def search(pass_, shape, threads=None):
    """Configs the tuner may try for this shape (see brgemm.tuning.Search)."""
    from brgemm.tuning import Search, best_time
    if pass_ != "fwd":
        raise ValueError(f"pass: gemm has only 'fwd', got {pass_!r}")
    M, N, K = shape["M"], shape["N"], shape["K"]
    for name in ("M", "N", "K"):
        if shape[name] < 1:
            raise ValueError(f"shape: {name} = {shape[name]} must be at least 1")
    fits(8 * (M * K + K * N + M * N), "shape", f"gemm M={M}, N={N}, K={K}")
    specs = ["IJk", "JIk", "Ijk", "Jik", "iJk", "jIk", "kIJ", "k|IJ"]
    cands = []
    for spec in specs:
        for bm in (16, 32, 64):
            for bn in (32, 64, 128):
                for bk in (32, 64, 128):
                    if bm > max(M, 16) or bn > max(N, 32) or bk > max(K, 32):
                        continue
                    cands.append(dict(spec=spec, bm=bm, bn=bn, bk=bk, kc=4096 // bk * bk))
    rng = np.random.default_rng()
    data = dict(A=rng.standard_normal((M, K)).astype(np.float32),
                B=rng.standard_normal((K, N)).astype(np.float32), C=np.empty((M, N), np.float32))

    def cost(cfg):
        # libxsmm is fastest on wide n blocks and a few dozen k per call; tiny
        # blocks pay per-call overhead, and fewer tasks than threads idle cores
        bm, bn, bk = cfg["bm"], cfg["bn"], cfg["bk"]
        eff = min(1.0, bn / 64) * min(1.0, bm / 16) * min(1.0, bk / 32) * 0.8
        tasks = -(-M // bm) * -(-N // bn)
        idle = 1.0 if "I" in cfg["spec"] or "J" in cfg["spec"] else 2.0
        return 2.0 * M * N * K / (eff * 50e9) * idle + 1e-7 * tasks * -(-K // bk)

    def time(cfg, threads_):
        p = plan(M, N, K, config={"fwd": cfg})
        return best_time(lambda: p.run(threads=threads_, **data))

    default = settings("gemm", "fwd", shape, SCHEMA)
    return Search("gemm", "fwd", dict(shape), default, cands, cost, time)
