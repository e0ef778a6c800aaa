"""CUDA backend: the kernel and plan replay on an NVIDIA GPU.

The device code is kernels/cuda/brgemm_plan.cu, compiled by nvcc into
brgemm/_brgemm_cuda.fatbin when the package is built (brgemm/_build_cuda.py):
one launch runs one phase of a plan as a grouped batch-reduce GEMM. A single
kernel call is a one-call plan.

Host work goes through the CUDA driver API (libcuda.so.1, part of the driver)
called with cffi in ABI mode, as the SYCL backend calls dpctl's C library:
cffi is already a dependency, the driver API needs no toolkit and no CuPy at
run time, and it shares the primary context with PyTorch and CuPy, so their
device tensors can be passed straight in. The launch argument and tables are
declared once, in kernels/cuda/brgemm_cuda.h and kernels/cpu/brgemm_cpu.h,
which are also this module's cdef.

Arrays: NumPy arrays are copied to the device and back on every run; device
tensors (PyTorch, CuPy: anything with __dlpack__ on this GPU) and this
module's DeviceArray are used in place. Work goes on PyTorch's current stream
when PyTorch has started CUDA (so replays can be captured in a CUDA graph),
else on the legacy default stream; device-tensor runs do not wait for the GPU.

Device choice: BRGEMM_CUDA_DEVICE (an ordinal), else 0.
"""
import ctypes
import os
import pathlib
import sys
import threading

import numpy as np

from brgemm import dtypes

try:
    from cffi import FFI
except ImportError:  # cffi is a core dependency; without it the backend is absent
    FFI = None

ROOT = pathlib.Path(__file__).resolve().parents[2]
HEADERS = (ROOT / "kernels" / "cpu" / "brgemm_cpu.h", ROOT / "kernels" / "cuda" / "brgemm_cuda.h")
FATBIN = pathlib.Path(os.environ.get("BRGEMM_CUDA_FATBIN")
                      or pathlib.Path(__file__).resolve().parents[1] / "_brgemm_cuda.fatbin")

DRIVER_CDEF = """
typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef unsigned long long CUdeviceptr;
CUresult cuInit(unsigned int flags);
CUresult cuGetErrorName(CUresult error, const char **name);
CUresult cuDeviceGetCount(int *count);
CUresult cuDeviceGet(CUdevice *device, int ordinal);
CUresult cuDeviceGetName(char *name, int len, CUdevice dev);
CUresult cuDeviceGetAttribute(int *value, int attrib, CUdevice dev);
CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuModuleLoadData(CUmodule *module, const void *image);
CUresult cuModuleGetFunction(CUfunction *f, CUmodule module, const char *name);
CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule module, const char *name);
CUresult cuFuncSetAttribute(CUfunction f, int attrib, int value);
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s);
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s);
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
CUresult cuStreamSynchronize(CUstream s);
CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                        unsigned int bx, unsigned int by, unsigned int bz,
                        unsigned int shared_bytes, CUstream s, void **params, void **extra);
"""
DLPACK_CDEF = """
typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct { void *data; DLDevice device; int32_t ndim; DLDataType dtype;
                 int64_t *shape; int64_t *strides; uint64_t byte_offset; } DLTensor;
"""
ATTR_CC_MAJOR, ATTR_CC_MINOR, ATTR_SMEM_OPTIN = 75, 76, 97
FUNC_MAX_DYNAMIC_SMEM = 8
DL_CUDA, DL_FLOAT, DL_BFLOAT = 2, 2, 4
DTYPE_CODE = {"f32": 0, "bf16": 1}

launches = 0             # kernel launches made so far (tests count them)
_state = {}
_lock = threading.Lock()


def _header_cdef(path):
    """A header as cffi reads it: no preprocessor lines, no C++ guards."""
    kept, skip = [], False
    for line in path.read_text().splitlines():
        s = line.strip()
        if s.startswith("#ifdef __cplusplus"):
            skip = True
        elif skip:
            skip = not s.startswith("#endif")
        elif not s.startswith("#"):
            kept.append(line)
    return "\n".join(kept)


class CudaError(RuntimeError):
    """A CUDA driver call failed."""


