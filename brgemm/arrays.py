"""Array helpers shared by the kernel, primitives and benchmarks."""
import numpy as np


def aligned_empty(shape, dtype, align=64):
    """np.empty whose first element sits on an `align`-byte boundary.

    NumPy only promises 16 bytes; vector loads that straddle cache lines cost
    the kernel measurably (seen on AVX2), so layers and benchmarks use this."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + align, np.uint8)
    start = -raw.ctypes.data % align
    return raw[start:start + nbytes].view(dtype).reshape(shape)


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
