"""SYCL backend: the kernel and plan replay on a SYCL device through dpctl.

The device code is one OpenCL C kernel (kernels/sycl/brgemm_plan.cl) that
runs one phase of a plan, a work-group per task; dpctl compiles it at run time
for whatever device the queue holds. A single kernel call is a one-call plan.
Host work goes through dpctl's C library (brgemm.backend._dpctl_capi): USM
allocations, copies and one ND-range submission per phase.

Device choice: BRGEMM_SYCL_DEVICE (a dpctl filter string such as
"opencl:cpu" or "level_zero:gpu"), else dpctl's default device. The PyPI
CPU OpenCL runtime (intel-opencl-rt) installs an ICD file that names a path
that does not exist, so before dpctl loads we point the OpenCL loader at the
library the wheel did install (DESIGN.md section 4).

Tested on the SYCL CPU device only: no Intel GPU is available here. The
kernel has no DPAS (sub-group matrix) path; its sub-group tiles are the
portable path, which an Intel GPU would run as well.
"""
import os
import pathlib

import numpy as np

from brgemm.backend.opencl_icd import point_icd_loader

_ICD = point_icd_loader()

import dpctl  # noqa: E402  (after the loader fix: the OpenCL loader reads it once)
import dpctl.program  # noqa: E402

from brgemm.backend import _dpctl_capi  # noqa: E402
from brgemm.backend._device_replay import DeviceReplay, once  # noqa: E402
from brgemm.constants import (CALL_FIELDS, DEVICE_OPS, DTYPE_CODE, HEADER,  # noqa: E402
                              KDESC_FIELDS, OP_FIELDS, device_source)

ffi, capi = _dpctl_capi.load(dpctl)

SOURCE = pathlib.Path(__file__).resolve().parents[2] / "kernels" / "sycl" / "brgemm_plan.cl"
WORK_GROUP = 64          # four sub-groups of 16 lanes (SG in the kernel source)

submissions = 0          # ND-range submissions made so far (tests count them)


class _Device:
    """The queue, its compiled program and the kernel handle, made once."""

    def __init__(self):
        spec = os.environ.get("BRGEMM_SYCL_DEVICE")
        self.queue = (dpctl.SyclQueue(spec, property="in_order") if spec
                      else dpctl.SyclQueue(property="in_order"))
        self.qref = ffi.cast("DPCTLSyclQueueRef", self.queue.addressof_ref())
        self.program = dpctl.program.create_program_from_source(
            self.queue, device_source(SOURCE.read_text()))
        self.kernel = self.program.get_sycl_kernel("brgemm_plan_phase")
        self.kref = ffi.cast("DPCTLSyclKernelRef", self.kernel.addressof_ref())
        self.name = self.queue.sycl_device.name


device = once(_Device)  # the queue, its device and the compiled kernel


def unavailable_reason():
    for path in (SOURCE, HEADER):
        if not path.exists():
            return f"kernel source {path} is missing"
    try:
        device()
    except Exception as e:  # no device, no OpenCL runtime, or the kernel did not compile
        hint = "" if _ICD else " (the CPU runtime: pip install 'brgemm[sycl]')"
        return f"no usable SYCL device: {type(e).__name__}: {e}{hint}"
    return None


def device_name():
    return device().name


# ---------------------------------------------------------------- USM memory


class _Usm:
    """nbytes of device USM, freed with the queue that made it."""

    def __init__(self, nbytes):
        dev = device()
        self.nbytes = int(nbytes)
        ptr = capi.DPCTLmalloc_device(max(self.nbytes, 1), dev.qref)
        if ptr == ffi.NULL:
            raise MemoryError(f"SYCL device: could not allocate {self.nbytes} bytes of USM")
        qref, queue = dev.qref, dev.queue  # the queue must outlive its allocations
        self.ptr = ffi.gc(ptr, lambda p: (capi.DPCTLfree_with_queue(p, qref), queue))
        self.address = int(ffi.cast("uintptr_t", self.ptr))

    def upload(self, host_address, nbytes):
        _copy(self.ptr, ffi.cast("void *", host_address), nbytes)

    def download(self, host_address, nbytes):
        _copy(ffi.cast("void *", host_address), self.ptr, nbytes)


def _copy(dst, src, nbytes):
    if nbytes:
        ev = capi.DPCTLQueue_Memcpy(device().qref, dst, src, nbytes)
        if ev == ffi.NULL:
            raise RuntimeError("SYCL device: memcpy failed to submit")
        capi.DPCTLEvent_Wait(ev)
        capi.DPCTLEvent_Delete(ev)


