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
