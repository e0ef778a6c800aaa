"""CPU backend: libxsmm 1.17 through the cffi extension brgemm._brgemm_cpu.

Arrays arrive here already checked by brgemm.kernel; this module only turns
them into addresses, calls C, and turns error codes into exceptions."""
import sys
import time

import numpy as np

from brgemm import dtypes
from brgemm._brgemm_cpu import ffi, lib
from brgemm.arrays import aligned_empty

_run_strd, _OK, _EOVERLAP = lib.brgemm_cpu_run_strd, lib.BRGEMM_OK, lib.BRGEMM_EOVERLAP
EGEOMETRY = lib.BRGEMM_EGEOMETRY
_OBJECT_ADDRESSES = sys.implementation.name == "cpython"  # id() is the object's address
FORMS = {"strd": lib.BRGEMM_STRD, "addr": lib.BRGEMM_ADDR, "offs": lib.BRGEMM_OFFS}
DTYPES = {"f32": lib.BRGEMM_F32, "bf16": lib.BRGEMM_BF16}


def unavailable_reason():
    return None  # the extension imported, so libxsmm is linked in


def check(rc, what):
    if rc == _OK:
        return
    if rc == lib.BRGEMM_ENOMEM:
        raise MemoryError(f"{what}: out of memory for scratch")
    if rc == lib.BRGEMM_EJIT:
        raise RuntimeError(f"{what}: libxsmm could not generate this kernel")
    # EINVAL means the Python checks let something through: a bug, but never a crash
    raise ValueError(f"{what}: the native layer rejected its arguments (code {rc})")


_from_buffer = ffi.from_buffer


def address(x):
    """A pointer to x's first element; from_buffer is much cheaper than .ctypes
    when it applies (C-contiguous arrays: NumPy refuses it the others)."""
    try:
        return _from_buffer(x)
    except ValueError:
        return ffi.cast("void *", x.ctypes.data)


