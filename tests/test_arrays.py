"""Array helpers: result recycling never hands out an array someone still holds."""
import numpy as np
import pytest

import brgemm
from brgemm import arrays
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


def test_recycler_keeps_an_array_per_shape(rng):
    """Layers of several shapes under one name (a model's layers' "y") each get
    their own array back once released: one array per name was made anew on
    every call where two shapes took turns. At most RECYCLED_ARRAYS keys, the
    least recently used dropped first, and past each name's newest no more
    than RECYCLED_BYTES kept."""
    pool = Recycler()
    shapes = [tuple(int(v) for v in rng.integers(1, 9, 2)) for _ in range(5)]
    shapes = list(dict.fromkeys(shapes))  # distinct
    first = {s: pool.empty("y", s, np.float32).ctypes.data for s in shapes}
    for _ in range(3):
        for s in shapes:  # each released at once: its own memory comes back
            assert pool.empty("y", s, np.float32).ctypes.data == first[s]
    held = [pool.empty("y", s, np.float32) for s in shapes]
    assert len({a.ctypes.data for a in held}) == len(shapes)
    assert all(pool.empty("y", s, np.float32) is not a for s, a in zip(shapes, held))
    n = arrays.RECYCLED_ARRAYS
    many = Recycler()
    addresses = [many.empty("y", (1, i + 1), np.float32).ctypes.data for i in range(n + 1)]
    assert many.empty("y", (1, n + 1), np.float32).ctypes.data == addresses[-1]
    assert len(many._local.pool) == n  # (1, 1), the least recently used, went
    big = Recycler()
    side = int((arrays.RECYCLED_BYTES // 4) ** 0.5) + 1  # one array past the bound
    a = big.empty("y", (side, side), np.float32)
    address = a.ctypes.data
    del a
    assert big.empty("y", (side, side), np.float32).ctypes.data == address  # the newest stays
    big.empty("y", (2, 2), np.float32)
    assert [k[1] for k, _ in big._local.pool.items()] == [(2, 2)]  # the big one went
    a = big.empty("dw", (side, side), np.float32)  # each name's newest stays, however large
    address = a.ctypes.data
    del a
    big.empty("y", (3, 3), np.float32)
    assert big.empty("dw", (side, side), np.float32).ctypes.data == address
    assert [k[:2] for k, _ in big._local.pool.items()] == [("y", (3, 3)), ("dw", (side, side))]


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
