"""Argument checks of brgemm.layouts' copies (brgemm.im2col's too, through
layouts): each refuses what the native copies must not see with a TypeError
or ValueError whose message starts with the argument's name."""
import math
import operator

import numpy as np

from brgemm import dtypes
from brgemm.arrays import aligned_empty

LIMIT = 1 << 30  # sizes and offsets the copies take: their products stay far inside int64
_F32, _BF16 = dtypes.float32, dtypes.bfloat16


def size(value, name, low=1, high=LIMIT):
    """An int argument (a NumPy integer too) in [low, high] (None: no bound)
    as an int; a TypeError (not an int: a float, a bool, None) or ValueError
    naming it otherwise."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: expected an int, got {value!r}")
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: expected an int, got {type(value).__name__} {value!r}") from None
    if v < low or high is not None and v > high:
        bound = f">= {low}" if high is None else f"in [{low}, {'2**30' if high == LIMIT else high}]"
        raise ValueError(f"{name}: expected an int {bound}, got {value!r}")
    return v


def threads(value):
    """A copy's threads argument for C: 0 for None (OpenMP's default), else a
    positive int, which the native layer caps at the threads it runs."""
    if value is None:
        return 0
    return size(value, "threads")


def flag(value, name):
    """A yes/no argument as a bool: True, False, NumPy's bools, or the ints 0
    and 1 (what the native copies take); a TypeError naming it otherwise."""
    if value is True or value is False:
        return value
    if isinstance(value, (np.bool_, int, np.integer)) and value in (0, 1):
        return bool(value)
    raise TypeError(f"{name}: expected True or False, got {type(value).__name__} {value!r}")


def pair(value, name, low=1):
    """A pair of ints >= low (positive: a stride (sh, sw)) as a tuple of ints."""
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise TypeError(f"{name}: expected a pair of ints, got {value!r}")
    return size(value[0], name, low), size(value[1], name, low)


def array(x, name, ndim, what):
    """x itself when it is a non-empty NumPy array of `ndim` dimensions
    (None: any number); what: the shape the message names ("[N, C, H, W]")."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name}: expected a numpy.ndarray, got {type(x).__name__}")
    if ndim is not None and x.ndim != ndim or x.size == 0:
        raise ValueError(f"{name}: expected a non-empty {what} array, got shape {x.shape}")
    return x


def tiles(t, name, ndim, what):
    """Tiles the copies read: a non-empty C-contiguous array of `ndim` dimensions."""
    array(t, name, ndim, what)
    if not t.flags.c_contiguous:
        raise ValueError(f"{name}: expected C-contiguous {what} tiles, got strides {t.strides}")
    return t


def row_stride(x, name):
    """The elements between x's rows (x 2-D of 2- or 4-byte elements), None
    where its rows are no matrix the copies can walk row by row."""
    if x.ndim != 2:
        raise ValueError(f"{name}: expected 2 dimensions, got shape {x.shape}")
    item = x.itemsize
    if item not in (2, 4):
        raise TypeError(f"{name}: expected 2- or 4-byte elements (bf16, f32), got {x.dtype}")
    (rows, cols), (s0, s1) = x.shape, x.strides
    # rows that overlap (a broadcast, a sliding window: s0 < a row's bytes) are
    # no matrix the copies can walk row by row: the caller copies them first
    if cols > 1 and s1 != item or s0 < 0 or s0 % item or rows > 1 and s0 < cols * item:
        return None
    return s0 // item if rows > 1 else cols


def matrix(x, name, nonempty=True):
    """x (a 2-D f32 or bf16 array; non-empty with nonempty) and its row
    stride: x itself where its rows can be walked in place, else a copy."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name}: expected a numpy.ndarray, got {type(x).__name__}")
    ld = row_stride(x, name)
    out_dtype(x, None, name)
    if nonempty and x.size == 0:
        raise ValueError(f"{name}: expected a non-empty matrix, got shape {x.shape}")
    if ld is None:
        x = np.ascontiguousarray(x)
        ld = x.shape[1]
    return x, ld


def out_dtype(src, dtype, name="x", widen=False):
    """The element type a copy of `src` writes: its own, or bf16 rounded from
    f32; with widen also f32 from bf16 (exact: the caller widens first)."""
    have = src.dtype
    if (dtype is None or dtype is have) and (have is _F32 or have is _BF16):
        return have  # the common case at once: every copy of a call asks
    if have not in (_F32, _BF16):
        raise TypeError(f"{name}: expected float32 or bfloat16 elements, got {have}")
    try:
        out = have if dtype is None else np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype: expected float32 or bfloat16, got {dtype!r}") from None
    if out != have and not (have == _F32 and out == _BF16) \
            and not (widen and have == _BF16 and out == _F32):
        to = ("itself, float32 (from bfloat16) or bfloat16 (from float32)" if widen
              else "itself or, from float32, to bfloat16")
        raise TypeError(f"dtype: a {have} {name} converts to {to}; got {out}")
    return out


def check_out(out, shape, dtype, name="out"):
    """out (shape: a tuple) as given, checked; a new aligned array where None
    (a MemoryError naming `name` and the size where that cannot be had)."""
    if out is None:
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize  # exact: Python ints
        try:
            if nbytes < 1 << 62:  # (past that NumPy's sizes overflow: its ValueError)
                return aligned_empty(shape, dtype)
        except MemoryError:
            pass
        raise MemoryError(f"{name}: a new {np.dtype(dtype)} result of shape {tuple(shape)} "
                          f"({nbytes / 2**30:.3g} GiB) cannot be allocated here; the "
                          f"arguments' sizes (and blocks, which pad to whole blocks) "
                          f"decide its shape")
    if (not isinstance(out, np.ndarray) or out.shape != shape or out.dtype != dtype
            or not out.flags.c_contiguous or not out.flags.writeable):
        raise ValueError(f"{name}: expected a writeable C-contiguous {dtype} array of shape "
                         f"{tuple(shape)}")
    return out
