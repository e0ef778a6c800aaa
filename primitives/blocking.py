"""Blocked layouts for the primitives: a matrix [R, S] as [R/br][S/bs][br][bs]
tiles, zero-padded at the ragged edges (zeros add nothing to a reduction, and
padded outputs are cropped on the way out), and the block sizes to use."""
import numpy as np

from brgemm.arrays import aligned_empty


def pick_block(dim, target, multiple=1):
    """A block size for a dimension of `dim`: all of it when it fits in `target`,
    else the largest divisor in [target/2, target] that is a multiple of
    `multiple` (vector width for the kernel's n), else `target` and padding."""
    if dim <= target:
        return dim
    for b in range(target, target // 2 - 1, -1):
        if dim % b == 0 and b % multiple == 0:
            return b
    return target


def nblocks(dim, b):
    return -(-dim // b)


def to_blocks(x, br, bs, transpose=False, out=None):
    """x [R, S] (or x.T when transpose) -> [Rb][Sb][br][bs] tiles, zero-padded,
    64-byte aligned; into `out` when given (the layer path reuses buffers)."""
    m = x.T if transpose else x
    R, S = m.shape
    Rb, Sb = nblocks(R, br), nblocks(S, bs)
    if out is None:
        out = aligned_empty((Rb, Sb, br, bs), x.dtype)
    if Rb * br != R or Sb * bs != S:
        padded = np.zeros((Rb * br, Sb * bs), x.dtype)
        padded[:R, :S] = m
        m = padded
    out[...] = m.reshape(Rb, br, Sb, bs).transpose(0, 2, 1, 3)
    return out


def from_blocks(t, R, S, dtype=None):
    """[Rb][Sb][br][bs] tiles -> the [R, S] matrix they hold (a copy)."""
    Rb, Sb, br, bs = t.shape
    full = t.transpose(0, 2, 1, 3).reshape(Rb * br, Sb * bs)
    return np.array(full[:R, :S], dtype=dtype or t.dtype)


def swap_blocks(t, out=None):
    """[Rb][Sb][br][bs] -> [Sb][Rb][bs][br]: the same matrix transposed, blocked."""
    Rb, Sb, br, bs = t.shape
    if out is None:
        out = aligned_empty((Sb, Rb, bs, br), t.dtype)
    out[...] = t.transpose(1, 0, 3, 2)
    return out