class CpuKernel:
    """One JIT kernel: fixed shape, row strides, form, dtypes, alpha and beta."""

    def __init__(self, *, form, dtype_ab, dtype_c, m, n, k, lda, ldb, ldc, alpha, beta,
                 stride_a=0, stride_b=0, b_vnni=False, a_t=False, c_stream=False):
        desc = ffi.new("brgemm_cpu_desc *", dict(
            dtype_ab=DTYPES[dtype_ab], dtype_c=DTYPES[dtype_c], form=FORMS[form],
            m=m, n=n, k=k, lda=lda, ldb=ldb, ldc=ldc,
            stride_a=stride_a, stride_b=stride_b, alpha=alpha, beta=beta, b_vnni=b_vnni,
            a_t=a_t, c_stream=c_stream))
        out = ffi.new("brgemm_cpu_kernel **")
        check(lib.brgemm_cpu_create(desc, out), f"Kernel({m}, {n}, {k}, dtype={dtype_ab!r})")
        self._k = ffi.gc(out[0], lib.brgemm_cpu_destroy)
        self.path = ffi.string(lib.brgemm_cpu_path(self._k)).decode()
        self.packs_b = bool(lib.brgemm_cpu_packs_b(self._k))
        self.packed_dtype = np.dtype(np.float32 if self.path == "bf16-via-f32" else np.uint16)
        self.packed_elems = lib.brgemm_cpu_packed_b_elems(self._k)

    def strd(self, A, B, C, count, b_packed=False, check_overlap=False):
        """Run the stride form; with check_overlap, return False instead when C's
        byte range meets A's or B's (the caller then decides exactly)."""
        rc = _run_strd(self._k, address(A), address(B), address(C), count, b_packed, check_overlap)
        if rc == _OK:
            return True
        if rc == _EOVERLAP:
            return False
        check(rc, "Kernel.__call__")

    def bind_strd(self, A, B, C, count, b_packed, packed=None):
        """The stride form bound to the geometry of these arrays, which the checks
        accepted (kernels/cpu/bound_call.h): (run, keep), where run(A, B, C), a
        builtin made in C, runs it on any arrays of that geometry (types,
        dtypes, shapes, strides; C writeable), compared in C on every call, with
        the data pointers read then; packed: the PackedB whose data B is, which
        run then takes as B (that same object). run returns 0 when done,
        EGEOMETRY when the arguments differ (check them, bind again), else a
        code for finish_strd. keep holds what C compares by address (the types
        and dtypes) and this kernel: the caller keeps it with run. Holds no
        array. None where nothing could be bound. Converting arrays to pointers
        in Python and comparing their geometry there cost more than a small
        call's C work, so every call on arrays of one geometry skips both."""
        if not _OBJECT_ADDRESSES:
            return None
        made = []  # run comes back in here
        if lib.brgemm_cpu_bind_strd(self._k, id(A), id(B), id(C), count, b_packed,
                                    0 if packed is None else id(packed), id(made)) != _OK:
            return None
        keep = (self, type(A), A.dtype, type(B), B.dtype, type(C), C.dtype)
        return made[0], keep

    def finish_strd(self, rc):
        """A bound call's code other than 0: None for EGEOMETRY (the arrays are
        checked and bound again), False when C's byte range meets A's or B's
        (the caller decides exactly, as after strd), else the error raised."""
        if rc == EGEOMETRY:
            return None
        if rc == _EOVERLAP:
            return False
        check(rc, "Kernel.__call__")
        return True

    def addr(self, As, Bs, C, b_packed=False):
        a = ffi.new("void *[]", [address(x) for x in As])
        b = ffi.new("void *[]", [address(x) for x in Bs])
        check(lib.brgemm_cpu_run_addr(self._k, a, b, address(C), len(As), b_packed), "Kernel.addr")

    def offs(self, A, B, a_offsets, b_offsets, C, b_packed=False):
        rc = lib.brgemm_cpu_run_offs(self._k, address(A), address(B),
                                     ffi.from_buffer("int64_t[]", a_offsets),
                                     ffi.from_buffer("int64_t[]", b_offsets),
                                     address(C), len(a_offsets), b_packed)
        check(rc, "Kernel.offs")

    def time_strd(self, A, B, C, count, reps, b_packed=False, loop="native", gap=0.0, touch=0):
        """Seconds for `reps` stride-form calls (brgemm.Kernel.time_native says
        what each loop measures); the native loop is the no-Python yardstick."""
        if loop == "native":
            seconds = ffi.new("double *")
            check(lib.brgemm_cpu_time_strd(self._k, address(A), address(B), address(C), count,
                                           b_packed, reps, gap, touch, seconds), "time_native")
            return seconds[0]
        ptrs = (self._k, address(A), address(B), address(C), count, b_packed)
        # as __call__ calls: C's byte range compared with A's and B's in C, unless
        # they meet (then __call__ has tested exactly and calls without the check)
        rc = _run_strd(*ptrs, True)
        if rc != _EOVERLAP:
            check(rc, "time_native")
        overlap_check = rc == _OK
        if loop == "binding":
            call, args = self.strd, (A, B, C, count, b_packed, overlap_check)
        else:
            call, args = _run_strd, ptrs + (overlap_check,)
        start = time.perf_counter()
        for _ in range(reps):
            call(*args)
        return time.perf_counter() - start

    def pack_b(self, B, ldb):
        """B [count, k, n] (row stride ldb) -> packed blocks, one per row of the result."""
        # each row written whole by brgemm_cpu_pack_b (k x n, widened or in VNNI pairs)
        out = aligned_empty((B.shape[0], self.packed_elems), self.packed_dtype)
        for i in range(B.shape[0]):
            check(lib.brgemm_cpu_pack_b(self._k, address(B[i]), ldb, address(out[i])),
                  "Kernel.pack_b")
        return out


NativeKernel = CpuKernel  # the name brgemm.kernel asks every backend for


# ---------------------------------------------------------------- plans