class _Device:
    """The driver, the primary context, the loaded module and its kernel, made once."""

    def __init__(self):
        if FFI is None:
            raise ImportError("cffi is not installed")
        self.ffi = ffi = FFI()
        ffi.cdef(DRIVER_CDEF + DLPACK_CDEF)
        for h in HEADERS:
            ffi.cdef(_header_cdef(h))
        try:
            self.cu = ffi.dlopen("libcuda.so.1")
        except OSError as e:
            raise OSError(f"no NVIDIA driver: libcuda.so.1 could not be loaded ({e})") from None
        self.check(self.cu.cuInit(0), "cuInit")
        count = ffi.new("int *")
        self.check(self.cu.cuDeviceGetCount(count), "cuDeviceGetCount")
        ordinal = int(os.environ.get("BRGEMM_CUDA_DEVICE", "0"))
        if not 0 <= ordinal < count[0]:
            raise RuntimeError(f"no CUDA device {ordinal} ({count[0]} devices)")
        dev = ffi.new("CUdevice *")
        self.check(self.cu.cuDeviceGet(dev, ordinal), "cuDeviceGet")
        self.ordinal, self.dev = ordinal, dev[0]
        name = ffi.new("char[256]")
        self.check(self.cu.cuDeviceGetName(name, 256, self.dev), "cuDeviceGetName")
        self.name = ffi.string(name).decode()
        self.cc = (self.attribute(ATTR_CC_MAJOR), self.attribute(ATTR_CC_MINOR))
        ctx = ffi.new("CUcontext *")
        self.check(self.cu.cuDevicePrimaryCtxRetain(ctx, self.dev), "cuDevicePrimaryCtxRetain")
        self.ctx = ctx[0]
        self.bind()
        if not FATBIN.exists():
            raise FileNotFoundError(f"{FATBIN} is missing: nvcc was not found when brgemm was "
                                    "built (python brgemm/_build_cuda.py builds it)")
        self.image = FATBIN.read_bytes()  # the driver reads it during the load only
        module = ffi.new("CUmodule *")
        self.check(self.cu.cuModuleLoadData(module, self.image), "cuModuleLoadData")
        self.module = module[0]
        self.has_tc = bool(self._read_int_global(b"brgemm_cuda_has_tc"))
        # (function, dynamic shared memory) of the two entry points: phases with
        # tensor-core calls, and the rest (more blocks per multiprocessor)
        self.entry = {True: self._function(b"brgemm_cuda_phase_tc", b"brgemm_cuda_smem"),
                      False: self._function(b"brgemm_cuda_phase_generic",
                                            b"brgemm_cuda_smem_generic")}
        for ctype, numpy_dtype in (("brgemm_plan_call", _CALL_DTYPE), ("brgemm_plan_op", _OP_DTYPE)):
            if ffi.sizeof(ctype) != numpy_dtype.itemsize:  # the plan's records must be the C structs
                raise RuntimeError(f"{ctype}: {ffi.sizeof(ctype)} bytes in C, "
                                   f"{numpy_dtype.itemsize} in brgemm.plan")

    def _function(self, name, smem_global):
        fn = self.ffi.new("CUfunction *")
        self.check(self.cu.cuModuleGetFunction(fn, self.module, name), "cuModuleGetFunction")
        smem = self._read_int_global(smem_global)  # the build's pipeline depth decides
        self.check(self.cu.cuFuncSetAttribute(fn[0], FUNC_MAX_DYNAMIC_SMEM, smem),
                   "cuFuncSetAttribute")
        return fn[0], smem

    def attribute(self, attr):
        v = self.ffi.new("int *")
        self.check(self.cu.cuDeviceGetAttribute(v, attr, self.dev), "cuDeviceGetAttribute")
        return v[0]

    def _read_int_global(self, name):
        ptr, size = self.ffi.new("CUdeviceptr *"), self.ffi.new("size_t *")
        self.check(self.cu.cuModuleGetGlobal_v2(ptr, size, self.module, name), "cuModuleGetGlobal")
        out = np.zeros(1, np.int32)
        self.check(self.cu.cuMemcpyDtoHAsync_v2(self.ffi.from_buffer(out), ptr[0], 4, self.ffi.NULL),
                   "cuMemcpyDtoH")
        self.check(self.cu.cuStreamSynchronize(self.ffi.NULL), "cuStreamSynchronize")
        return int(out[0])

    def bind(self):
        """Make the primary context current on the calling thread."""
        self.check(self.cu.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")

    def check(self, rc, what):
        if rc != 0:
            name = self.ffi.new("const char **")
            text = (self.ffi.string(name[0]).decode()
                    if self.cu.cuGetErrorName(rc, name) == 0 else "unknown")
            raise CudaError(f"{what}: CUDA error {rc} ({text})")


def device():
    dev = _state.get("device")
    if dev is None:
        with _lock:
            dev = _state.get("device")
            if dev is None:
                dev = _state["device"] = _Device()
    return dev


def unavailable_reason():
    try:
        device()
    except Exception as e:  # no driver, no GPU, or no fatbin
        return f"{type(e).__name__}: {e}"
    return None


def device_name():
    return device().name


def has_tensor_cores():
    """True where this build's bf16 tensor-core (wgmma) path runs: sm_90a devices."""
    return device().has_tc


def stream():
    """The stream work goes on: PyTorch's current one once PyTorch has started CUDA."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return int(torch.cuda.current_stream(device().ordinal).cuda_stream)
    return 0


def synchronize():
    dev = device()
    dev.bind()
    dev.check(dev.cu.cuStreamSynchronize(dev.ffi.cast("CUstream", stream())), "cuStreamSynchronize")


# ---------------------------------------------------------------- memory


class _Allocation:
    """nbytes of device memory, freed when the last reference goes."""

    def __init__(self, nbytes):
        dev = device()
        dev.bind()
        self.nbytes = int(nbytes)
        ptr = dev.ffi.new("CUdeviceptr *")
        rc = dev.cu.cuMemAlloc_v2(ptr, max(self.nbytes, 1))
        if rc != 0:
            raise MemoryError(f"CUDA device: could not allocate {self.nbytes} bytes (error {rc})")
        self.address = int(ptr[0])
        self._free = dev.cu.cuMemFree_v2

    def __del__(self):
        if getattr(self, "_free", None) is not None:
            self._free(self.address)


def _copy_in(address, x, s):
    dev = device()
    if x.nbytes:
        dev.check(dev.cu.cuMemcpyHtoDAsync_v2(address, dev.ffi.from_buffer(x), x.nbytes,
                                              dev.ffi.cast("CUstream", s)), "cuMemcpyHtoD")


def _copy_out(x, address, s):
    dev = device()
    if x.nbytes:
        dev.check(dev.cu.cuMemcpyDtoHAsync_v2(dev.ffi.from_buffer(x), address, x.nbytes,
                                              dev.ffi.cast("CUstream", s)), "cuMemcpyDtoH")


def _upload(x):
    """A device copy of the NumPy array x (contiguous), on the current stream, finished."""
    x = np.ascontiguousarray(x)
    buf = _Allocation(x.nbytes)
    dev = device()
    s = stream()
    _copy_in(buf.address, x, s)
    dev.check(dev.cu.cuStreamSynchronize(dev.ffi.cast("CUstream", s)), "cuStreamSynchronize")
    return buf


class DeviceArray:
    """A flat, C-contiguous array in this GPU's memory: pass it to Plan.run in
    place of a NumPy array and nothing is copied (the steady state). Made by
    this module (DeviceArray(shape, dtype), to_device) or as a view of another
    library's device tensor (from_dlpack), which it keeps alive."""

    def __init__(self, shape, dtype, *, _address=None, _owner=None):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.nbytes = self.size * self.dtype.itemsize
        if _address is None:
            _owner = _Allocation(self.nbytes)
            _address = _owner.address
        self.address, self._owner = int(_address), _owner

    @classmethod
    def from_numpy(cls, x):
        x = np.ascontiguousarray(x)
        buf = _upload(x)
        return cls(x.shape, x.dtype, _address=buf.address, _owner=buf)

    def numpy(self):
        out = np.empty(self.shape, self.dtype)
        s = stream()
        _copy_out(out, self.address, s)
        dev = device()
        dev.check(dev.cu.cuStreamSynchronize(dev.ffi.cast("CUstream", s)), "cuStreamSynchronize")
        return out

    def __repr__(self):
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype}, device={device_name()!r})"