def _upload_array(x):
    buf = _Usm(x.nbytes)
    buf.upload(x.ctypes.data, x.nbytes)
    return buf


class DeviceArray:
    """An array resident in the SYCL device's USM: pass it to Plan.run in
    place of a NumPy array and nothing is copied (the steady state)."""

    def __init__(self, shape, dtype):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.nbytes = self.size * self.dtype.itemsize
        self._usm = _Usm(self.nbytes)

    @classmethod
    def from_numpy(cls, x):
        x = np.ascontiguousarray(x)
        out = cls(x.shape, x.dtype)
        out._usm.upload(x.ctypes.data, x.nbytes)
        return out

    def numpy(self):
        out = np.empty(self.shape, self.dtype)
        self._usm.download(out.ctypes.data, self.nbytes)
        return out

    @property
    def address(self):
        return self._usm.address

    def __repr__(self):
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype}, device={device_name()!r})"


def to_device(x):
    return DeviceArray.from_numpy(x)


# ---------------------------------------------------------------- phases


def _int64_table(rows, width):
    table = np.asarray(rows, np.int64).reshape(-1, width) if len(rows) else np.zeros((1, width),
                                                                                       np.int64)
    return _upload_array(np.ascontiguousarray(table))


class _Tables:
    """A plan's tables on the device, and the replay of its phases."""

    def __init__(self, kdesc, kscal, calls, a_offs, b_offs, ops, task_begin, phase_begin):
        self.kdesc = _int64_table(kdesc, KDESC_FIELDS)
        self.kscal = _upload_array(np.asarray(kscal or [0.0, 0.0], np.float32))  # alpha, beta
        self.calls = _int64_table(calls, CALL_FIELDS)
        self.a_offs = _int64_table(a_offs, 1)
        self.b_offs = _int64_table(b_offs, 1)
        self.ops = _int64_table(ops, OP_FIELDS)
        self.task_begin = _int64_table(task_begin, 1)
        self.phase_begin = [int(p) for p in phase_begin]
        self.tensors = None

    def run(self, addresses):
        """Replay every phase on tensors at these device addresses, in order."""
        global submissions
        table = np.asarray(addresses, np.uint64)
        if self.tensors is None or self.tensors.nbytes < table.nbytes:
            self.tensors = _Usm(max(table.nbytes, 8))
        self.tensors.upload(table.ctypes.data, table.nbytes)
        dev = device()
        task0 = ffi.new("int64_t *")
        args = ffi.new("void *[]", [ffi.cast("void *", b.address) for b in (
            self.tensors, self.kdesc, self.kscal, self.calls, self.a_offs, self.b_offs, self.ops,
            self.task_begin)] + [task0])
        types = ffi.new("DPCTLKernelArgType[]", [capi.DPCTL_VOID_PTR] * 8 + [capi.DPCTL_INT64_T])
        local = ffi.new("size_t[3]", [WORK_GROUP, 1, 1])
        for p in range(len(self.phase_begin) - 1):
            n_tasks = self.phase_begin[p + 1] - self.phase_begin[p]
            if n_tasks == 0:
                continue
            task0[0] = self.phase_begin[p]
            ev = capi.DPCTLQueue_SubmitNDRange(dev.kref, dev.qref, args, types, 9,
                                               ffi.new("size_t[3]", [n_tasks * WORK_GROUP, 1, 1]),
                                               local, 1, ffi.NULL, 0)
            if ev == ffi.NULL:
                raise RuntimeError(f"SYCL device: phase {p} failed to submit")
            submissions += 1
            capi.DPCTLEvent_Delete(ev)  # the queue is in order: the next phase waits for it
        capi.DPCTLQueue_Wait(dev.qref)


def _kdesc(m, n, k, lda, ldb, ldc, dtype_ab, dtype_c):
    return [m, n, k, lda, ldb, ldc, DTYPE_CODE[dtype_ab], DTYPE_CODE[dtype_c]]


# ---------------------------------------------------------------- the kernel contract


def _span(x):
    """(first byte address, bytes to the end of the last element) of a view
    with non-negative strides, as brgemm.kernel has checked."""
    if x.size == 0:
        return x.ctypes.data, 0
    return x.ctypes.data, int(sum((s - 1) * st for s, st in zip(x.shape, x.strides))) + x.itemsize


def _ranges_meet(x, y):
    (xa, xn), (ya, yn) = _span(x), _span(y)
    return xn and yn and xa < ya + yn and ya < xa + xn


