"""The copy ops (brgemm.epilogue): copy_rows, a block of another operand
copied into a tile after a call, on the CPU backend (aligned blocks through
non-temporal stores, others through memcpy) and eagerly, against NumPy
slicing on random data and offsets; C's result is untouched by it. copy_b,
a B block copied in before its call, copy_bt, from its transpose,
copy_taps, several such blocks from rows that interleave them, and copy_at,
rows of an A operand from a transposed source."""
import numpy as np
import pytest

from brgemm import constants
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


@pytest.mark.parametrize("code", ["copy_b", "copy_bt"])
def test_copy_b_fills_b_before_the_call(rng, code):
    """The copy_b and copy_bt ops (brgemm.epilogue): before its call, one of
    the call's B blocks (k x n, row stride ldb) copied in from a plain matrix
    (copy_bt: from its transpose, n rows of k), so the call reads it: native
    plan and Eager against NumPy, random sizes (past the transposes' SIMD
    sub-blocks, with ragged edges), row strides and offsets, two tasks each
    filling and reading its own blocks, and blocks that other ops then touch
    C of, and the bare timing loop (no epilogue, the copies still made);
    refused after another op, on bf16 blocks and on device backends' replays."""
    m, count = (int(rng.integers(1, 9)) for _ in range(2))
    n, k = (int(rng.integers(1, 41)) for _ in range(2))
    rows, cols = (k, n) if code == "copy_b" else (n, k)  # the source block
    ldb, ld = n + int(rng.integers(0, 5)), cols + int(rng.integers(0, 20))
    off = int(rng.integers(0, 7))
    print(f"{code}: m={m} n={n} k={k} count={count} ldb={ldb} ld={ld} off={off}")
    src = rng.standard_normal(off + 2 * count * rows * ld).astype(np.float32)
    A = rng.standard_normal(2 * count * m * k).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    blk = P.Block(m, n, k, lda=k, ldb=ldb, ldc=n, beta=0.0)
    tile = k * ldb
    copy = getattr(P, code)

    def nest(ex):
        for task in range(2):
            ex.at(0, task)
            first = task * count
            b_offs = [(first + q) * tile for q in range(count)]
            ex.gemm(blk, "a", [(first + q) * m * k for q in range(count)], "b", b_offs, "c",
                    task * m * n, ops=tuple(copy("s", off + (first + q) * rows * ld, ld, "b", o)
                                            for q, o in enumerate(b_offs)) + (P.bias("bias"),))
    rec = P.Recorder(dict(a="f32", b="f32", c="f32", s="f32", bias="f32"), spec="N")
    nest(rec)
    plan = rec.finish()
    blocks = src[off:off + 2 * count * rows * ld].reshape(2, count, rows, ld)[..., :cols]
    if code == "copy_bt":
        blocks = blocks.transpose(0, 1, 3, 2)
    blocks = blocks.astype(np.float64)
    a = A.reshape(2, count, m, k).astype(np.float64)
    want = np.einsum("tqmk,tqkn->tmn", a, blocks) + bias
    for run in ("cpu", "eager"):
        t = dict(a=A, b=np.full(2 * count * tile, np.nan, np.float32), s=src,
                 c=np.full(2 * m * n, np.nan, np.float32), bias=bias)
        plan.run(**t) if run == "cpu" else nest(P.Eager(**t))
        got = t["b"].reshape(2, count, k, ldb)[..., :n]
        np.testing.assert_array_equal(got, blocks.astype(np.float32))  # copies are exact
        np.testing.assert_allclose(t["c"].reshape(2, m, n), want, rtol=1e-5,
                                   atol=1e-5 * k * count)
    # the bare timing loop skips the epilogue, not the copies its calls read
    t = dict(a=A, b=np.full(2 * count * tile, np.nan, np.float32), s=src,
             c=np.full(2 * m * n, np.nan, np.float32), bias=bias)
    plan.time_bare(1, **t)
    np.testing.assert_array_equal(t["b"].reshape(2, count, k, ldb)[..., :n],
                                  blocks.astype(np.float32))
    with pytest.raises(ValueError, match=code):
        P.Recorder(dict(a="f32", b="f32", c="f32", s="f32", bias="f32")).gemm(
            blk, "a", [0], "b", [0], "c", 0, ops=(P.bias("bias"), copy("s", 0, ld, "b", 0)))
    with pytest.raises(ValueError, match=code):
        P.Recorder(dict(a="bf16", b="bf16", c="f32", s="f32")).gemm(
            P.Block(m, n, k, lda=k, ldb=ldb, ldc=n, dtype="bf16"), "a", [0], "b", [0], "c", 0,
            ops=(copy("s", 0, ld, "b", 0),))
    with pytest.raises(ValueError, match=f"{code}: negative offset"):
        P.Recorder(dict(a="f32", b="f32", c="f32", s="f32")).gemm(
            blk, "a", [0], "b", [0], "c", 0, ops=(copy("s", -1, ld, "b", 0),))
    with pytest.raises(ValueError, match="s: the plan touches"):  # source blocks past the end
        plan.run(a=A, b=np.empty(2 * count * tile, np.float32),
                 s=src[:off + (2 * count * rows - 1) * ld + cols - 1],
                 c=np.empty(2 * m * n, np.float32), bias=bias)
    with pytest.raises(ValueError, match="backend"):
        plan.require("cuda", max_op=constants.DEVICE_OPS, b_vnni=True)


