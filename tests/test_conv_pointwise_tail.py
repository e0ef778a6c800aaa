"""conv's pointwise forward with each image's last pixels computed apart
(conv_pointwise.pointwise_tail: the pixels past an image's last whole
16-float vector, gathered from all images into one matrix, their products
stored back), against float64, and brgemm.windows.copy_windows, which
gathers and stores them, against NumPy."""
import numpy as np
import pytest
import torch

import brgemm
from brgemm.windows import copy_windows
from primitives import conv
from tests.test_conv import magnitude


def test_pointwise_tail_forward(rng):
    """Random 1x1 layers whose pixels are no whole number of vectors, up to
    40 images (their tails then span several pixel blocks), K ragged against
    its blocks, random call sizes and pixel blocks, x itself or its copy on
    whole-line rows, with and without a bias, the tail on and off: the route
    takes the plan with (or without) the tail's tensors, and y matches
    float64 within f32 rounding of sum |x| |w|."""
    for it in range(8):
        N = int(rng.choice([1, 2, 3, 7, 40]))
        while True:
            H, W = int(rng.integers(4, 30)), int(rng.integers(4, 30))
            HW = H * W
            if HW > 16 and HW % 16 and 16 * -(-HW // 16) - HW <= HW // 16:
                break
        C, K = 16 * int(rng.integers(1, 5)), int(rng.integers(1, 90))
        tail, rows, bias = bool(it % 4), bool(it // 2 % 2), bool(rng.integers(2))
        kb, bp = int(rng.choice([1, 8, 32, 1024])), int(rng.choice([16, 32, 64, 112]))
        cfg = {"fwd": {"bc": 16, "bk": 16, "pointwise_kb": kb, "pointwise_bp": bp,
                       "pointwise_rows": rows, "pointwise_tail": tail}}
        print(f"N={N} C={C} K={K} H={H} W={W} {cfg['fwd']} bias={bias}")
        x = rng.standard_normal((N, C, H, W)).astype(np.float32)
        w = rng.standard_normal((K, C, 1, 1)).astype(np.float32)
        b = rng.standard_normal(K).astype(np.float32) if bias else None
        g, path, p, _ = conv._route("fwd", (N, C, K, H, W, 1, 1), (1, 1), (0, 0), cfg, "f32",
                                    "cpu", None, x, w, has_bias=bias)
        assert path == "pointwise" and ("xt" in p.extent) == tail  # the path under test
        assert conv.pointwise_tail(g) == (HW % 16 if tail else 0)
        y = conv.forward(x, w, config=cfg, b=b)
        X, Wt = (torch.tensor(a, dtype=torch.float64) for a in (x, w))
        want = torch.nn.functional.conv2d(X, Wt, None if b is None else torch.tensor(
            b, dtype=torch.float64)).numpy()
        mag = magnitude(x, w, np.ones_like(want), 1, 0)[0] + (0 if b is None else np.abs(
            b).reshape(1, -1, 1, 1))
        assert y.dtype == np.float32 and y.shape == want.shape
        assert np.all(np.abs(y - want) <= 1e-5 * mag + 1e-30)


@pytest.mark.parametrize("dtype", [np.float32, brgemm.bfloat16])
def test_copy_windows_matches_numpy(rng, dtype):
    """Random windows of rows, read from and written to views with the axes
    permuted and sliced as conv's tails are (and the plain case), equal
    NumPy's copy; the rest of out untouched."""
    for _ in range(6):
        n, rows, row, cut = (int(rng.integers(1, 9)), int(rng.integers(1, 70)),
                             int(rng.integers(2, 40)), 0)
        cut = int(rng.integers(1, row))
        src_full = rng.standard_normal((n, rows, row)).astype(dtype)
        src = src_full[:, :, cut:]  # (n, rows, row - cut), rows `row` apart
        tail = row - cut
        flat = np.zeros((rows, n * tail), dtype)  # [rows][n tail], viewed [n][rows][tail]
        out = copy_windows(src, flat.reshape(rows, n, tail).transpose(1, 0, 2))
        assert np.array_equal(out, src) and np.array_equal(flat.reshape(rows, n, tail),
                                                           src.transpose(1, 0, 2))
        back = np.full((n, rows, row), 7, dtype)  # and back into the images' last columns
        copy_windows(flat.reshape(rows, n, tail).transpose(1, 0, 2), back[:, :, cut:])
        assert np.array_equal(back[:, :, cut:], src) and np.all(back[:, :, :cut] == 7)


def test_copy_windows_bad_input():
    """Each bad argument named: dtypes, shapes, strides, overlaps."""
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    with pytest.raises(TypeError, match="src"):
        copy_windows([1, 2], a)
    with pytest.raises(ValueError, match="src"):
        copy_windows(a[0], a)
    with pytest.raises(TypeError, match="src"):
        copy_windows(a.astype(np.float64), np.empty((2, 3, 4), np.float64))
    with pytest.raises(ValueError, match="src"):
        copy_windows(a[:, :, ::2], np.empty((2, 3, 2), np.float32))
    with pytest.raises(ValueError, match="out"):
        copy_windows(a, np.empty((2, 3, 5), np.float32))
    with pytest.raises(ValueError, match="out"):
        copy_windows(a, np.empty((2, 3, 4), brgemm.bfloat16))
    with pytest.raises(ValueError, match="out"):
        copy_windows(a, a)
    with pytest.raises(ValueError, match="out"):  # elements that share memory
        copy_windows(a, np.lib.stride_tricks.as_strided(np.empty(8, np.float32), (2, 3, 4),
                                                        (0, 16, 4)))
    ro = np.empty((2, 3, 4), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="out"):
        copy_windows(a, ro)
    # rows that overlap in src (a sliding window) are read from a copy
    src = np.lib.stride_tricks.sliding_window_view(np.arange(10, dtype=np.float32), 4)[None]
    assert np.array_equal(copy_windows(src, np.empty(src.shape, np.float32)), src)
