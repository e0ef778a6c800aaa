"""Argument checks every primitive shares."""
import os

import numpy as np

from brgemm import dtypes
from brgemm.machine import resolve_backend


def backend_name(backend):
    """The backend argument resolved (None: BRGEMM_BACKEND, else "cpu"); a
    ValueError naming it when unknown or not available here."""
    return resolve_backend(backend)


def flag(value, name):
    """A True/False argument as given; a TypeError naming it otherwise."""
    if value is not True and value is not False:
        raise TypeError(f"{name}: expected True or False, got {value!r}")
    return value


_TAKES = {"f32": (dtypes.float32,), "bf16": (dtypes.float32, dtypes.bfloat16)}


def operands(dtype, *arrays, names, ndim=2, nonempty=False):
    """The one check of a primitive's array arguments: NumPy arrays of a dtype
    that dtype= takes (f32: float32; bf16: float32 or bfloat16), with `ndim`
    dimensions (None: any), none of them empty with nonempty. Returns the
    first array's dtype (what the primitive's results come back in)."""
    allowed = _TAKES.get(dtype) if type(dtype) is str else None
    if allowed is None:
        allowed = _TAKES[dtypes.check_name(dtype)]  # raises, naming it, if not a dtype name
    for x, name in zip(arrays, names):
        if type(x) is np.ndarray and x.dtype is dtypes.float32 and (
                ndim is None or x.ndim == ndim and not (nonempty and 0 in x.shape)):
            continue  # the common case at once: an f32 array, taken by both dtypes
        if not isinstance(x, np.ndarray):
            raise TypeError(f"{name}: expected a numpy.ndarray, got {type(x).__name__}")
        if x.dtype not in allowed:
            raise TypeError(f"{name}: expected dtype {' or '.join(map(str, allowed))} "
                            f"for dtype={dtype!r}, got {x.dtype}")
        if ndim is not None and (x.ndim != ndim or (nonempty and 0 in x.shape)):
            raise ValueError(f"{name}: expected {ndim}{' non-empty' * nonempty} dimensions, "
                             f"got shape {x.shape}")
    return arrays[0].dtype


def bias_vector(b, K, dtype, name="b"):
    """A bias argument as the plans read it: None, or b [K] (of a dtype that
    dtype= takes) as a C-contiguous float32 array, a view where it is one."""
    if b is None:
        return None
    operands(dtype, b, names=(name,), ndim=None)
    if b.shape != (K,):
        raise ValueError(f"{name}: expected shape ({K},), got {b.shape}")
    return np.ascontiguousarray(b, dtype=np.float32)


def weight_array(a, name, shape):
    """A weight a layer's user set (its attribute, set_weights): a float32 or
    bfloat16 array of `shape`; a TypeError or ValueError naming it otherwise."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name}: expected a numpy.ndarray, got {type(a).__name__}")
    if a.dtype not in _TAKES["bf16"]:
        raise TypeError(f"{name}: expected dtype float32 or bfloat16, got {a.dtype}")
    if a.shape != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {a.shape}")
    return a


def widened(w, ab):
    """w as a copy of element type ab reads it: a bfloat16 weight of an f32
    layer widened to f32 (exact; set by hand, weight_array takes it)."""
    return w.astype(np.float32) if ab == np.float32 and w.dtype != np.float32 else w


def writable(a, name):
    """A weight step() updates in place: a ValueError naming it where it is read-only."""
    if not a.flags.writeable:
        raise ValueError(f"{name}: a read-only array; step() updates it in place")
    return a


def learning_rate(lr):
    """step()'s lr as the f32 the update multiplies by: a finite real number."""
    if isinstance(lr, bool) or not isinstance(lr, (int, float, np.integer, np.floating)):
        raise TypeError(f"lr: expected a number, got {type(lr).__name__} {lr!r}")
    if not np.isfinite(lr) or abs(float(lr)) > float(np.finfo(np.float32).max):
        raise ValueError(f"lr: expected a finite number, got {lr!r}")
    return np.float32(lr)


def positive(v, name):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise ValueError(f"{name}: expected a positive int, got {v!r}")
    return int(v)


def block_sizes(blocks, name="blocks"):
    """None, or a sequence of three positive ints (bn, bc, bk) as a tuple."""
    if blocks is None:
        return None
    if isinstance(blocks, (str, bytes)) or not hasattr(blocks, "__len__") or len(blocks) != 3:
        raise TypeError(f"{name}: expected three block sizes (bn, bc, bk), got {blocks!r}")
    for b in blocks:
        if isinstance(b, bool) or not isinstance(b, (int, np.integer)):
            raise TypeError(f"{name}: expected ints, got {blocks!r}")
        if not 1 <= b <= 1 << 20:
            raise ValueError(f"{name}: expected sizes in [1, 2**20], got {tuple(blocks)}")
    return tuple(int(b) for b in blocks)


def _physical_memory():
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 1 << 62


_MEMORY = _physical_memory()  # read once: two sysconf calls cost a functional call 1 us


def memory_bytes():
    """This machine's physical memory: no buffer larger than it can be made."""
    return _MEMORY


def fits(nbytes, name, what):
    """A ValueError naming `name` before a buffer of nbytes that cannot exist is made.
    what: the buffer's description, or a function making it (when it is
    formatted from sizes: per call, the formatting cost more than the test)."""
    if nbytes > memory_bytes():
        what = what() if callable(what) else what
        raise ValueError(f"{name}: {what} would take {nbytes / 2**30:.3g} GiB, more than this "
                         f"machine's {memory_bytes() / 2**30:.3g} GiB of memory")