def to_device(x):
    return DeviceArray.from_numpy(x)


def from_dlpack(x, name="x"):
    """A DeviceArray view of x, a device tensor on this GPU (anything with
    __dlpack__: PyTorch, CuPy, JAX), C-contiguous, float32 or bfloat16."""
    dev = device()
    if hasattr(x, "__dlpack_device__"):
        kind, ordinal = x.__dlpack_device__()
        if int(kind) != DL_CUDA or int(ordinal) != dev.ordinal:
            raise ValueError(f"{name}: is on DLPack device ({int(kind)}, {int(ordinal)}), not "
                             f"CUDA device {dev.ordinal}; copy it there or pass a NumPy array")
    try:
        capsule = x.__dlpack__(stream=-1)  # -1: we order work on the stream ourselves
    except TypeError:
        capsule = x.__dlpack__()
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    t = dev.ffi.cast("DLTensor *", get(capsule, b"dltensor"))
    code, bits, lanes = t.dtype.code, t.dtype.bits, t.dtype.lanes
    if (code, bits, lanes) == (DL_FLOAT, 32, 1):
        dtype = dtypes.float32
    elif (code, bits, lanes) == (DL_BFLOAT, 16, 1):
        dtype = dtypes.bfloat16
    else:
        raise TypeError(f"{name}: expected a float32 or bfloat16 tensor, got DLPack dtype "
                        f"(code {code}, {bits} bits, {lanes} lanes)")
    shape = tuple(t.shape[i] for i in range(t.ndim))
    if t.strides != dev.ffi.NULL:
        expect = 1
        for i in reversed(range(t.ndim)):
            if shape[i] != 1 and t.strides[i] != expect:
                raise ValueError(f"{name}: a plan reads tensors as flat buffers; pass a "
                                 f"contiguous tensor ({name}.contiguous())")
            expect *= shape[i]
    address = int(dev.ffi.cast("uintptr_t", t.data)) + int(t.byte_offset)
    return DeviceArray(shape, dtype, _address=address, _owner=x)