def _each_run(plan, nest, tensors):
    """The copy ops' three runs of one plan, each on fresh tensors() (NaN where
    the plan must write): the native replay, the bare timing loop, and its
    nest run eagerly. Yields each run's tensors, "run" naming it."""
    for run in ("cpu", "eager", "bare"):
        t = tensors()
        if run == "cpu":
            plan.run(**t)
        elif run == "bare":
            plan.time_bare(1, **t)
        else:
            nest(P.Eager(**t))
        yield dict(t, run=run)


def test_copy_taps_fills_every_tap_before_the_call(rng):
    """The copy_taps op (brgemm.epilogue): before its call, `taps` B blocks
    (k x n each, row stride ldb, tap_stride apart) from n source rows ld apart whose
    elements interleave them (block t's (i, j) at j ld + i taps + t: a conv
    weight's taps), the call reading some of them and a later call of the
    task the rest: native plan (both the AVX2 pass and, with k or n past the
    SIMD blocks, its edges), Eager and the bare timing loop against NumPy, two
    tasks each copying and reading its own blocks; refused on a bad tap count,
    and where the source rows run past the array."""
    m, taps = int(rng.integers(1, 9)), int(rng.integers(1, 10))
    n, k = (int(rng.integers(1, 41)) for _ in range(2))
    ldb, ld = n + int(rng.integers(0, 5)), k * taps + int(rng.integers(0, 20))
    off, first = int(rng.integers(0, 7)), int(rng.integers(1, taps + 1))  # blocks the call reads
    print(f"copy_taps: m={m} n={n} k={k} taps={taps} ldb={ldb} ld={ld} off={off} first={first}")
    src = rng.standard_normal(off + 2 * n * ld).astype(np.float32)
    A = rng.standard_normal(2 * taps * m * k).astype(np.float32)
    blk = P.Block(m, n, k, lda=k, ldb=ldb, ldc=n, beta=0.0)
    later = P.Block(m, n, k, lda=k, ldb=ldb, ldc=n, beta=1.0)
    ldb = blk.ldb  # (a block of one row keeps n: its row stride is unused)
    tile = P.tap_stride(k, ldb)
    assert tile >= k * ldb

    def nest(ex):
        for task in range(2):
            ex.at(0, task)
            b0 = task * taps * tile
            ex.gemm(blk, "a", [(task * taps + t) * m * k for t in range(first)], "b",
                    [b0 + t * tile for t in range(first)], "c", task * m * n,
                    ops=(P.copy_taps("s", off + task * n * ld, ld, taps, "b", b0),))
            if first < taps:
                ex.gemm(later, "a", [(task * taps + t) * m * k for t in range(first, taps)], "b",
                        [b0 + t * tile for t in range(first, taps)], "c", task * m * n)
    rec = P.Recorder(dict(a="f32", b="f32", c="f32", s="f32"), spec="N")
    nest(rec)
    plan = rec.finish()
    rows = src[off:off + 2 * n * ld].reshape(2, n, ld)[..., :k * taps].reshape(2, n, k, taps)
    blocks = rows.transpose(0, 3, 2, 1).astype(np.float64)  # [task][t][i][j]
    want = np.einsum("xtmk,xtkn->xmn",
                     A.reshape(2, taps, m, k).astype(np.float64), blocks)
    for t in _each_run(plan, nest, lambda: dict(
            a=A, b=np.full(2 * taps * tile, np.nan, np.float32), s=src,
            c=np.full(2 * m * n, np.nan, np.float32))):
        got = np.stack([t["b"][(task * taps + q) * tile:][:k * ldb].reshape(k, ldb)[:, :n]
                        for task in range(2) for q in range(taps)]).reshape(2, taps, k, n)
        np.testing.assert_array_equal(got, blocks.astype(np.float32))  # copies are exact
        np.testing.assert_allclose(t["c"].reshape(2, m, n), want, rtol=1e-5,
                                   atol=1e-5 * k * taps)
    with pytest.raises(ValueError, match="s: the plan touches"):  # source rows past the end
        plan.run(a=A, b=np.empty(2 * taps * tile, np.float32),
                 s=src[:off + (2 * n - 1) * ld + k * taps - 1], c=np.empty(2 * m * n, np.float32))
    with pytest.raises(ValueError, match="b: the plan touches"):  # the taps' tiles past the end
        plan.run(a=A, b=np.empty(plan.extent["b"] - 1, np.float32), s=src,
                 c=np.empty(2 * m * n, np.float32))
    with pytest.raises(ValueError, match="copy_taps: taps"):
        P.copy_taps("s", 0, ld, 0, "b", 0)


