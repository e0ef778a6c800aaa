"""Streaming C stores (Block.c_stream): the blocks that may take them, the
native layer's own refusal of the others, and plans whose calls store their
tiles so -- on C arrays on a 64-byte boundary (streamed) and off it (stored as
usual) -- against the same plan without them (bitwise) and float64 NumPy."""
import numpy as np
import pytest

from brgemm.arrays import aligned_empty
from brgemm.backend.cpu import CpuKernel
from brgemm.block import STREAM_ELEMS, streams_c
from brgemm.plan import Block, Recorder
from primitives import conv, fc


@pytest.mark.parametrize("bad", [dict(dtype="bf16"), dict(beta=1.0), dict(alpha=2.0),
                                 dict(n=24), dict(ldc=72)])
def test_block_refuses_c_stream_it_cannot_take(bad):
    args = dict(m=8, n=32, k=8, lda=8, ldb=32, ldc=64, dtype="f32", beta=0.0) | bad
    args["ldb"] = max(args["ldb"], args["n"])
    assert not streams_c(args["dtype"], args["n"], args["ldc"], args.get("alpha", 1.0),
                         args["beta"])
    with pytest.raises(ValueError, match="c_stream"):
        Block(c_stream=True, **args)


@pytest.mark.parametrize("bad", [dict(beta=1.0), dict(n=24, ldb=24), dict(ldc=40),
                                 dict(dtype_ab="bf16", dtype_c="f32")])
def test_native_layer_refuses_c_stream_it_cannot_take(bad):
    args = dict(form="offs", dtype_ab="f32", dtype_c="f32", m=8, n=32, k=8, lda=8, ldb=32,
                ldc=64, alpha=1.0, beta=0.0) | bad
    CpuKernel(**(args | dict(beta=0.0, n=32, ldb=32, ldc=64)))  # the same, streamable: made
    with pytest.raises(ValueError, match="native layer rejected"):
        CpuKernel(c_stream=True, **args)


def _tiles_plan(M, N, K, bm, bn, stream):
    """C[M,N] = A[M,K] @ B[K,N] in bm x bn tiles, each made whole by one call
    (the whole reduction in it), one task per tile."""
    rec = Recorder({"A": "f32", "B": "f32", "C": "f32"})
    for task, (i, j) in enumerate((i, j) for i in range(0, M, bm) for j in range(0, N, bn)):
        m, n = min(bm, M - i), min(bn, N - j)
        rec.at(0, task)
        rec.gemm(Block(m, n, K, lda=K, ldb=N, ldc=N, beta=0.0,
                       c_stream=stream and streams_c("f32", n, N)),
                 "A", [i * K], "B", [j], "C", i * N + j)
    return rec.finish()


def test_streamed_tiles_match_plain_and_float64(rng):
    for _ in range(6):
        M, K = int(rng.integers(1, 90)), int(rng.integers(1, 200))
        N = STREAM_ELEMS * int(rng.integers(1, 9)) + int(rng.choice([0, 0, 5]))
        bm, bn = int(rng.integers(1, 40)), STREAM_ELEMS * int(rng.integers(1, 4))
        print(f"M {M} N {N} K {K} tiles {bm} x {bn}")
        A = rng.standard_normal((M, K)).astype(np.float32)
        B = rng.standard_normal((K, N)).astype(np.float32)
        ref = A.astype(np.float64) @ B.astype(np.float64)
        mag = np.abs(A.astype(np.float64)) @ np.abs(B.astype(np.float64))
        streamed, plain = _tiles_plan(M, N, K, bm, bn, True), _tiles_plan(M, N, K, bm, bn, False)
        assert any(b.c_stream for b in streamed.blocks) == (N % STREAM_ELEMS == 0)
        want = np.full((M, N), np.nan, np.float32)
        plain.run(A=A, B=B, C=want)
        assert np.all(np.abs(want - ref) <= 1e-5 * (mag + 1e-30))
        buf = aligned_empty(M * N + STREAM_ELEMS, np.float32)
        for start in (0, 1, STREAM_ELEMS):  # on the boundary, off it, on it again
            C = buf[start:start + M * N].reshape(M, N)
            C[...] = np.nan
            streamed.run(threads=2, A=A, B=B, C=C)
            np.testing.assert_array_equal(C, want)


def test_columns_update_streams_dw(rng):
    """conv.columns' update writes dW with streaming stores where its tiles
    allow; conv.backward's dW then matches float64 (the widths of
    tests/test_conv_columns.py cover the ragged ones)."""
    N, C, K, H = 2, 64, 256, 4
    g = conv.geometry(N, C, K, H, H, 3, 3, (1, 1), (1, 1))
    bd = conv.columns_update_width(g)  # the plan conv.backward takes
    plan = conv.columns_plan(g, "f32", bd, H * H, "upd")
    assert all(b.c_stream == (b.n % STREAM_ELEMS == 0) for b in plan.blocks)
    assert any(b.c_stream for b in plan.blocks)
    x = rng.standard_normal((N, C, H, H)).astype(np.float32)
    w = rng.standard_normal((K, C, 3, 3)).astype(np.float32)
    dy = rng.standard_normal((N, K, H, H)).astype(np.float32)
    _, dw = conv.backward(dy, x, w, 1, 1, config={"bwd": {"columns": True}}, need_dx=False)
    cols = np.lib.stride_tricks.sliding_window_view(
        np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))).astype(np.float64), (3, 3), axis=(2, 3))
    cols = cols.transpose(0, 2, 3, 1, 4, 5).reshape(N, H * H, C * 9)  # [n][pixel][c r s]
    d64 = dy.reshape(N, K, -1).astype(np.float64)
    ref = np.einsum("nkp,npd->kd", d64, cols)
    mag = np.einsum("nkp,npd->kd", np.abs(d64), np.abs(cols))
    err = np.abs(dw.reshape(K, -1) - ref)
    print(f"max abs diff {err.max():.3e}")
    assert np.all(err <= 1e-5 * (mag + 1e-30))


def test_fc_update_streams_dw(rng):
    """fc.backward's plain update stores dW's whole tiles with streaming
    stores; dW matches float64 on random sizes, ragged and whole."""
    for _ in range(4):
        N, K = int(rng.integers(1, 300)), int(rng.integers(1, 200))
        C = STREAM_ELEMS * int(rng.integers(1, 20)) + int(rng.choice([0, 0, 3]))
        print(f"N {N} C {C} K {K}")
        update = fc._backward_plans(N, C, K, "f32", "cpu", None, True, False)[4]
        assert any(b.c_stream for b in update.blocks) == (C % STREAM_ELEMS == 0)
        x = rng.standard_normal((N, C)).astype(np.float32)
        w = rng.standard_normal((K, C)).astype(np.float32)
        dy = rng.standard_normal((N, K)).astype(np.float32)
        _, dw, _ = fc.backward(dy, x, w, need_dx=False)
        ref = dy.T.astype(np.float64) @ x.astype(np.float64)
        mag = np.abs(dy.T.astype(np.float64)) @ np.abs(x.astype(np.float64))
        assert np.all(np.abs(dw - ref) <= 1e-5 * (mag + 1e-30))
