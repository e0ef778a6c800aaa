"""bf16 blocks that read B as VNNI pairs in place (Block(b_vnni=True)) on the
path this CPU takes (AMX tiles, AVX512-BF16 dot products, or blocks widened to
f32), replayed from a plan (the offset form) and run eagerly, against float64
NumPy: random shapes, row strides, counts, beta and C dtypes."""
import numpy as np
import pytest

import brgemm
from brgemm import plan as P
from brgemm.vnni import takes_vnni_b, unpack_block


def _pack(rng, count, k, n, ldb):
    """count k x n bf16 blocks as VNNI pairs, pair rows 2 ldb apart, laid end to
    end in one flat buffer: (flat, offsets, the plain blocks in float64)."""
    per = k // 2 * 2 * ldb
    flat = np.full(count * per + 2 * ldb, np.nan, np.float32).astype(brgemm.bfloat16)
    plain = rng.standard_normal((count, k, n)).astype(brgemm.bfloat16)
    offs = [i * per for i in range(count)]
    for i, o in enumerate(offs):
        pairs = flat[o:o + per].reshape(k // 2, ldb, 2)
        pairs[:, :n, :] = plain[i].reshape(k // 2, 2, n).transpose(0, 2, 1)
        assert np.array_equal(unpack_block(flat, o, k, n, ldb), plain[i])
    return flat, offs, plain.astype(np.float64)


@pytest.mark.parametrize("case", range(12))
def test_vnni_b_blocks_match_float64(case):
    seed = np.random.SeedSequence().entropy % 2**32
    print("seed", seed)
    rng = np.random.default_rng(seed)
    m, n = (int(v) for v in rng.integers(1, 40, 2))
    k = 2 * int(rng.integers(1, 40))
    if not takes_vnni_b(k, "bf16"):
        k = 32 * int(rng.integers(1, 4))  # AMX: whole tile chunks
    assert takes_vnni_b(k, "bf16")
    lda = k + int(rng.integers(0, 3))      # odd lda: the widening path on AVX512-BF16 CPUs
    ldb = n + int(rng.integers(0, 5))
    ldc = n + int(rng.integers(0, 3))
    count = int(rng.integers(1, 5))
    beta = float(rng.choice([0.0, 1.0]))
    c_dtype = str(rng.choice(["f32", "bf16"]))
    a = rng.standard_normal((count, m, lda)).astype(brgemm.bfloat16)
    b, b_offs, bplain = _pack(rng, count, k, n, ldb)
    c0 = rng.standard_normal(m * ldc).astype(np.float32)
    blk = P.Block(m, n, k, lda=lda, ldb=ldb, ldc=ldc, dtype="bf16", c_dtype=c_dtype, beta=beta,
                  b_vnni=True)
    a_offs = [i * m * lda for i in range(count)]
    cnp = np.float32 if c_dtype == "f32" else brgemm.bfloat16
    want = beta * c0.astype(cnp).astype(np.float64).reshape(m, ldc)[:, :n]
    mag = np.abs(want).copy()
    for i in range(count):
        ai = a[i, :, :k].astype(np.float64)
        want = want + ai @ bplain[i]
        mag += np.abs(ai) @ np.abs(bplain[i])
    tol = 1e-5 * mag + 1e-6 + (np.abs(want) * 2.0 ** -8 if c_dtype == "bf16" else 0)
    for run in ("plan", "eager"):
        c = c0.astype(cnp)
        arrays = dict(a=a.reshape(-1), b=b, c=c)
        if run == "plan":
            rec = P.Recorder({"a": "bf16", "b": "bf16", "c": c_dtype})
            rec.gemm(blk, "a", a_offs, "b", b_offs, "c", 0)
            rec.finish().run(**arrays)
        else:
            P.Eager(**arrays).gemm(blk, "a", a_offs, "b", b_offs, "c", 0)
        got = c.astype(np.float64).reshape(m, ldc)
        err = np.abs(got[:, :n] - want)
        assert np.all(err <= tol), f"{run}: {m}x{n}x{k} lda {lda} ldb {ldb} count {count} " \
            f"beta {beta} {c_dtype}: max err/tol {np.max(err / tol):.3g}"
        assert np.array_equal(got[:, n:], c0.astype(cnp).astype(np.float64).reshape(m, ldc)[:, n:])