def threads_arg(threads):
    """A plan's threads argument: None (OpenMP's default, capped like any
    count; 0 for C) or 1 .. brgemm_cpu_max_threads()."""
    if threads is None:
        return 0
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise ValueError(f"threads: expected a positive int, got {threads!r}")
    cap = lib.brgemm_cpu_max_threads()
    if threads > cap:
        raise ValueError(f"threads: {threads} is more than the {cap} this machine runs "
                         "(4 per core, at least 8)")
    return int(threads)


def plan_threads(threads=None):
    """How many threads a plan run with this threads argument uses."""
    return lib.brgemm_cpu_plan_threads(threads_arg(threads))


class PlanReplay:
    """A brgemm.plan.Plan on the CPU: one libxsmm kernel per block (JIT-compiled
    when this is made, on the plan's first CPU run) and the brgemm_cpu_plan
    struct over byte-offset tables, replayed by kernels/cpu/plan.c."""

    device_array = None  # NumPy arrays only
    takes_threads = True
    adopt = None  # nothing to adopt: Plan.run finds that without a failed look-up

    def __init__(self, plan):
        for ctype, dt in (("brgemm_plan_call", plan.calls.dtype), ("brgemm_plan_op", plan.ops.dtype)):
            if ffi.sizeof(ctype) != dt.itemsize:  # the NumPy records must be the C structs
                raise RuntimeError(f"{ctype}: {ffi.sizeof(ctype)} bytes in C, {dt.itemsize} here")
        self.kernels = [CpuKernel(form="offs", dtype_ab=b.dtype, dtype_c=b.c_dtype, m=b.m, n=b.n,
                                  k=b.k, lda=b.lda, ldb=b.ldb, ldc=b.ldc, alpha=b.alpha,
                                  beta=b.beta, b_vnni=b.b_vnni, a_t=b.a_t, c_stream=b.c_stream)
                        for b in plan.blocks]
        a_bytes, b_bytes = plan.byte_offsets()  # libxsmm's unit
        self.names = list(plan.tensors)
        keep = [ffi.new("brgemm_cpu_kernel *[]", [k._k for k in self.kernels] or [ffi.NULL]),
                a_bytes, b_bytes]

        def buf(ctype, arr):  # a private copy: the sealed plan trusts its tables unchanged
            keep.append(ffi.from_buffer(f"{ctype}[]", arr.copy()) if arr.size else
                        ffi.new(f"{ctype}[]", 1))
            return keep[-1]

        self.native = ffi.new("brgemm_cpu_plan *", dict(
            kernels=keep[0], n_kernels=len(self.kernels), n_tensors=len(self.names),
            calls=buf("brgemm_plan_call", plan.calls), n_calls=len(plan.calls),
            a_offs=buf("uint64_t", a_bytes), b_offs=buf("uint64_t", b_bytes),
            n_offs=len(a_bytes), ops=buf("brgemm_plan_op", plan.ops), n_ops=len(plan.ops),
            task_begin=buf("int64_t", plan.task_begin), n_tasks=len(plan.task_begin) - 1,
            phase_begin=buf("int64_t", plan.phase_begin), n_phases=len(plan.phase_begin) - 1))
        self._keep = keep  # the struct points into these
        # the tables' indices checked once, here, not on every run (kernels/cpu/plan.c)
        check(lib.brgemm_cpu_plan_seal(self.native), "Plan (its call tables)")
        self._checked_run = self._bind_checked(plan)

    def _bind_checked(self, plan):
        """The plan's run with Plan.check's tests in C (kernels/cpu/bound_plan.h),
        or None where nothing could be bound: checking a run's arrays in Python
        cost more than a small plan's C work."""
        if not _OBJECT_ADDRESSES:
            return None
        names = tuple(self.names)
        types = tuple(dtypes.NUMPY[plan.tensors[n]] for n in names)
        extent = np.array([plan.extent[n] for n in names] or [0], np.int64)
        itemsize = np.array([t.itemsize for t in types] or [0], np.int64)
        written = np.array([n in plan.written for n in names] or [0], np.int8)
        made = []  # run comes back in here
        if lib.brgemm_cpu_bind_plan(self.native, id(names), id(types),
                                    ffi.from_buffer("int64_t[]", extent),
                                    ffi.from_buffer("int64_t[]", itemsize),
                                    ffi.from_buffer("int8_t[]", written), id(np.ndarray),
                                    id(made)) != _OK:
            return None
        self._checked_keep = (names, types)  # what C compares by address
        return made[0]

    def run_checked(self, arrays, threads=None):
        """Run on arrays that pass Plan.check's tests, tested in C: True when
        it ran, False (nothing touched) where any test failed or C is stricter
        than Plan.check (an ndarray subclass, an equal dtype of another
        object): Plan.check then says what is wrong or accepts, and run runs."""
        if self._checked_run is None:
            return False
        rc = self._checked_run(arrays, 0 if threads is None else threads_arg(threads))
        if rc == _OK:
            return True
        if rc == EGEOMETRY:
            return False
        check(rc, "Plan.run")
        return True

    def _bind(self, arrays):
        return ffi.new("void *[]", [address(arrays[n]) for n in self.names] or [ffi.NULL])

    def run(self, arrays, threads=None):
        """arrays: name -> NumPy array, checked by Plan.check."""
        check(lib.brgemm_cpu_plan_run(self.native, self._bind(arrays), threads_arg(threads)),
              "Plan.run")

    def time_bare(self, arrays, reps):
        seconds = ffi.new("double *")
        check(lib.brgemm_cpu_plan_time_bare(self.native, self._bind(arrays), reps, seconds),
              "Plan.time_bare")
        return seconds[0]


