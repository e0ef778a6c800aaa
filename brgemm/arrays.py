"""Array helpers shared by the kernel, primitives and benchmarks.

Check mode (BRGEMM_CHECK=1 in the environment, read once at import; the test
suite turns it on): every buffer the library allocates or hands out again --
aligned_empty, Recycler results, the primitives' scratch pools -- comes
filled with NaN (all bits set: a NaN in f32, bf16 and f64 alike). A region
that a plan or a copy fails to write then shows up as NaN in the results
instead of hiding behind whatever the memory held (often zeros: fresh pages
from the OS are zero)."""
import math
import os
import sys
import threading

import numpy as np

from brgemm.lru import LRU

CHECK = os.environ.get("BRGEMM_CHECK", "0") not in ("", "0")


def poison(a):
    """a filled with NaN in check mode (left alone otherwise); returns a.
    For buffers that are handed out again: each hand-out must be written anew."""
    if CHECK:
        if a.flags.c_contiguous:
            a.reshape(-1).view(np.uint8).fill(0xFF)
        else:
            a.fill(np.nan)
    return a


def aligned_empty(shape, dtype, align=64):
    """np.empty whose first element sits on an `align`-byte boundary.

    NumPy only promises 16 bytes; vector loads that straddle cache lines cost
    the kernel measurably (seen on AVX2), so layers and benchmarks use this."""
    dtype = np.dtype(dtype)
    # math.prod, not np.prod: results are made on every call whose caller holds
    # the last ones (autograd does), and np.prod on a tuple costs microseconds
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    nbytes = math.prod(shape) * dtype.itemsize
    raw = np.empty(nbytes + align, np.uint8)
    if CHECK:
        raw.fill(0xFF)  # NaN in every float format: see the module docstring
    start = -raw.ctypes.data % align
    return raw[start:start + nbytes].view(dtype).reshape(shape)


# Recycler's bounds, per pool and thread: arrays of this many (name, shape,
# dtype) keys at most, and past each name's newest no more bytes than this (the arrays
# a caller let go of; in training most of them are alive in autograd anyway)
RECYCLED_ARRAYS = 16
RECYCLED_BYTES = 64 << 20


class Recycler:
    """Result arrays that are reused once their callers have let go of them.

    A primitive returns new arrays; a fresh large one costs a page fault per
    page on first write, as much as the copy into it. `empty(name, shape,
    dtype)` gives back the array it handed out last under that name, shape
    and dtype if nothing else refers to it any more -- no result the caller
    still holds, nor any view of it, is ever written -- else a new one.
    Keyed by shape too, so that the layers of a model, whose results share a
    name, each find their own (one array per name went back and forth
    between their shapes and was made anew on every call); at most
    RECYCLED_ARRAYS keys, the least recently used going first, and no more
    than RECYCLED_BYTES past each name's newest. Each starts on a 64-byte line
    (aligned_empty): NumPy starts large arrays 16 or 48 bytes past one, and
    a plan's parallel tasks that write neighbouring column blocks of a plain
    result would then share the lines where their row segments meet, which
    bounce between cores (fc's forward at 16 threads: benchmarks/RESULTS.md).
    One pool per thread. In check mode every hand-out is NaN-filled."""

    def __init__(self):
        self._local = threading.local()

    def empty(self, name, shape, dtype):
        pool = self._local.__dict__.get("pool")
        if pool is None:
            pool = self._local.pool = LRU(RECYCLED_ARRAYS)
        shape, dtype = tuple(shape), np.dtype(dtype)
        key = (name, shape, dtype)
        held = pool.get(key)
        if held is not None:
            raw, out = held
            # the array is a view of `raw`, which owns the memory, and NumPy points
            # every view of it at `raw` too: references to `out` are the pool's
            # tuple, `out` and getrefcount's argument; to `raw` the tuple, out.base,
            # `raw` and the argument. One more anywhere: the caller holds it
            if sys.getrefcount(out) == 3 and sys.getrefcount(raw) == 4:
                return poison(out)
        out = aligned_empty(shape, dtype)  # NaN-filled in check mode
        pool.put(key, (out.base, out))
        _trim(pool)
        return out