def _adopt(x, name):
    if isinstance(x, (np.ndarray, DeviceArray)) or not hasattr(x, "__dlpack__"):
        return x  # Plan._check names anything that is neither
    return from_dlpack(x, name)


# ---------------------------------------------------------------- tables


# the plan's call and op records: NumPy views of brgemm_plan_call / brgemm_plan_op
from brgemm.plan import _CALL as _CALL_DTYPE, _OP as _OP_DTYPE  # noqa: E402


class _Tables:
    """A plan's tables on the device, and the launches of its phases."""

    def __init__(self, blocks, calls, a_offs, b_offs, ops, task_begin, phase_begin):
        dev = device()
        ffi = dev.ffi
        desc = ffi.new("brgemm_cuda_block[]", max(len(blocks), 1))
        for i, b in enumerate(blocks):
            d = desc[i]
            d.m, d.n, d.k, d.lda, d.ldb, d.ldc = b.m, b.n, b.k, b.lda, b.ldb, b.ldc
            d.dtype_ab, d.dtype_c = DTYPE_CODE[b.dtype], DTYPE_CODE[b.c_dtype]
            d.alpha, d.beta = b.alpha, b.beta
        paths = _call_paths(blocks, calls, a_offs, b_offs, ops)
        self._bufs = {
            "blocks": _upload(np.frombuffer(ffi.buffer(desc), np.uint8)),
            "calls": _upload(_nonempty(calls, _CALL_DTYPE)),
            "a_offs": _upload(_nonempty(a_offs, np.uint64)),
            "b_offs": _upload(_nonempty(b_offs, np.uint64)),
            "ops": _upload(_nonempty(ops, _OP_DTYPE)),
            "task_begin": _upload(np.asarray(task_begin, np.int64)),
            "call_path": _upload(_nonempty(paths, np.uint8)),
        }
        self.phase_begin = [int(p) for p in phase_begin]
        # a phase with a tensor-core call launches the entry point that has that path
        tc = (paths & dev.cu.BRGEMM_CUDA_PATH_TC) != 0
        tc_before = np.concatenate([[0], np.cumsum(tc)])
        first_call = np.asarray(task_begin, np.int64)[self.phase_begin]
        self.phase_tc = [bool(tc_before[first_call[p + 1]] > tc_before[first_call[p]]
                              and dev.has_tc) for p in range(len(self.phase_begin) - 1)]
        self.args = ffi.new("brgemm_cuda_phase_args *")
        for name, buf in self._bufs.items():
            setattr(self.args, name, buf.address)
        self.params = ffi.new("void *[1]", [self.args])

    def run(self, addresses, s):
        """Launch every phase on tensors at these device addresses, in order, on stream s."""
        global launches
        dev = device()
        if len(addresses) > dev.cu.BRGEMM_CUDA_MAX_TENSORS:
            raise ValueError(f"tensors: a plan on CUDA binds at most "
                             f"{dev.cu.BRGEMM_CUDA_MAX_TENSORS}, "
                             f"this one {len(addresses)}")
        for i, a in enumerate(addresses):
            self.args.tensors[i] = a
        self.args.allow_tc = int(all(a % 16 == 0 for a in addresses))
        threads = dev.cu.BRGEMM_CUDA_THREADS
        cs = dev.ffi.cast("CUstream", s)
        for p in range(len(self.phase_begin) - 1):
            n_tasks = self.phase_begin[p + 1] - self.phase_begin[p]
            if n_tasks == 0:
                continue
            self.args.task0 = self.phase_begin[p]
            fn, smem = dev.entry[self.phase_tc[p]]
            dev.check(dev.cu.cuLaunchKernel(fn, n_tasks, 1, 1, threads, 1, 1, smem, cs,
                                            self.params, dev.ffi.NULL), f"phase {p}: cuLaunchKernel")
            launches += 1


