"""conv.columns (w read in place, x's im2col tiles): the functional forward,
backward-data and update on it against float64 on random layers its rule
allows, and the config's per-pass `columns` switch."""
import dataclasses

import numpy as np
import pytest

from brgemm.im2col import image_to_columns
from brgemm.layouts import nblocks
from brgemm.machine import cpu_threads
from primitives import conv
from test_conv import magnitude, reference


# conv.columns taken wherever its rule allows, whatever this machine's table says
COLUMNS_ON = {"fwd": {"columns": True}, "bwd": {"columns": True}}


def test_columns_forward_backward(rng):
    """Weights that outweigh the images (N P Q <= K / 2): the forward reads w in
    place against x's im2col tiles, the update writes dW in w's layout from
    them (conv.columns), and backward-data (kernels over 1x1) reads w in place
    again, or copies its tiles in the plan (columns_copies_w, in blocks of a
    random columns_copy_block), and sums its im2col gradient into dx. Random
    sizes, strides and padding, ragged blocks, x and dy as strided views."""
    done = 0
    while done < 4:
        N, C, K = int(rng.integers(1, 4)), int(rng.integers(1, 70)), int(rng.integers(16, 300))
        H, W, R, S = (int(v) for v in rng.integers(1, 9, 4))
        stride, padding = tuple(int(v) for v in rng.integers(1, 3, 2)), \
            tuple(int(v) for v in rng.integers(0, 2, 2))
        if done == 0:  # more pixels than one of backward-data's blocks (COLUMNS_DATA_PIXELS)
            N, C, K, H, W, R, S, stride, padding = 3, 5, 300, 7, 7, 3, 3, (1, 1), (1, 1)
        if R > H + 2 * padding[0] or S > W + 2 * padding[1]:
            continue
        g = conv.geometry(N, C, K, H, W, R, S, stride, padding, config=COLUMNS_ON)
        if not conv.columns(g, "f32", "cpu"):
            continue
        assert conv.columns(g, "f32", "cpu", "bwd")  # the same rule for both passes
        done += 1
        print(f"N={N} C={C} K={K} H={H} W={W} kernel={R, S} stride={stride} padding={padding}")
        x = rng.standard_normal((N, C, H, 2 * W)).astype(np.float32)[..., ::2]
        w = rng.standard_normal((K, C, R, S)).astype(np.float32)
        y = conv.forward(x, w, stride, padding, config=COLUMNS_ON)
        dy = rng.standard_normal((N, K, 2 * g.P, g.Q)).astype(np.float32)[:, :, ::2]
        for copies in (False, True):  # backward-data on w in place, or on its tiles' copies
            block = int(rng.choice([16, 32, 64, 128]))
            cfg = {"fwd": {"columns": True}, "bwd": {"columns": True, "columns_copies_w": copies,
                                                     "columns_copy_block": block}}
            dx, dw = conv.backward(dy, x, w, stride, padding, config=cfg)
            for got, want, mag in zip((y, dx, dw), reference(x, w, dy, stride, padding),
                                      magnitude(x, w, dy, stride, padding)):
                assert got.dtype == np.float32 and got.shape == want.shape
                assert np.all(np.abs(got - want) <= 1e-5 * mag + 1e-30)


def test_columns_config(rng):
    """The config's `columns` per pass: off, conv.columns' rule gives no blocks
    for that pass (and only that one), and the call takes another route with
    results as right. Random layers its rule allows. Bad pass names and update
    pixel blocks other than whole images are refused by name."""
    done = 0
    while done < 3:
        N, C, K = int(rng.integers(1, 3)), int(rng.integers(1, 40)), int(rng.integers(64, 200))
        H, W = int(rng.integers(3, 8)), int(rng.integers(3, 8))
        g = conv.geometry(N, C, K, H, W, 3, 3, (1, 1), (1, 1), config=COLUMNS_ON)
        if not conv.columns(g, "f32", "cpu"):
            continue
        done += 1
        print(f"N={N} C={C} K={K} H={H} W={W}")
        x, w, dy = (rng.standard_normal(s).astype(np.float32)
                    for s in ((N, C, H, W), (K, C, 3, 3), (N, K, H, W)))
        for off in ("fwd", "bwd"):
            cfg = {p: {"columns": p != off} for p in ("fwd", "bwd")}
            g = conv.geometry(N, C, K, H, W, 3, 3, (1, 1), (1, 1), config=cfg)
            assert conv.columns(g, "f32", "cpu", off) is None
            assert conv.columns(g, "f32", "cpu", "bwd" if off == "fwd" else "fwd") is not None
            got = (conv.forward(x, w, 1, 1, config=cfg), *conv.backward(dy, x, w, 1, 1, config=cfg))
            for a, want, mag in zip(got, reference(x, w, dy, 1, 1), magnitude(x, w, dy, 1, 1)):
                assert a.dtype == np.float32 and a.shape == want.shape
                assert np.all(np.abs(a - want) <= 1e-5 * mag + 1e-30)
    with pytest.raises(ValueError, match="pass_"):
        conv.columns(g, "f32", "cpu", "upd")  # the update goes with backward-data ("bwd")
    # the update's pixel blocks are whole images (it reads dy in place, an image a block)
    with pytest.raises(ValueError, match="bp: .*whole images"):
        conv.columns_plan(g, "f32", 16, g.P * g.Q + 1, "upd")


