"""Session 41's bug hunt in the changes of the fortieth/forty-first sessions:
brgemm.windows.copy_windows on views whose strides carry no meaning (empty
arrays, axes of size 1) or that share a buffer without sharing elements;
conv's pointwise tail on random layers and calls; primitives.nn's untracked
calls (nn_tensors._untracked) and the custom operators under torch.compile."""
import numpy as np
import pytest

import brgemm
from brgemm.windows import copy_windows


def _windows(rng, dtype):
    n, rows, cols = (int(rng.integers(1, 6)), int(rng.integers(1, 9)), int(rng.integers(1, 20)))
    print(f"windows {n} x {rows} x {cols} {np.dtype(dtype).name}")
    return rng.standard_normal((n, rows, cols)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, brgemm.bfloat16])
def test_copy_windows_empty_views(dtype):
    """Empty views (NumPy 2 gives fresh ones zero strides): nothing to copy,
    out returned as it is, not a ValueError about src's strides."""
    for shape in ((0, 3, 4), (2, 0, 4), (2, 3, 0), (0, 0, 0)):
        src, out = np.empty(shape, dtype), np.empty(shape, dtype)
        assert copy_windows(src, out) is out
        assert copy_windows(src[:, ::-1], out) is out  # (a reversed empty axis)


@pytest.mark.parametrize("dtype", [np.float32, brgemm.bfloat16])
def test_copy_windows_size_one_axes(rng, dtype):
    """An axis of size 1 is never stepped along: its stride (negative, not a
    multiple of the element size, huge) does not matter, in src or out."""
    a = _windows(rng, dtype)
    n, rows, cols = a.shape
    item = a.itemsize
    as_strided = np.lib.stride_tricks.as_strided
    one = a[:1][::-1]  # (1, rows, cols), its first stride negative
    assert np.array_equal(copy_windows(one, np.empty(one.shape, dtype)), one)
    row = as_strided(a, (n, 1, cols), (a.strides[0], 3, item))  # rows' stride 3 bytes
    assert np.array_equal(copy_windows(row, np.empty(row.shape, dtype)), a[:, :1])
    col = as_strided(a, (n, rows, 1), (a.strides[0], a.strides[1], -item))
    assert np.array_equal(copy_windows(col, np.empty(col.shape, dtype)), a[:, :, :1])
    out = np.zeros((n, 4, cols), dtype)
    dst = as_strided(out[:, 1:], (n, 1, cols), (out.strides[0], -5, item))
    copy_windows(row, dst)
    assert np.array_equal(out[:, 1:2], a[:, :1]) and not out[:, [0, 2, 3]].any()
    with pytest.raises(ValueError, match="src"):  # columns of size > 1 still contiguous
        copy_windows(as_strided(a, (n, rows, 2), (a.strides[0], a.strides[1], 0)),
                     np.empty((n, rows, 2), dtype))


@pytest.mark.parametrize("dtype", [np.float32, brgemm.bfloat16])
def test_copy_windows_interleaved_views(rng, dtype):
    """src and out in one buffer, their elements apart (each row's first and
    second half; every other window): copied, not refused as overlapping;
    views that do share an element still are."""
    a = _windows(rng, dtype)
    n, rows, cols = a.shape
    buf = np.zeros((n, rows, 2 * cols), dtype)
    buf[:, :, :cols] = a
    assert np.array_equal(copy_windows(buf[:, :, :cols], buf[:, :, cols:]), a)
    assert np.array_equal(buf[:, :, :cols], a)
    win = np.zeros((2 * n, rows, cols), dtype)
    win[::2] = a
    copy_windows(win[::2], win[1::2])
    assert np.array_equal(win[1::2], a) and np.array_equal(win[::2], a)
    if cols > 1:
        with pytest.raises(ValueError, match="out"):
            copy_windows(buf[:, :, :cols], buf[:, :, cols - 1:2 * cols - 1])