def _nonempty(x, dtype):
    x = np.ascontiguousarray(x, dtype)
    return x if x.size else np.zeros(1, dtype)


def _call_paths(blocks, calls, a_offs, b_offs, ops):
    """BRGEMM_CUDA_PATH_* bits per call: the tensor-core path where its block is
    bf16 with k, n, lda, ldb multiples of 8 and every A/B byte offset a multiple
    of 16 (16-byte copies); memory-order ops where it has an LSTM op."""
    dev = device()
    tc, mem_ops = dev.cu.BRGEMM_CUDA_PATH_TC, dev.cu.BRGEMM_CUDA_PATH_MEM_OPS
    if len(calls) == 0:
        return np.zeros(0, np.uint8)
    block_ok = np.array([b.dtype == "bf16" and not (b.k % 8 or b.n % 8 or b.lda % 8 or b.ldb % 8)
                         for b in blocks], bool)
    misaligned = np.concatenate([[0], np.cumsum((np.asarray(a_offs, np.uint64) % 16 != 0)
                                                | (np.asarray(b_offs, np.uint64) % 16 != 0))])
    first, count = calls["offs"].astype(np.int64), calls["count"].astype(np.int64)
    offs_ok = misaligned[first + count] == misaligned[first]
    lstm = np.isin(ops["code"], (dev.cu.BRGEMM_OP_LSTM_CELL, dev.cu.BRGEMM_OP_LSTM_CELL_BWD))
    lstm_before = np.concatenate([[0], np.cumsum(lstm)])
    ob, oc = calls["op_begin"].astype(np.int64), calls["op_count"].astype(np.int64)
    has_lstm = lstm_before[ob + oc] > lstm_before[ob]
    path = np.where(block_ok[calls["kernel"]] & offs_ok, tc, 0) | np.where(has_lstm, mem_ops, 0)
    return path.astype(np.uint8)


def _ranges_meet(x, y):
    return x.nbytes and y.nbytes and x.address < y.address + y.nbytes and \
        y.address < x.address + x.nbytes


# ---------------------------------------------------------------- the kernel contract


def _span(x):
    """(first byte address, bytes to the end of the last element) of a view
    with non-negative strides, as brgemm.kernel has checked."""
    if x.size == 0:
        return x.ctypes.data, 0
    return x.ctypes.data, int(sum((s - 1) * st for s, st in zip(x.shape, x.strides))) + x.itemsize


