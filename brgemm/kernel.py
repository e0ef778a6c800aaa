"""brgemm.Kernel: the one kernel, C = beta * C + alpha * sum_i A_i @ B_i.

    A_i [m, k], B_i [k, n], C [m, n], row-major; f32 or bf16 operands, f32 accumulation.

Three ways to name the blocks (DESIGN.md section 3):
    k(A, B, C)                           stride form: A [count, m, k], B [count, k, n]
    k.addr(As, Bs, C)                    address form: sequences of 2-D blocks
    k.offs(A, B, a_offsets, b_offsets, C) offset form: element offsets into flat A, B

Everything the native layer needs is checked here first; a bad argument is a
ValueError or TypeError that names it. Blocks may be views with row strides
(leading dimensions); their last axis must be contiguous. One native kernel is
JIT-compiled per (form, strides, dtype of C) and cached on this object
(the most recently used few; brgemm/lru.py).
"""
import operator

import numpy as np

from brgemm import dtypes
from brgemm.backend import get as get_backend
from brgemm.backend import resolve as resolve_backend
from brgemm.lru import LRU
from brgemm.packed import PackedB

_LIMIT = 1 << 30  # dimensions and row strides the native layer accepts
# libxsmm 1.17 addresses a block's rows and a batch stride with 32-bit byte
# offsets: from rows x row stride = 2**31 bytes on, a block is read at wrapped
# addresses (wrong results or a crash), so the checks below stop it first
SPAN = (1 << 31) - 1
_F32_MAX = float(np.finfo(np.float32).max)
KERNELS_PER_OBJECT = 32  # JIT kernels one Kernel keeps (distinct strides and forms)
GEOMETRIES_PER_OBJECT = 64  # array geometries the stride form remembers as checked


def _dim(value, name):
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}") from None
    if isinstance(value, bool) or not 1 <= v <= _LIMIT:
        raise ValueError(f"{name}: expected an int in [1, 2**30], got {value!r}")
    return v


def _scalar(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name}: expected a real number, got {type(value).__name__}")
    v = float(value)
    if not np.isfinite(v):
        raise ValueError(f"{name}: expected a finite number, got {value!r}")
    if abs(v) > _F32_MAX:  # the kernel scales in float32: this would be inf there
        raise ValueError(f"{name}: {value!r} overflows float32 (largest {_F32_MAX:.7g})")
    return v


def _array(x, name, allowed, ndim):
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name}: expected a numpy.ndarray, got {type(x).__name__}")
    if x.dtype not in allowed:
        want = " or ".join(f"{dtypes.NAMES[d]} ({d})" for d in allowed)
        raise TypeError(f"{name}: expected dtype {want}, got {x.dtype}")
    if x.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {x.shape}")