def test_copy_at_fills_a_rows_before_the_call(rng):
    """The copy_at op (brgemm.epilogue): before its call, `rows` rows of A (k
    elements each, row stride lda) from the transpose of k source rows ld
    apart (an NCHW image's row of pixels, a block of its channels each); the
    call reads a window of them and a later call of the task another (the
    taps of a conv row): native plan (the SIMD blocks and their ragged edges),
    Eager and the bare timing loop against float64 NumPy, two tasks each
    copying and reading its own rows; refused on a bad row count, on a
    transposed A, and where the source rows run past the array."""
    k, rows = int(rng.integers(1, 41)), int(rng.integers(2, 60))
    m = int(rng.integers(1, rows))
    n, lda = int(rng.integers(1, 33)), k + int(rng.integers(0, 5))
    ld, off = rows + int(rng.integers(0, 30)), int(rng.integers(0, 7))
    shift = int(rng.integers(0, rows - m + 1))  # the later call's window, rows down
    print(f"copy_at: m={m} n={n} k={k} rows={rows} lda={lda} ld={ld} off={off} shift={shift}")
    src = rng.standard_normal(off + 2 * k * ld).astype(np.float32)
    B = rng.standard_normal(2 * k * n).astype(np.float32)
    blk = P.Block(m, n, k, lda=lda, ldb=n, ldc=n, beta=0.0)
    later = P.Block(m, n, k, lda=lda, ldb=n, ldc=n, beta=1.0)
    lda = blk.lda  # (a block of one column keeps k: its row stride is unused)
    ring = rows * lda

    def nest(ex):
        for task in range(2):
            ex.at(0, task)
            ex.gemm(blk, "a", [task * ring], "b", [task * k * n], "c", task * m * n,
                    ops=(P.copy_at("s", off + task * k * ld, ld, rows, "a", task * ring),))
            ex.gemm(later, "a", [task * ring + shift * lda], "b", [k * n - task * k * n], "c",
                    task * m * n)
    rec = P.Recorder(dict(a="f32", b="f32", c="f32", s="f32"), spec="N")
    nest(rec)
    plan = rec.finish()
    a = src[off:off + 2 * k * ld].reshape(2, k, ld)[..., :rows].transpose(0, 2, 1)  # [task][i][j]
    b = B.reshape(2, k, n).astype(np.float64)
    first, second = a[:, :m].astype(np.float64), a[:, shift:shift + m].astype(np.float64)
    want = first @ b + second @ b[::-1]
    bound = np.abs(first) @ np.abs(b) + np.abs(second) @ np.abs(b[::-1])
    for t in _each_run(plan, nest, lambda: dict(
            a=np.full(2 * ring, np.nan, np.float32), b=B, s=src,
            c=np.full(2 * m * n, np.nan, np.float32))):
        run = t.pop("run")
        got = t["a"].reshape(2, rows, lda)[..., :k]
        np.testing.assert_array_equal(got, a)  # copies are exact
        err = np.abs(t["c"].reshape(2, m, n) - want)
        assert (err <= 1e-5 * bound + 1e-30).all(), f"{run}: worst {err.max()}"
    with pytest.raises(ValueError, match="s: the plan touches"):  # source rows past the end
        plan.run(a=np.empty(2 * ring, np.float32), b=B, s=src[:off + (2 * k - 1) * ld + rows - 1],
                 c=np.empty(2 * m * n, np.float32))
    with pytest.raises(ValueError, match="copy_at: rows"):
        P.copy_at("s", 0, ld, 0, "a", 0)
    rec = P.Recorder(dict(a="f32", b="f32", c="f32", s="f32"), spec="N")
    rec.at(0, 0)
    with pytest.raises(ValueError, match="copy_at fills A's rows"):
        rec.gemm(P.Block(m, n, k, lda=max(m, rows), ldb=n, ldc=n, a_t=True), "a", [0], "b", [0],
                 "c", 0, ops=(P.copy_at("s", 0, ld, rows, "a", 0),))