class _Block:
    """The fields of brgemm.plan.Block that _Tables reads."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


class NativeKernel:
    """One kernel shape on the device; every call copies its operands to the
    device, runs a one-call plan and copies C back (plans are the fast path)."""

    def __init__(self, *, form, dtype_ab, dtype_c, m, n, k, lda, ldb, ldc, alpha, beta,
                 stride_a=0, stride_b=0):
        self.block = dict(m=m, n=n, k=k, ldc=ldc, dtype=dtype_ab, c_dtype=dtype_c,
                          alpha=alpha, beta=beta)
        self.lda, self.ldb = lda, ldb
        self.stride_a, self.stride_b = stride_a, stride_b
        self.item = 2 if dtype_ab == "bf16" else 4
        self.path = "f32" if dtype_ab == "f32" else "bf16-cuda"
        self.packs_b = False  # the device reads bf16 B as it is
        self.packed_dtype = np.dtype(np.float32)
        self.packed_elems = k * n

    def _run(self, A, B, C, a_offs, b_offs, lda, ldb):
        calls = np.zeros(1, _CALL_DTYPE)
        calls[0] = (0, 0, 1, 2, 0, len(a_offs), 0, 0, 0)
        tables = _Tables([_Block(lda=lda, ldb=ldb, **self.block)], calls,
                         np.asarray(a_offs, np.uint64) * self.item,
                         np.asarray(b_offs, np.uint64) * self.item, np.zeros(0, _OP_DTYPE),
                         [0, 1], [0, 1])
        s = stream()
        bufs, host = [], []
        for x in (A, B, C):
            at, nbytes = _span(x)
            flat = np.frombuffer((ctypes.c_char * nbytes).from_address(at), np.uint8) if nbytes \
                else np.zeros(0, np.uint8)
            buf = _Allocation(nbytes)
            _copy_in(buf.address, flat, s)
            bufs.append(buf)
            host.append(flat)
        tables.run([b.address for b in bufs], s)
        _copy_out(host[2], bufs[2].address, s)
        dev = device()
        dev.check(dev.cu.cuStreamSynchronize(dev.ffi.cast("CUstream", s)), "cuStreamSynchronize")

    def strd(self, A, B, C, count, b_packed=False, check_overlap=False):
        if check_overlap:
            (a, an), (b, bn), (c, cn) = _span(A), _span(B), _span(C)
            if cn and ((an and c < a + an and a < c + cn) or (bn and c < b + bn and b < c + cn)):
                return False  # kernel.py decides exactly, then calls again without the check
        self._run(A, B, C, np.arange(count) * self.stride_a, np.arange(count) * self.stride_b,
                  self.lda, self.ldb)
        return True

    def addr(self, As, Bs, C, b_packed=False):
        # blocks may lie anywhere in host memory: stage them in one buffer each
        m, n, k = self.block["m"], self.block["n"], self.block["k"]
        dt = As[0].dtype if len(As) else np.float32
        A = np.stack([np.ascontiguousarray(a) for a in As]) if len(As) else np.zeros(1, dt)
        B = np.stack([np.ascontiguousarray(b) for b in Bs]) if len(Bs) else np.zeros(1, dt)
        count = len(As)
        self._run(A, B, C, np.arange(count) * m * k, np.arange(count) * k * n, k, n)

    def offs(self, A, B, a_offsets, b_offsets, C, b_packed=False):
        self._run(A, B, C, a_offsets, b_offsets, self.lda, self.ldb)

    def pack_b(self, B, ldb):
        raise AssertionError("unreachable: packs_b is False on this backend")


# ---------------------------------------------------------------- plans


class PlanReplay:
    """A recorded brgemm.plan.Plan on the GPU: its tables uploaded once, one
    launch per phase on every run."""

    device_array = DeviceArray  # Plan.run accepts these in place of NumPy arrays

    def __init__(self, plan):
        self.tables = _Tables(plan.blocks, plan.calls, plan.a_offs, plan.b_offs, plan.ops,
                              plan.task_begin, plan.phase_begin)
        self.names = list(plan.tensors)
        self.written = plan.written
        self._staging = {}  # tensor name -> device copy of a NumPy argument, reused across runs
        self._lock = threading.Lock()  # runs from several threads share the staging buffers

    def adopt(self, arrays):
        """Device tensors of other libraries (DLPack) as DeviceArray views."""
        return {name: _adopt(x, name) for name, x in arrays.items()}

    def run(self, arrays):
        """arrays: name -> NumPy array (copied in, and back if written) or DeviceArray."""
        for w in self.written:
            for name in self.names:
                a, b = arrays[w], arrays[name]
                if name != w and isinstance(a, DeviceArray) and isinstance(b, DeviceArray) \
                        and _ranges_meet(a, b):
                    raise ValueError(f"{w}: overlaps {name}; the plan writes {w}")
        with self._lock:
            self._run(arrays)

    def _run(self, arrays):
        dev = device()
        dev.bind()
        s = stream()
        addresses, back = [], []
        for name in self.names:
            x = arrays[name]
            if isinstance(x, DeviceArray):
                addresses.append(x.address)
                continue
            buf = self._staging.get(name)
            if buf is None or buf.nbytes < x.nbytes:
                buf = self._staging[name] = _Allocation(x.nbytes)
            _copy_in(buf.address, x, s)
            addresses.append(buf.address)
            if name in self.written:
                back.append((buf, x))
        self.tables.run(addresses, s)
        for buf, x in back:
            _copy_out(x, buf.address, s)
        if back or len(addresses) != sum(isinstance(arrays[n], DeviceArray) for n in self.names):
            dev.check(dev.cu.cuStreamSynchronize(dev.ffi.cast("CUstream", s)),
                      "cuStreamSynchronize")