def to_device(x):
    return x  # the CPU's tensors are NumPy arrays


def arch():
    return ffi.string(lib.brgemm_cpu_arch()).decode()


def amx():
    """(implementation, reason): "hardware" or "model" and "" when bf16 kernels
    run on AMX tiles, else "" and why not (decided once per process)."""
    return (ffi.string(lib.brgemm_cpu_amx_impl()).decode(),
            ffi.string(lib.brgemm_cpu_amx_reason()).decode())


def takes_vnni_b(k):
    """Whether bf16 kernels of depth k take B as VNNI pairs in place here (on
    AMX: k in whole tile chunks; elsewhere any even k)."""
    return bool(lib.brgemm_cpu_reads_vnni_b(k))


def amx_model_faults():
    """Tile instructions the software model saw that the hardware would fault on."""
    return lib.brgemm_cpu_amx_model_faults()


def fma_peak(seconds=0.3):
    """Measured single-core f32 FMA peak, GFLOP/s, and the vector unit it used."""
    return lib.brgemm_cpu_fma_peak(seconds), ffi.string(lib.brgemm_cpu_fma_isa()).decode()


def bf16_peak(seconds=0.3):
    """Measured single-core AVX512-BF16 dot-product peak, GFLOP/s; 0.0 without one."""
    return lib.brgemm_cpu_bf16_peak(seconds)


def amx_peak(seconds=0.3):
    """Measured single-core AMX tdpbf16ps peak, GFLOP/s; 0.0 without AMX tiles."""
    return lib.brgemm_cpu_amx_peak(seconds)


def amx_probe(pattern, seconds=0.3):
    """The AMX kernel's 2x2 inner step alone, GFLOP/s (pattern 0: from registers,
    1: with its tile loads from L1; 2-7: with turns, brgemm_cpu.h); 0.0 without AMX tiles."""
    return lib.brgemm_cpu_amx_probe(pattern, seconds)


def amx_config_ns(release, seconds=0.3):
    """Nanoseconds per AMX tile config load (with a tile release after each when
    release); 0.0 without AMX tiles."""
    return lib.brgemm_cpu_amx_config_ns(release, seconds)