class NativeKernel:
    """One kernel shape on the device; every call copies its operands to USM,
    runs a one-call plan and copies C back (plans are the fast path)."""

    def __init__(self, *, form, dtype_ab, dtype_c, m, n, k, lda, ldb, ldc, alpha, beta,
                 stride_a=0, stride_b=0):
        self.dtype_ab, self.dtype_c = dtype_ab, dtype_c
        self.m, self.n, self.k, self.lda, self.ldb, self.ldc = m, n, k, lda, ldb, ldc
        self.alpha, self.beta = alpha, beta
        self.stride_a, self.stride_b = stride_a, stride_b
        self.path = "f32" if dtype_ab == "f32" else "bf16-sycl"
        self.packs_b = False  # the device reads bf16 B as it is
        self.packed_dtype = np.dtype(np.float32)
        self.packed_elems = k * n

    def _tables(self, count, a_offs, b_offs, lda, ldb):
        return _Tables([_kdesc(self.m, self.n, self.k, lda, ldb, self.ldc, self.dtype_ab,
                               self.dtype_c)], [self.alpha, self.beta],
                       [0, 0, 1, 2, 0, count, 0, 0, 0], a_offs, b_offs, [], [0, 1], [0, 1])

    def _run(self, A, B, C, a_offs, b_offs, lda, ldb):
        (a_at, a_n), (b_at, b_n), (c_at, c_n) = _span(A), _span(B), _span(C)
        bufs = []
        for at, nbytes in ((a_at, a_n), (b_at, b_n), (c_at, c_n)):
            buf = _Usm(nbytes)
            buf.upload(at, nbytes)
            bufs.append(buf)
        self._tables(len(a_offs), a_offs, b_offs, lda, ldb).run([b.address for b in bufs])
        bufs[2].download(c_at, c_n)

    def strd(self, A, B, C, count, b_packed=False, check_overlap=False):
        if check_overlap and (_ranges_meet(C, A) or _ranges_meet(C, B)):
            return False  # kernel.py decides exactly, then calls again without the check
        self._run(A, B, C, np.arange(count) * self.stride_a, np.arange(count) * self.stride_b,
                  self.lda, self.ldb)
        return True

    def addr(self, As, Bs, C, b_packed=False):
        # blocks may lie anywhere in host memory: stage them in one buffer each
        dt = As[0].dtype if len(As) else np.float32
        A = np.stack([np.ascontiguousarray(a) for a in As]) if len(As) else np.zeros(1, dt)
        B = np.stack([np.ascontiguousarray(b) for b in Bs]) if len(Bs) else np.zeros(1, dt)
        count = len(As)
        self._run(A, B, C, np.arange(count) * self.m * self.k, np.arange(count) * self.k * self.n,
                  self.k, self.n)

    def offs(self, A, B, a_offsets, b_offsets, C, b_packed=False):
        self._run(A, B, C, a_offsets, b_offsets, self.lda, self.ldb)

    def pack_b(self, B, ldb):
        raise AssertionError("unreachable: packs_b is False on this backend")


# ---------------------------------------------------------------- plans


class PlanReplay(DeviceReplay):
    """A recorded brgemm.plan.Plan on the device: its tables uploaded once,
    one submission per phase on every run."""

    device_array = DeviceArray  # Plan.run accepts these in place of NumPy arrays

    def __init__(self, plan):
        plan.require("sycl", max_op=DEVICE_OPS, b_vnni=False)
        super().__init__(plan)
        blocks = plan.blocks
        kdesc = [_kdesc(b.m, b.n, b.k, b.lda, b.ldb, b.ldc, b.dtype, b.c_dtype) for b in blocks]
        kscal = [v for b in blocks for v in (b.alpha, b.beta)]
        calls = plan.calls
        call_rows = np.stack([calls[f].astype(np.int64) for f in (
            "kernel", "a", "b", "c", "c_off", "count", "offs", "op_begin", "op_count")], axis=1) \
            if len(calls) else []
        ops = plan.ops
        op_rows = np.concatenate([ops["code"].astype(np.int64)[:, None], ops["tensor"].astype(np.int64),
                                  ops["offset"], ops["ld"][:, None], ops["stride"][:, None]], axis=1) \
            if len(ops) else []
        self.tables = _Tables(kdesc, kscal, call_rows, plan.a_offs, plan.b_offs, op_rows,
                              plan.task_begin, plan.phase_begin)

    allocate = staticmethod(lambda nbytes: _Usm(nbytes))

    def begin(self):
        return None

    def copy_in(self, buf, x, ctx):
        buf.upload(x.ctypes.data, x.nbytes)

    def launch(self, addresses, ctx):
        self.tables.run(addresses)  # waits for the queue

    def copy_out(self, x, buf, ctx):
        buf.download(x.ctypes.data, x.nbytes)

    def finish(self, ctx, staged):
        pass
