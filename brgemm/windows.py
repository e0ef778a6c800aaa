"""Windows of rows copied between strided views, in parallel C: out[q, i, :] =
src[q, i, :] for two 3-D NumPy views of the same shape whose last axis is
contiguous. What NumPy's own strided copy does element run by element run on
one core: conv's pointwise plans gather the last pixels of each NCHW image's
rows beside the other images' (conv_pointwise.pointwise_tail) and store
their products back, both as windows of short rows."""
import numpy as np

from brgemm._layout_args import threads as _threads
from brgemm.backend import cpu

_copy, _cast = cpu.lib.brgemm_cpu_copy_windows, cpu.ffi.cast
_TooHard = getattr(np, "exceptions", np).TooHardError  # (NumPy 1.24: np.TooHardError)


def _at(a):
    """A pointer to a's first element (any strides)."""
    return _cast("void *", a.__array_interface__["data"][0])


def _walkable(a, name):
    """a's strides in elements, checked: a 3-D array of 2- or 4-byte elements,
    its last axis contiguous, no negative stride. Strides no element is
    reached by (an axis of size 1, an empty array: NumPy 2 gives new ones
    zero strides) are taken as 0, whatever they are."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name}: expected a numpy.ndarray, got {type(a).__name__}")
    if a.ndim != 3:
        raise ValueError(f"{name}: expected 3 dimensions (windows, rows, columns), got shape "
                         f"{a.shape}")
    item = a.itemsize
    if item != 4 and item != 2:
        raise TypeError(f"{name}: expected 2- or 4-byte elements (bf16, f32), got {a.dtype}")
    if not a.size:
        return [0, 0, 1]
    s0, s1, s2 = (s if n > 1 else 0 for s, n in zip(a.strides, a.shape))
    if s0 < 0 or s1 < 0 or s0 % item or s1 % item or (s2 != item and a.shape[2] > 1):
        raise ValueError(f"{name}: expected non-negative strides and contiguous rows, got "
                         f"strides {a.strides}")
    return [s0 // item, s1 // item, 1]


def _distinct(shape, steps):
    """Whether no two elements of a view of these sizes and element strides
    share memory (each stride past all that the smaller ones reach); an
    empty view has none to share."""
    if 0 in shape:
        return True
    reach = 0
    for step, n in sorted((s, n) for s, n in zip(steps, shape) if n > 1):
        if step <= reach:
            return False
        reach += step * (n - 1)
    return True


def _shared(out, src):
    """Whether out and src may share an element: their bounds overlap and
    NumPy's exact answer says so, or is too costly to find (views of one
    buffer whose elements interleave, a row's halves, share none)."""
    if not np.may_share_memory(out, src):
        return False
    try:
        return np.shares_memory(out, src, max_work=1 << 12)
    except _TooHard:
        return True


def copy_windows(src, out, threads=None):
    """out[...] = src for 3-D views (windows, rows, columns) of the same shape
    and dtype, each row contiguous: one parallel pass. out must be writeable,
    its elements distinct, and share no memory with src. Returns out."""
    s_steps, o_steps = _walkable(src, "src"), _walkable(out, "out")
    if out.shape != src.shape or out.dtype != src.dtype:
        raise ValueError(f"out: expected a {src.dtype} view of shape {src.shape}, got {out.dtype} "
                         f"{out.shape}")
    if not out.flags.writeable or not _distinct(out.shape, o_steps):
        raise ValueError("out: expected a writeable view whose elements are distinct")
    if _shared(out, src):
        raise ValueError("out: overlaps src")
    count, rows, cols = src.shape
    if rows > 1 and s_steps[1] < cols:  # rows that overlap (a sliding window): walked from a copy
        src = np.ascontiguousarray(src)
        s_steps = [rows * cols, cols, 1]
    if src.size:
        cpu.check(_copy(_at(src), s_steps[0], max(s_steps[1], cols), _at(out), o_steps[0],
                        max(o_steps[1], cols), count, rows, cols, src.itemsize, _threads(threads)),
                  "copy_windows")
    return out
