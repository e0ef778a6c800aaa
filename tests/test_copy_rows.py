"""The copy_rows epilogue op (brgemm.epilogue): a block of another operand
copied into a tile after a call, on the CPU backend (aligned blocks through
non-temporal stores, others through memcpy) and eagerly, against NumPy
slicing on random data and offsets; C's result is untouched by it."""
import numpy as np
import pytest

from brgemm import plan as P


@pytest.mark.parametrize("aligned", [True, False])
def test_copy_rows_copies_blocks_and_leaves_c(rng, aligned):
    m, n, k = (int(rng.integers(1, 9)) for _ in range(3))
    cols, ld = 4 * int(rng.integers(1, 9)), 4 * int(rng.integers(9, 17))
    if not aligned:
        cols, ld = cols + 1, ld + 3
    offs = [4 * int(rng.integers(0, 8)) + (0 if aligned else 1) for _ in range(3)]
    print(f"m={m} n={n} k={k} cols={cols} ld={ld} offs={offs}")
    src = rng.standard_normal(offs[0] + 3 * m * ld).astype(np.float32)
    A, B = (rng.standard_normal(s).astype(np.float32) for s in ((m * k,), (k * n,)))
    blk = P.Block(m, n, k, lda=k, ldb=n, ldc=n, beta=0.0)
    rec = P.Recorder(dict(a="f32", b="f32", c="f32", s="f32", d="f32"), spec="N")
    for task in range(2):  # two tasks, each its C block and its copy
        rec.at(0, task)
        rec.gemm(blk, "a", [0], "b", [0], "c", task * m * n,
                 ops=(P.copy_rows("s", offs[task] + task * m * ld, ld, "d",
                                  offs[2] + task * m * cols, cols),))
    plan = rec.finish()
    size = offs[2] + 2 * m * cols
    want = np.full(size, np.nan, np.float32)
    for task in range(2):
        block = src[offs[task] + task * m * ld:][:m * ld].reshape(m, ld)[:, :cols]
        want[offs[2] + task * m * cols:][:m * cols] = block.reshape(-1)
    for run in ("cpu", "eager"):
        t = dict(a=A, b=B, c=np.full(2 * m * n, np.nan, np.float32), s=src,
                 d=np.full(size, np.nan, np.float32))
        if run == "cpu":
            plan.run(**t)
        else:
            rec2 = P.Eager(**t)
            for task in range(2):
                rec2.gemm(blk, "a", [0], "b", [0], "c", task * m * n,
                          ops=(P.copy_rows("s", offs[task] + task * m * ld, ld, "d",
                                           offs[2] + task * m * cols, cols),))
        np.testing.assert_array_equal(t["d"], want)  # copies are exact; the rest untouched
        c = (A.reshape(m, k).astype(np.float64) @ B.reshape(k, n)).astype(np.float32)
        np.testing.assert_allclose(t["c"].reshape(2, m, n), np.stack([c, c]), rtol=1e-5,
                                   atol=1e-5 * k)
