"""B operands in VNNI pairs: the layout bf16 kernels read without packing.

A bf16 tile [rows][cols] becomes [rows/2][cols][2]: rows 2p and 2p+1 of a
column side by side. Blocks recorded with `Block(..., b_vnni=True)` read their
B tiles that way, so a layer that keeps its weights (or a pass's streamed
operand, once per call) in this layout packs nothing in the kernel."""
import numpy as np

from brgemm import _layout_args as args, dtypes
from brgemm.arrays import aligned_empty
from brgemm.backend import cpu


def takes_vnni_b(k, dtype, backend="cpu"):
    """Whether blocks of depth k read B as VNNI pairs here: bf16 kernels of the
    CPU backend, on AMX tiles for a k that splits into whole tile chunks, else
    for any even k (AVX512-BF16 dot products read the pairs as they are)."""
    return dtype == "bf16" and backend == "cpu" and cpu.takes_vnni_b(k)


def vnni_tiles(x, out=None, threads=None):
    """x [..., rows, cols] bf16 (C-contiguous, rows even) -> the same shape with
    every tile in VNNI pairs; into `out` when given (not x itself)."""
    if not isinstance(x, np.ndarray) or x.dtype != dtypes.bfloat16:
        raise TypeError(f"x: expected a bfloat16 numpy.ndarray, got "
                        f"{getattr(x, 'dtype', type(x).__name__)}")
    if x.ndim < 2 or x.shape[-2] % 2 or not x.flags.c_contiguous:
        raise ValueError(f"x: expected C-contiguous tiles [..., rows, cols] with even rows, "
                         f"got shape {x.shape}")
    if out is None:
        out = aligned_empty(x.shape, x.dtype)
    elif (not isinstance(out, np.ndarray) or out.shape != x.shape or out.dtype != x.dtype
          or not out.flags.c_contiguous or not out.flags.writeable
          or np.may_share_memory(out, x)):  # both contiguous: their bounds are their bytes
        raise ValueError("out: expected a writeable C-contiguous array of x's shape and dtype, "
                         "apart from x")
    rows, cols = x.shape[-2:]
    cpu.check(cpu.lib.brgemm_cpu_vnni_tiles(cpu.address(x), x.size // (rows * cols), rows, cols,
                                            cpu.address(out), args.threads(threads)), "vnni_tiles")
    return out


def unpack_block(flat, offset, k, n, ldb):
    """The k x n block whose VNNI pairs start at `offset` of flat (pair rows
    2*ldb apart), as a plain array: what the eager executor hands the kernel."""
    pairs = np.lib.stride_tricks.as_strided(flat[offset:], ((k + 1) // 2, n, 2),
                                            (2 * ldb * flat.itemsize, 2 * flat.itemsize,
                                             flat.itemsize))
    return pairs.transpose(0, 2, 1).reshape(-1, n)[:k]
