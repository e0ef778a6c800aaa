"""The wrap fix of conv's shifted forward (primitives/conv_in_place.py,
shifted_plan), in C: kernels/cpu/conv_wrap.c."""
import numpy as np

from brgemm.backend import cpu


def conv_unwrap(y, x, w, isa=0, threads=None):
    """The shifted conv forward's wrap fix, in place on y [N, K, H, W] (see
    kernels/cpu/conv_wrap.c): x [N, C, H, W] and w [K, C, 3, 3], contiguous
    f32. isa: 0 the best this CPU runs, 1 plain, 2 AVX2, 3 AVX-512 (tests)."""
    for name, a in (("x", x), ("w", w), ("y", y)):
        if not isinstance(a, np.ndarray) or a.ndim != 4:
            raise ValueError(f"{name}: expected a 4-d array, got {getattr(a, 'shape', type(a))}")
    N, C, H, W = x.shape
    K = w.shape[0]
    for name, a, shape in (("x", x, x.shape), ("w", w, (K, C, 3, 3)), ("y", y, (N, K, H, W))):
        if a.dtype != np.float32 or not a.flags.c_contiguous or a.shape != shape:
            raise ValueError(f"{name}: expected a contiguous f32 array of shape {shape}, got "
                             f"{a.dtype} {a.shape}")
    f32 = lambda a: cpu.ffi.cast("float *", cpu.address(a))  # noqa: E731
    cpu.check(cpu.lib.brgemm_cpu_conv_unwrap(f32(x), N, C, H, W, f32(w), K, f32(y), isa,
                                             threads or 0), "conv_unwrap")
    return y
