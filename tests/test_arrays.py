"""Array helpers: result recycling never hands out an array someone still holds."""
import numpy as np
import pytest

import brgemm
from brgemm.arrays import Recycler
from brgemm.layouts import from_blocks, to_blocks


def test_recycler_reuses_only_released_results():
    """Results start on 64-byte lines (plans' tasks then share no line of a
    plain result), and come back only once nothing refers to them: neither the
    array nor any view of it."""
    pool = Recycler()
    a = pool.empty("y", (4, 5), np.float32)
    assert a.ctypes.data % 64 == 0
    a[:] = 1
    b = pool.empty("y", (4, 5), np.float32)       # a is still held: a new array
    assert b is not a and not np.shares_memory(a, b)
    b[:] = 2
    np.testing.assert_array_equal(a, 1)
    view = b[1:]
    del b
    c = pool.empty("y", (4, 5), np.float32)       # b's memory is still reachable via view
    assert not np.shares_memory(c, view)
    address = c.ctypes.data
    del c
    d = pool.empty("y", (4, 5), np.float32)       # released: the same memory again
    assert d.ctypes.data == address
    e = d.reshape(5, 4)                           # a reshaped view still holds d's memory
    del d
    f = pool.empty("y", (4, 5), np.float32)
    assert not np.shares_memory(f, e) and f.ctypes.data % 64 == 0
    assert pool.empty("y", (4, 6), np.float32).shape == (4, 6)   # other shape: new
    assert pool.empty("y", (4, 6), np.float64).dtype == np.float64


def test_from_blocks_into_out(rng):
    x = rng.standard_normal((7, 9)).astype(np.float32)
    t = to_blocks(x, 4, 4)
    out = np.empty((7, 9), np.float32)
    assert from_blocks(t, 7, 9, out=out) is out
    np.testing.assert_array_equal(out, x)
    with pytest.raises(ValueError, match="^out: expected"):
        from_blocks(t, 7, 9, out=np.empty((9, 7), np.float32))
    with pytest.raises(ValueError, match="^out: expected"):
        from_blocks(t, 7, 9, out=np.empty((7, 9), np.float64))
    one = to_blocks(x[:4, :4], 4, 4)              # a single tile
    with pytest.raises(ValueError, match="^out: overlaps"):
        from_blocks(one, 4, 4, out=one[0, 0])


def test_buffers_keep_memory_by_name_and_grow_only():
    """A layer's named buffers: the same memory for the same name while it is
    large enough and of the same dtype, 64-byte aligned, NaN on every hand-out
    in check mode (the suite's mode), new memory when it must grow."""
    bufs = brgemm.arrays.Buffers()
    a = bufs.get("w", (4, 6), np.float32)
    assert a.shape == (4, 6) and a.ctypes.data % 64 == 0 and np.isnan(a).all()
    a[...] = 1.0
    b = bufs.get("w", (3, 5), np.float32)   # smaller: the same memory, NaN again
    assert b.ctypes.data == a.ctypes.data and b.shape == (3, 5) and np.isnan(b).all()
    c = bufs.get("w", (5, 6), np.float32)   # larger: new memory
    assert c.shape == (5, 6) and c.size == 30
    d = bufs.get("w", (5, 6), brgemm.bfloat16)  # another dtype: new memory
    assert d.dtype == brgemm.bfloat16
    assert bufs.get("x", (0,), np.float32).shape == (0,)
    assert bufs.nbytes >= 30 * 2
    # asked again as before: the same memory, shape and dtype, NaN again; after
    # another shape or dtype in between, that one's memory
    d[...] = 1
    e = bufs.get("w", [5, 6], brgemm.bfloat16)
    assert e.ctypes.data == d.ctypes.data and e.shape == (5, 6)
    assert np.isnan(e.astype(np.float32)).all()
    f = bufs.get("w", (2, 2), np.float32)
    assert f.dtype == np.float32 and f.shape == (2, 2) and f.ctypes.data != d.ctypes.data
    assert bufs.get("w", (5, 6), brgemm.bfloat16).ctypes.data != d.ctypes.data  # f32 memory now
    bufs.clear()
    assert bufs.nbytes == 0