def test_columns_shares(rng):
    """The forward's reduction in shares (conv.columns_shares), one task each:
    the plan's parts summed equal the convolution + b (PyTorch in float64) at
    2 to 4 shares, every part written; conv.forward takes as many shares as threads
    where C R S >= 4 K and the threads are few, and none else. Random layers
    conv.columns' rule allows, ragged blocks."""
    done = 0
    while done < 3:
        N, K = int(rng.integers(1, 3)), int(rng.integers(16, 200))
        C, H, W, R, S = (int(v) for v in rng.integers(1, 9, 5))
        C *= -(-4 * K // (C * R * S))  # C R S >= 4 K
        g = conv.geometry(N, C, K, H, W, R, S, (1, 1), (R // 2, S // 2), config=COLUMNS_ON)
        blocks = conv.columns(g, "f32", "cpu")
        D, cols = C * R * S, N * g.P * g.Q
        if not blocks or nblocks(D, blocks[0]) < 4:
            continue
        done += 1
        print(f"N={N} C={C} K={K} H={H} W={W} kernel={R, S}")
        (bd, bp), taps = blocks, ((R, S), (1, 1), (R // 2, S // 2))
        x = rng.standard_normal((N, C, H, W)).astype(np.float32)
        w = rng.standard_normal((K, C, R, S)).astype(np.float32)
        b = rng.standard_normal(K).astype(np.float32)
        xc, w2 = image_to_columns(x, *taps, bd, bp), w.reshape(K, D)
        dy = rng.standard_normal((N, K, g.P, g.Q)).astype(np.float32)  # (its backward unused)
        ref = reference(x, w, dy, 1, taps[2])[0] + b.reshape(1, K, 1, 1)
        ref_mag = magnitude(x, w, dy, 1, taps[2])[0] + np.abs(b).reshape(1, K, 1, 1)
        # as y^c, K x N P Q
        want, mag = (a.transpose(1, 0, 2, 3).reshape(K, cols) for a in (ref, ref_mag))
        for shares in (2, 3, 4):
            p = conv.columns_plan(g, "f32", bd, bp, has_bias=True, shares=shares)
            bias = np.zeros(p.extent["b"], np.float32)
            bias[:K] = b
            parts = np.full((shares, K * cols), np.nan, np.float32)
            p.run(w=w2, xc=xc, yc=parts, b=bias)
            assert not np.isnan(parts).any()
            got = parts.sum(axis=0, dtype=np.float64).reshape(K, cols)
            assert np.all(np.abs(got - want) <= 1e-5 * mag + 1e-30)
        threads = cpu_threads()
        want_shares = threads if 2 <= threads <= conv.MAX_SHARES else 1
        assert conv.columns_shares(g, "f32", bd, threads) == want_shares
        route = conv._route("fwd", (N, C, K, H, W, R, S), (1, 1), (R // 2, S // 2), COLUMNS_ON,
                            "f32", "cpu", None, x, w, has_bias=True)
        assert route[1] == "columns" and route[3][2] == want_shares  # what conv.forward takes
        assert conv.columns_shares(g, "bf16", bd, 2) == 1  # f32 alone
        assert conv.columns_shares(dataclasses.replace(g, K=D // 4 + 1), "f32", bd, 2) == 1
        y = conv.forward(x, w, 1, (R // 2, S // 2), config=COLUMNS_ON, b=b)
        assert np.all(np.abs(y - ref) <= 1e-5 * ref_mag + 1e-30)