def _trim(pool):
    """A Recycler's pool within RECYCLED_BYTES, the least recently used going
    first, but never a name's newest array (the LRU bounds the count): one
    array per name was the pool before shapes, and a layer's results larger
    than the bound together (fc's dW of 4096 x 4096 beside its dx) evicted
    each other on every call, fresh pages each time, where it kept them."""
    entries = pool.items()  # least recently used first
    newest = {key[0]: key for key, _ in entries}
    nbytes = sum(out.nbytes for _, (_, out) in entries)
    for key, (_, out) in entries:
        if nbytes <= RECYCLED_BYTES:
            break
        if newest[key[0]] != key:
            pool.pop(key)
            nbytes -= out.nbytes


class Buffers:
    """One owner's named buffers (a layer's workspace), reused call after call:
    fresh pages cost a fault each on first write. A name keeps its memory
    while the dtype stays and it is large enough (it grows, never shrinks;
    clear() lets it all go). A buffer is only valid until its name is asked
    for again, and each user must write what it reads: in check mode every
    hand-out comes NaN-filled."""

    def __init__(self):
        self._bufs = {}
        self._views = {}  # name -> the view handed out last (made again only when it changes)

    def get(self, name, shape, dtype=np.float32):
        view = self._views.get(name)
        if view is not None and view.shape == shape and view.dtype == dtype:
            return poison(view)
        shape = tuple(map(int, shape))
        n, dtype = math.prod(shape), np.dtype(dtype)  # math.prod: np.prod costs microseconds
        buf = self._bufs.get(name)
        if buf is None or buf.dtype != dtype or buf.size < n:
            buf = self._bufs[name] = aligned_empty((max(n, 1),), dtype)
        view = self._views[name] = buf[:n].reshape(shape)
        return poison(view)

    def clear(self):
        self._bufs.clear()
        self._views.clear()

    @property
    def nbytes(self):
        return sum(b.nbytes for b in self._bufs.values())


def to_device(x, backend=None):
    """x as the backend keeps tensors: NumPy itself on the CPU, a USM-resident
    DeviceArray on SYCL. Plans take either; device arrays skip the copies."""
    from brgemm.backend import get
    if not isinstance(x, np.ndarray):
        raise TypeError(f"x: expected a numpy.ndarray, got {type(x).__name__}")
    return get(backend).to_device(x)


def to_host(x):
    """A NumPy array with x's contents (x itself when it is one)."""
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "numpy"):
        return x.numpy()
    raise TypeError(f"x: expected a numpy.ndarray or a device array, got {type(x).__name__}")


_dtypes = {}  # a dtype argument -> np.dtype: np.dtype() per buffer costs as much as the look-up


def _dtype(dtype):
    try:
        return _dtypes[dtype]
    except KeyError:
        return _dtypes.setdefault(dtype, np.dtype(dtype))
    except TypeError:  # unhashable (a structured dtype's spec)
        return np.dtype(dtype)


class Scratch:
    """Per-thread 64-byte aligned buffers kept by name and size, for the layout
    copies of functional calls: fresh pages cost a fault each, as much as the
    copies themselves. A buffer is only valid until the same thread asks for
    the same name again, and each user must write what it reads: in check mode
    every hand-out comes NaN-filled. A thread keeps the `limit` most recently
    used (brgemm/lru.py)."""

    def __init__(self, limit=64):
        self._local, self._limit = threading.local(), limit

    def get(self, name, shape, dtype):
        bufs = getattr(self._local, "bufs", None)
        if bufs is None:
            bufs = self._local.bufs = LRU(self._limit)
        key = (name, tuple(shape), _dtype(dtype))
        buf = bufs.get(key)
        if buf is None:
            buf = bufs.get_or_make(key, lambda: aligned_empty(shape, dtype))
        return poison(buf) if CHECK else buf