def _row_stride(x, name, axis=0):
    """Row stride in elements of the 2-D block made by axes (axis, axis+1) of x."""
    rows, cols = x.shape[axis], x.shape[axis + 1]
    item = x.itemsize
    if x.size == 0:  # no blocks: NumPy's strides of empty arrays mean nothing
        return cols
    if cols > 1 and x.strides[axis + 1] != item:
        raise ValueError(f"{name}: the last axis must be contiguous (stride {x.strides[axis + 1]} "
                         f"bytes, expected {item}); pass np.ascontiguousarray({name})")
    if rows <= 1:
        _span(1, cols, cols, item, name)
        return cols
    s = x.strides[axis]
    if s % item or s < cols * item or s // item > _LIMIT:
        raise ValueError(f"{name}: row stride {s} bytes is not a multiple of {item} in "
                         f"[{cols * item}, 2**30 elements]; rows must not overlap or run backwards")
    _span(rows, s // item, cols, item, name)
    return s // item


def _span(rows, ld, cols, item, name):
    """rows x row stride of a block must stay within SPAN bytes (measured: past
    it libxsmm's B operand crashes even when the last row ends before it)."""
    nbytes = rows * ld * item
    if nbytes > SPAN:
        raise ValueError(f"{name}: a block of {rows} rows {ld * item} bytes apart spans "
                         f"{nbytes} bytes; the kernel addresses at most 2**31 - 1 bytes per "
                         "block (libxsmm's 32-bit offsets): copy it to a contiguous array")


def _batch_stride(x, name):
    if x.shape[0] <= 1:
        return 0
    s = x.strides[0]
    if s < 0 or s % x.itemsize:
        raise ValueError(f"{name}: batch stride {s} bytes must be a non-negative multiple of "
                         f"{x.itemsize}")
    return s // x.itemsize


def _no_overlap(C, other, name):
    if np.may_share_memory(C, other) and np.shares_memory(C, other, max_work=10**5):
        raise ValueError(f"C: overlaps {name}; the kernel writes C while it reads {name}")


def _offsets(x, name, count=None):
    off = np.asarray(x)
    if off.size == 0 and off.ndim == 1:  # [] is float64 to NumPy; no blocks is fine
        off = off.astype(np.int64)
    if off.dtype == bool or not np.issubdtype(off.dtype, np.integer):
        raise TypeError(f"{name}: expected integer offsets, got dtype {off.dtype}")
    if off.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D sequence, got shape {off.shape}")
    if count is not None and len(off) != count:
        raise ValueError(f"{name}: has {len(off)} offsets, a_offsets has {count}")
    if off.dtype.kind == "u" and off.size and off.max() > np.iinfo(np.int64).max:
        raise ValueError(f"{name}: offset {off.max()} is past any buffer")  # int64 would wrap it
    return np.ascontiguousarray(off, dtype=np.int64)


def _in_bounds(off, extent, size, name):
    """Every block [o, o + extent) lies inside a flat buffer of `size` elements."""
    if len(off) == 0:
        return
    if off.min() < 0:
        raise ValueError(f"{name}: offset {off.min()} is negative")
    if off.max() > size - extent:
        i = int(np.argmax(off))
        raise ValueError(f"{name}: block {i} at offset {off[i]} needs {extent} elements, "
                         f"the buffer has {size}")


class Kernel:
    """C = beta * C + alpha * sum_i A_i @ B_i for blocks A_i [m, k], B_i [k, n].

    dtype "f32": float32 A, B, C. dtype "bf16": ml_dtypes.bfloat16 A and B,
    C float32 or bfloat16, f32 accumulation. Any finite alpha and beta: 1 and
    0/1 run straight in libxsmm, others through a scratch tile. lda and ldb are
    the row strides (elements) of blocks in the offset form's flat buffers.
    """

    def __init__(self, m, n, k, dtype="f32", beta=1.0, alpha=1.0, backend=None, *,
                 lda=None, ldb=None):
        self.m, self.n, self.k = _dim(m, "m"), _dim(n, "n"), _dim(k, "k")
        self.dtype = dtypes.check_name(dtype)
        self.beta, self.alpha = _scalar(beta, "beta"), _scalar(alpha, "alpha")
        self.backend = resolve_backend(backend)
        self.lda = self.k if lda is None else _dim(lda, "lda")
        self.ldb = self.n if ldb is None else _dim(ldb, "ldb")
        if self.lda < self.k:
            raise ValueError(f"lda: {self.lda} is less than k = {self.k}")
        if self.ldb < self.n:
            raise ValueError(f"ldb: {self.ldb} is less than n = {self.n}")
        self._ab = (dtypes.NUMPY[self.dtype],)
        self._c = (dtypes.float32,) if self.dtype == "f32" else (dtypes.float32, dtypes.bfloat16)
        self._impl = get_backend(self.backend)
        # the ranges of the offset form's blocks, checked once here
        item = self._ab[0].itemsize
        _span(self.m, self.lda, self.k, item, "k" if lda is None else "lda")
        _span(self.k, self.ldb, self.n, item, "n" if ldb is None else "ldb")
        self._native = LRU(KERNELS_PER_OBJECT)  # (form, strides, dtype of C) -> JIT kernel
        # array geometry -> JIT kernel, for checked stride-form calls
        self._strd_seen = LRU(GEOMETRIES_PER_OBJECT)
        # the stride form's call bound to the last checked arrays' geometry (the
        # backend's run, which knows the last PackedB by identity), the native
        # kernel and what the binding needs kept
        self._strd_last = (_unbound, None, None)

    def __repr__(self):
        return (f"Kernel(m={self.m}, n={self.n}, k={self.k}, dtype={self.dtype!r}, "
                f"beta={self.beta}, alpha={self.alpha}, backend={self.backend!r})")

    def _kernel(self, form, dtype_c, lda, ldb, ldc, stride_a=0, stride_b=0):
        key = (form, dtype_c, lda, ldb, ldc, stride_a, stride_b)
        return self._native.get_or_make(key, lambda: self._impl.NativeKernel(
            form=form, dtype_ab=self.dtype, dtype_c=dtype_c, m=self.m, n=self.n, k=self.k,
            lda=lda, ldb=ldb, ldc=ldc, alpha=self.alpha, beta=self.beta,
            stride_a=stride_a, stride_b=stride_b))

    def _check_c(self, C, *reads):
        _array(C, "C", self._c, 2)
        if C.shape != (self.m, self.n):
            raise ValueError(f"C: expected shape ({self.m}, {self.n}), got {C.shape}")
        if not C.flags.writeable:
            raise ValueError("C: is read-only; the kernel writes C in place")
        for x, name in reads:
            _no_overlap(C, x, name)
        return dtypes.NAMES[C.dtype], _row_stride(C, "C")

    def _check_block(self, x, name, shape, ndim=2):
        _array(x, name, self._ab, ndim)
        if x.shape[-2:] != shape:
            raise ValueError(f"{name}: expected blocks of shape {shape}, got shape {x.shape}")
        return _row_stride(x, name, axis=ndim - 2)

    # -- stride form --
    def __call__(self, A, B, C):
        """Stride form: A [count, m, k], B [count, k, n] (or a PackedB), C [m, n]."""
        # the call bound to the last checked arrays' geometry, which the backend
        # compares with these arrays' on every call (a PackedB is fixed, so the
        # last one is known by identity; its data's geometry is compared)
        run, kern, _ = self._strd_last
        rc = run(A, B, C)
        if rc == 0:
            return C
        return self._strd_other(A, B, C, rc, kern)

    def _strd_other(self, A, B, C, rc, kern):
        """__call__ where the bound call did not run to the end: arrays of another
        geometry (or nothing bound) are checked and bound; the bound call's own
        codes are a range overlap (decided exactly) or an error (raised)."""
        if rc is None or kern.finish_strd(rc) is None:
            return self._strd_new(A, B, C)
        packed = isinstance(B, PackedB)
        return _strd_exact(kern, A, B.data if packed else B, C, packed)

    def _strd_new(self, A, B, C):
        """The checks for arrays of a geometry the bound call does not have: the
        kernel of a geometry seen before, else every check; then the call bound."""
        if not _stride_arrays(A, B, C):
            self._check_strd(A, B, C)  # raises, naming the argument that is not an array
            raise AssertionError("unreachable: _check_strd accepted a non-array")
        packed = isinstance(B, PackedB)
        data = B.data if packed else B
        geo = (A.shape, A.strides, A.dtype, data.shape, data.strides, data.dtype,
               C.shape, C.strides, C.dtype) + ((B.count, B.k, B.n, B.path) if packed else ())
        kern = self._strd_seen.get(geo)
        if kern is None:
            kern = self._check_strd(A, B, C)
            if kern is _BY_ADDRESS:
                if packed:
                    return self.addr(list(A), [data[i] for i in range(B.count)], C, packed=B)
                return self.addr(list(A), list(B), C)
            self._strd_seen.put(geo, kern)
        if not C.flags.writeable:  # the one check the geometry does not decide
            raise ValueError("C: is read-only; the kernel writes C in place")
        bind = getattr(kern, "bind_strd", None)
        bound = None if bind is None else bind(A, data, C, A.shape[0], packed,
                                               B if packed else None)
        if bound is not None:  # no array is kept alive: only a weak reference to a PackedB
            run, keep = bound
            self._strd_last = (run, kern, keep)
        return _strd_run(kern, A, data, C, packed)

    def _check_strd(self, A, B, C):
        """Every check of the stride form; returns the native kernel to run."""
        lda = self._check_block(A, "A", (self.m, self.k), 3)
        count = A.shape[0]
        if isinstance(B, PackedB):
            self._check_packed(B, count)
            ldb, sb, data = self.n, B.data.shape[1], B.data
        else:
            ldb = self._check_block(B, "B", (self.k, self.n), 3)
            if B.shape[0] != count:
                raise ValueError(f"B: has {B.shape[0]} blocks, A has {count}")
            sb, data = _batch_stride(B, "B"), B
        sa = _batch_stride(A, "A")
        dtype_c, ldc = self._check_c(C, (A, "A"), (data, "B"))
        if max(sa * A.itemsize, sb * data.itemsize) > SPAN:
            return _BY_ADDRESS  # libxsmm's batch stride is 32-bit: name each block instead
        if isinstance(B, PackedB):
            sb = 0  # the native layer steps over packed blocks itself
        kern = self._kernel("strd", dtype_c, lda, ldb, ldc, sa, sb)
        if isinstance(B, PackedB) and kern.path != B.path:
            raise ValueError(f"B: packed for the {B.path!r} path, but A's row stride {lda} "
                             f"selects {kern.path!r}; pass B unpacked")
        return kern

    # -- timing (benchmarks) --
    def time_native(self, A, B, C, reps, loop="native", gap=0.0, touch=0):
        """Seconds for `reps` stride-form calls self(A, B, C) on the CPU, with the
        Python call path left out: the yardstick benchmarks hold the API against.
        The arguments are checked once, as __call__ checks them, and the same
        native kernel runs; C accumulates every call. loop says where the calls
        come from: "native", from C; "pointers", a Python loop on pointers taken
        once (the foreign call alone); "binding", a Python loop through the
        backend's binding (pointers taken from the arrays per call). The Python
        loops make one more call first, untimed. The native loop imitates a
        caller between two calls when asked: it writes `touch` bytes of other
        memory, then waits until `gap` seconds have passed, and counts the
        calls' time alone."""
        if self.backend != "cpu":
            raise ValueError(f"backend: time_native times the CPU's native kernel; this "
                             f"Kernel runs on {self.backend!r}")
        if isinstance(reps, bool) or not isinstance(reps, (int, np.integer)) or reps < 1:
            raise ValueError(f"reps: expected a positive int, got {reps!r}")
        if loop not in ("native", "pointers", "binding"):
            raise ValueError(f"loop: expected 'native', 'pointers' or 'binding', got {loop!r}")
        if (gap or touch) and loop != "native":
            raise ValueError(f"loop: gap and touch apply to the native loop, not {loop!r}")
        gap = _scalar(gap, "gap")
        if gap < 0 or gap > 1:
            raise ValueError(f"gap: expected seconds in [0, 1], got {gap!r}")
        if isinstance(touch, bool) or not isinstance(touch, (int, np.integer)) \
                or not 0 <= touch <= _LIMIT:
            raise ValueError(f"touch: expected bytes in [0, 2**30], got {touch!r}")
        for x, name in ((A, "A"), (C, "C")):
            if not isinstance(x, np.ndarray):
                raise TypeError(f"{name}: expected a numpy.ndarray, got {type(x).__name__}")
        if not isinstance(B, (np.ndarray, PackedB)):
            raise TypeError(f"B: expected a numpy.ndarray or a PackedB, got {type(B).__name__}")
        kern = self._check_strd(A, B, C)
        if kern is _BY_ADDRESS:
            raise ValueError("A: batch strides past 2**31 bytes run through the address form, "
                             "which time_native does not time; use contiguous blocks")
        packed = isinstance(B, PackedB)
        return kern.time_strd(A, B.data if packed else B, C, A.shape[0], int(reps), packed, loop,
                              gap, int(touch))

    # -- address form --
    def addr(self, As, Bs, C, packed=None):
        """Address form: As, Bs sequences of 2-D blocks [m, k] and [k, n]."""
        if packed is not None:  # the stride form's fallback: Bs are rows of packed.data
            dtype_c, ldc = self._check_c(C, *((a, f"A[{i}]") for i, a in enumerate(As)),
                                         (packed.data, "B"))
            lda = self._common_stride(As, "A", (self.m, self.k), self.k)
            self._kernel("addr", dtype_c, lda, self.n, ldc).addr(As, Bs, C, b_packed=True)
            return C
        for seq, name in ((As, "As"), (Bs, "Bs")):
            if isinstance(seq, np.ndarray) or not hasattr(seq, "__len__"):
                raise TypeError(f"{name}: expected a list or tuple of 2-D arrays, "
                                f"got {type(seq).__name__}")
        if len(As) != len(Bs):
            raise ValueError(f"Bs: has {len(Bs)} blocks, As has {len(As)}")
        lda = self._common_stride(As, "As", (self.m, self.k), self.k)
        ldb = self._common_stride(Bs, "Bs", (self.k, self.n), self.n)
        dtype_c, ldc = self._check_c(C)
        for i, (a, b) in enumerate(zip(As, Bs)):
            _no_overlap(C, a, f"As[{i}]")
            _no_overlap(C, b, f"Bs[{i}]")
        self._kernel("addr", dtype_c, lda, ldb, ldc).addr(As, Bs, C)
        return C

    def _common_stride(self, blocks, name, shape, default):
        """One JIT kernel serves all blocks, so they must share a row stride."""
        ld = None
        for i, x in enumerate(blocks):
            s = self._check_block(x, f"{name}[{i}]", shape)
            if shape[0] > 1 and ld is not None and s != ld:
                raise ValueError(f"{name}[{i}]: row stride {s} differs from {name}[0]'s {ld}")
            ld = s if shape[0] > 1 else default
        return default if ld is None else ld

    # -- offset form --
    def offs(self, A, B, a_offsets, b_offsets, C):
        """Offset form: A, B C-contiguous buffers (any shape, read flat); block i
        starts at element a_offsets[i] of A (rows lda apart) and b_offsets[i] of B."""
        for x, name in ((A, "A"), (B, "B")):
            if not isinstance(x, np.ndarray):
                raise TypeError(f"{name}: expected a numpy.ndarray, got {type(x).__name__}")
            _array(x, name, self._ab, x.ndim)
            if not x.flags.c_contiguous:
                raise ValueError(f"{name}: the offset form reads a flat buffer; "
                                 f"pass np.ascontiguousarray({name})")
        ao = _offsets(a_offsets, "a_offsets")
        bo = _offsets(b_offsets, "b_offsets", len(ao))
        _in_bounds(ao, (self.m - 1) * self.lda + self.k, A.size, "a_offsets")
        _in_bounds(bo, (self.k - 1) * self.ldb + self.n, B.size, "b_offsets")
        dtype_c, ldc = self._check_c(C, (A, "A"), (B, "B"))
        self._kernel("offs", dtype_c, self.lda, self.ldb, ldc).offs(A, B, ao, bo, C)
        return C

    # -- packing --
    def pack_b(self, B):
        """B [count, k, n] in the layout this kernel's stride form wants.

        bf16 kernels repack B on every call otherwise (VNNI pairs, or f32 where
        the CPU has no bf16 dot products); f32 kernels read B as it is."""
        ldb = self._check_block(B, "B", (self.k, self.n), 3)
        kern = self._kernel("strd", "f32", self.k, self.n, self.n)
        if not kern.packs_b:
            return B
        return PackedB(kern.pack_b(B, ldb), B.shape[0], self.k, self.n, kern.path)

    def _check_packed(self, B, count):
        B.check(self._kernel("strd", "f32", self.k, self.n, self.n), count, self.k, self.n)

    @property
    def path(self):
        """How this kernel runs here: "f32", "bf16-amx", "bf16-vnni" or "bf16-via-f32"
        (brgemm.info() says why bf16 is not on AMX)."""
        return self._kernel("strd", "f32", self.k, self.n, self.n).path


def _unbound(A, B, C):  # the bound call's stand-in before any (or where none binds)
    return None


_BY_ADDRESS = object()  # _check_strd's answer when the strides need the address form


def _stride_arrays(A, B, C):
    """Whether the stride form's arguments are of the types it takes (else
    _check_strd says which is not)."""
    return isinstance(A, np.ndarray) and isinstance(C, np.ndarray) and (
        isinstance(B, np.ndarray) or isinstance(B, PackedB) and isinstance(B.data, np.ndarray))


def _strd_run(kern, A, data, C, packed):
    """The checked stride form. C compares byte ranges for free; only when they
    meet is the exact (slower) element test needed, e.g. for interleaved views
    of one buffer."""
    if kern.strd(A, data, C, A.shape[0], packed, True):
        return C
    return _strd_exact(kern, A, data, C, packed)


def _strd_exact(kern, A, data, C, packed):
    _no_overlap(C, A, "A")
    _no_overlap(C, data, "B")
    kern.strd(A, data, C, A.shape[0], packed)
    return C
_one_shot = LRU(64)


def brgemm(A, B, C, beta=1.0, alpha=1.0, backend=None):
    """One-shot stride form: C = beta * C + alpha * sum_i A[i] @ B[i]; dtype from A."""
    if not isinstance(A, np.ndarray) or A.ndim != 3:
        raise TypeError("A: expected a 3-D numpy.ndarray [count, m, k]")
    if not isinstance(B, np.ndarray) or B.ndim != 3:
        raise TypeError("B: expected a 3-D numpy.ndarray [count, k, n]")
    dtype = dtypes.NAMES.get(A.dtype)
    if dtype is None:
        raise TypeError(f"A: expected dtype float32 or bfloat16, got {A.dtype}")
    for size, name in ((A.shape[1], "A"), (A.shape[2], "A"), (B.shape[2], "B")):
        if not 1 <= size <= _LIMIT:
            raise ValueError(f"{name}: block sizes must be in [1, 2**30], got shape "
                             f"{A.shape if name == 'A' else B.shape}")
    key = (A.shape[1], B.shape[2], A.shape[2], dtype, _scalar(beta, "beta"),
           _scalar(alpha, "alpha"), resolve_backend(backend))
    kern = _one_shot.get_or_make(key, lambda: Kernel(*key[:3], dtype=dtype, beta=key[4],
                                                     alpha=key[5], backend=key[6]))
    return kern(A, B, C)
