"""The im2col matrix of a convolution (conv.columns' path, where the
weights outweigh the images): an [N, C, H, W] image's patches copied into
tiles of the matrix or of its transpose, and the adjoint, a transposed
im2col matrix summed back into an image. The copies run in C
(kernels/cpu/layout_image.c), parallel over tiles and images."""
import numpy as np

from brgemm import _layout_args as args
from brgemm.backend import cpu
from brgemm.layouts import _check_out, _image_strides, _out_dtype, nblocks


def _geometry(kernel, stride, padding):
    """((R, S), (sh, sw), (ph, pw)) as ints, each pair checked by name."""
    return (args.pair(kernel, "kernel"), args.pair(stride, "stride"),
            args.pair(padding, "padding", low=0))


def image_to_columns(x, kernel, stride, padding, bd, bp, dtype=None, out=None, threads=None,
                     transposed=False):
    """x [N, C, H, W] (any non-negative strides: read in place) -> the im2col
    matrix of a convolution with an R x S kernel as tiles [Pb][Db][bd][bp]: row
    (c * R + r) * S + s, column (n * P + p) * Q + q holds pixel (p * sh + r -
    ph, q * sw + s - pw) of channel c of image n, zero outside the image and
    in the padded rows and columns. transposed: the matrix's transpose, as
    tiles [Db][Pb][bp][bd] (transpose_blocks of the above, in one pass)."""
    if not isinstance(x, np.ndarray) or x.ndim != 4 or 0 in x.shape:
        raise ValueError(f"x: expected a non-empty [N, C, H, W] array, got "
                         f"{getattr(x, 'shape', type(x).__name__)}")
    dt = _out_dtype(x, dtype)
    N, C, H, W = x.shape
    (R, S), (sh, sw), (ph, pw) = _geometry(kernel, stride, padding)
    bd, bp, threads = args.size(bd, "bd"), args.size(bp, "bp"), args.threads(threads)
    transposed = args.flag(transposed, "transposed")
    P, Q = (H + 2 * ph - R) // sh + 1, (W + 2 * pw - S) // sw + 1
    if min(P, Q) < 1:
        raise ValueError(f"kernel: a {R}x{S} kernel with stride {stride} and padding "
                         f"{padding} does not fit a {H}x{W} image (blocks {bd}, {bp})")
    x, strides = _image_strides(x)
    Pb, Db = nblocks(N * P * Q, bp), nblocks(C * R * S, bd)
    out = _check_out(out, (Db, Pb, bp, bd) if transposed else (Pb, Db, bd, bp), dt)
    if np.may_share_memory(out, x):
        raise ValueError("out: overlaps x")
    cpu.check(cpu.lib.brgemm_cpu_image_to_columns(
        cpu.address(x), N, C, H, W, strides, x.itemsize, R, S, sh, sw, ph, pw, P, Q, bd, bp,
        cpu.address(out), out.itemsize, int(transposed), threads), "image_to_columns")
    return out


def columns_to_image(xc, shape, kernel, stride, padding, out=None, threads=None):
    """image_to_columns' adjoint on the plain transposed im2col matrix: xc [N P
    Q][>= C R S] f32 (rows contiguous) -> [N, C, H, W] f32 (`shape`), each of
    xc's elements summed into the pixel it reads in image_to_columns (those in
    the padding dropped)."""
    if not isinstance(shape, (tuple, list)) or len(shape) != 4:
        raise TypeError(f"shape: expected (N, C, H, W), got {shape!r}")
    N, C, H, W = (args.size(d, "shape") for d in shape)
    (R, S), (sh, sw), (ph, pw) = _geometry(kernel, stride, padding)
    threads = args.threads(threads)
    P, Q = (H + 2 * ph - R) // sh + 1, (W + 2 * pw - S) // sw + 1
    if min(P, Q) < 1:
        raise ValueError(f"kernel: a {R}x{S} kernel with stride {stride} and padding "
                         f"{padding} does not fit a {H}x{W} image")
    if (not isinstance(xc, np.ndarray) or xc.dtype != np.float32 or xc.ndim != 2
            or xc.shape[0] != N * P * Q or xc.shape[1] < C * R * S or xc.strides[1] != 4):
        raise ValueError(f"xc: expected f32 [{N * P * Q}, >= {C * R * S}] with contiguous rows, "
                         f"got {getattr(xc, 'dtype', '?')} {getattr(xc, 'shape', type(xc).__name__)}")
    out = _check_out(out, (N, C, H, W), np.float32)
    if np.may_share_memory(out, xc):
        raise ValueError("out: overlaps xc")
    cpu.check(cpu.lib.brgemm_cpu_columns_to_image(
        cpu.ffi.cast("const float *", cpu.address(xc)), xc.strides[0] // 4, N, C, H, W, R, S,
        sh, sw, ph, pw, P, Q, cpu.ffi.cast("float *", cpu.address(out)), threads),
        "columns_to_image")
    return out
