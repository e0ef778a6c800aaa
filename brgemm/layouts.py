"""Blocked layouts: a matrix M [R, S] as tiles [R/br][S/bs][br][bs] (or with
the tile grid swapped, [S/bs][R/br][br][bs]), zero-padded at ragged edges.
Zeros add nothing to a reduction and padded outputs are cropped on the way
out, so any size works with any block size. The copies run in C, parallel
over tiles: the functional forms of the primitives pay them on every call."""
import numpy as np

from brgemm.arrays import aligned_empty
from brgemm.backend import cpu


def pick_block(dim, target, multiple=1):
    """A block size for a dimension of `dim`: all of it when it fits in `target`,
    else the largest divisor in [target/2, target] that is a multiple of
    `multiple` (the kernel's vector width for its n), else `target` and padding."""
    if dim <= target:
        return dim
    for b in range(target, target // 2 - 1, -1):
        if dim % b == 0 and b % multiple == 0:
            return b
    return target


def nblocks(dim, b):
    return -(-dim // b)


def _row_stride(x, name):
    if x.ndim != 2:
        raise ValueError(f"{name}: expected 2 dimensions, got shape {x.shape}")
    if x.itemsize not in (2, 4):
        raise TypeError(f"{name}: expected 2- or 4-byte elements (bf16, f32), got {x.dtype}")
    if x.shape[1] > 1 and x.strides[1] != x.itemsize or x.strides[0] < 0 or \
            x.strides[0] % x.itemsize:
        return None
    return max(x.strides[0] // x.itemsize, x.shape[1]) if x.shape[0] > 1 else x.shape[1]


def to_blocks(x, br, bs, transpose=False, swap_grid=False, out=None, threads=None):
    """M = x (or x.T with transpose) as [Rb][Sb][br][bs] tiles ([Sb][Rb][..] with
    swap_grid), 64-byte aligned; into `out` when given (layers reuse buffers)."""
    ld = _row_stride(x, "x")
    if ld is None:
        x = np.ascontiguousarray(x)
        ld = x.shape[1]
    R, S = (x.shape[1], x.shape[0]) if transpose else x.shape
    Rb, Sb = nblocks(R, br), nblocks(S, bs)
    shape = (Sb, Rb, br, bs) if swap_grid else (Rb, Sb, br, bs)
    if out is None:
        out = aligned_empty(shape, x.dtype)
    elif out.shape != shape or out.dtype != x.dtype or not out.flags.c_contiguous:
        raise ValueError(f"out: expected a C-contiguous {x.dtype} array of shape {shape}")
    cpu.check(cpu.lib.brgemm_cpu_to_blocks(cpu.address(x), R, S, ld, transpose, swap_grid,
                                           x.itemsize, br, bs, cpu.address(out),
                                           threads or 0), "to_blocks")
    return out


def from_blocks(t, R, S, transpose=False, swap_grid=False, dtype=None, threads=None, out=None):
    """The matrix M [R, S] that tiles t hold (M.T with transpose), as a new
    array or into `out` (C-contiguous, t's dtype, not overlapping t)."""
    if t.ndim != 4 or not t.flags.c_contiguous:
        raise ValueError(f"t: expected C-contiguous tiles [.., .., br, bs], got shape {t.shape}")
    br, bs = t.shape[2:]
    grid = (nblocks(S, bs), nblocks(R, br)) if swap_grid else (nblocks(R, br), nblocks(S, bs))
    if t.shape[:2] != grid:
        raise ValueError(f"t: tiles {t.shape} do not cover a {R}x{S} matrix")
    shape = (S, R) if transpose else (R, S)
    if out is None:
        out = np.empty(shape, t.dtype)
    elif (not isinstance(out, np.ndarray) or out.shape != shape or out.dtype != t.dtype
          or not out.flags.c_contiguous or not out.flags.writeable):
        raise ValueError(f"out: expected a writeable C-contiguous {t.dtype} array of shape {shape}")
    elif np.may_share_memory(out, t):
        raise ValueError("out: overlaps t")
    cpu.check(cpu.lib.brgemm_cpu_from_blocks(cpu.address(t), R, S, br, bs, swap_grid, transpose,
                                             t.itemsize, cpu.address(out), out.shape[1],
                                             threads or 0), "from_blocks")
    return out if dtype is None or np.dtype(dtype) == out.dtype else out.astype(dtype)


def transpose_blocks(t, out=None, threads=None):
    """Tiles of M [Rb][Sb][br][bs] -> tiles of M.T [Sb][Rb][bs][br] (into `out`)."""
    if t.ndim != 4 or not t.flags.c_contiguous or t.itemsize not in (2, 4):
        raise ValueError(f"t: expected C-contiguous 4-D tiles of bf16 or f32, got {t.shape} {t.dtype}")
    Rb, Sb, br, bs = t.shape
    if out is None:
        out = aligned_empty((Sb, Rb, bs, br), t.dtype)
    elif out.shape != (Sb, Rb, bs, br) or out.dtype != t.dtype or not out.flags.c_contiguous:
        raise ValueError(f"out: expected a C-contiguous {t.dtype} array of shape {(Sb, Rb, bs, br)}")
    cpu.check(cpu.lib.brgemm_cpu_swap_tiles(cpu.address(t), Rb, Sb, br, bs, t.itemsize,
                                            cpu.address(out), threads or 0), "transpose_blocks")
    return out
