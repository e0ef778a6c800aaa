"""The CUDA driver API for brgemm.backend.cuda: libcuda.so.1 through cffi in
ABI mode, the primary context, the loaded fatbin and its entry points,
device memory and the stream work goes on. The cdef is the driver's few
functions plus kernels/cpu/brgemm_cpu.h and kernels/cuda/brgemm_cuda.h, the
same headers the device code includes."""
import os
import pathlib
import sys

import numpy as np

from brgemm._c_header import cdef_text
from brgemm.backend._cuda_tma import MAP_BF16, MAP_L2_256B, MAP_SWIZZLE_128B
from brgemm.backend._device_replay import once
from brgemm.constants import DTYPE_CODE  # noqa: F401  (cuda.py's kernel rows)

try:
    from cffi import FFI
except ImportError:  # cffi is a core dependency; without it the backend is absent
    FFI = None

ROOT = pathlib.Path(__file__).resolve().parents[2]
HEADERS = (ROOT / "kernels" / "cpu" / "brgemm_cpu.h", ROOT / "kernels" / "cuda" / "brgemm_cuda.h",
           ROOT / "kernels" / "cuda" / "mlp_fused.h")
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
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, CUfunction f, int threads,
                                                     size_t shared_bytes);
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s);
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s);
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
CUresult cuStreamSynchronize(CUstream s);
CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                        unsigned int bx, unsigned int by, unsigned int bz,
                        unsigned int shared_bytes, CUstream s, void **params, void **extra);
typedef union { char pad[64]; unsigned int cluster_dim[3]; int flag; uint64_t align; }
    CUlaunchAttributeValue;
typedef struct { int id; char pad[4]; CUlaunchAttributeValue value; } CUlaunchAttribute;
typedef struct {
    unsigned int gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned int numAttrs;
} CUlaunchConfig;
CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra);
CUresult cuOccupancyMaxActiveClusters(int *clusters, CUfunction f, const CUlaunchConfig *config);
CUresult cuTensorMapEncodeTiled(void *map, int dtype, unsigned int rank, void *address,
                                const uint64_t *dims, const uint64_t *strides,
                                const unsigned int *box, const unsigned int *element_strides,
                                int interleave, int swizzle, int l2_promotion, int oob_fill);
"""
DLPACK_CDEF = """
typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct { void *data; DLDevice device; int32_t ndim; DLDataType dtype;
                 int64_t *shape; int64_t *strides; uint64_t byte_offset; } DLTensor;
"""
ATTR_SM_COUNT, ATTR_CC_MAJOR, ATTR_CC_MINOR, ATTR_SMEM_OPTIN = 16, 75, 76, 97
LAUNCH_ATTR_CLUSTER_DIM, LAUNCH_ATTR_PROGRAMMATIC = 4, 6
FUNC_MAX_DYNAMIC_SMEM = 8
DL_CUDA, DL_FLOAT, DL_BFLOAT = 2, 2, 4



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
            ffi.cdef(cdef_text(h))
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
        self.sm_count = self.attribute(ATTR_SM_COUNT)
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
        self._check_records()
        self.has_tc = bool(self._read_int_global(b"brgemm_cuda_has_tc"))
        # (function, dynamic shared memory) of the entry points: phases with
        # tensor-core tiles up to 128 x 128 (tc_split: in clusters), with
        # 64-row tensor-core tiles only (two blocks per multiprocessor, alone or
        # in clusters), with 128 x 256 tensor-core tiles, and the rest (generic
        # only); *_tma: uniform phases fed by tensor maps (a producer warp
        # more: their blocks are TMA_THREADS), *_split_tma in clusters
        self.entry = {name: self._function(b"brgemm_cuda_phase_" + name.encode(),
                                           b"brgemm_cuda_smem" + suffix.encode())
                      for name, suffix in (("tc", ""), ("tc_split", ""), ("tc_small", "_small"),
                                           ("tc_wide", "_wide"), ("generic", "_generic"),
                                           ("tc_tma", "_tma"), ("tc_small_tma", "_small_tma"),
                                           ("tc_split_tma", "_tma"),
                                           ("tc_small_split_tma", "_small_tma"))}
        self._per_sm = {}
        self._clusters = {}
        from brgemm.constants import CALL_RECORD as _CALL, OP_RECORD as _OP  # the plan's records
        for ctype, numpy_dtype in (("brgemm_plan_call", _CALL), ("brgemm_plan_op", _OP)):
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

    def launch(self, entry, blocks, cluster, params, s, programmatic=False):
        """Launch `blocks` thread blocks of an entry point on stream s, in
        clusters of `cluster` blocks (1: plain blocks); programmatic: it may
        start before the stream's previous kernel ends (the kernel waits for
        it before touching tensors)."""
        fn, smem = self.entry[entry]
        if cluster == 1 and not programmatic:
            threads = self.threads(entry)
            self.check(self.cu.cuLaunchKernel(fn, blocks, 1, 1, threads, 1, 1, smem,
                                              self.ffi.cast("CUstream", s), params, self.ffi.NULL),
                       "cuLaunchKernel")
            return
        config, _attr = self._cluster_config(entry, cluster, blocks, s, programmatic)
        self.check(self.cu.cuLaunchKernelEx(config, fn, params, self.ffi.NULL), "cuLaunchKernelEx")

    def _cluster_config(self, entry, cluster, blocks, s, programmatic=False):
        """A launch config with a cluster dimension (and the programmatic
        launch attribute), and its attributes (keep both alive until the
        driver has read them)."""
        config = self.ffi.new("CUlaunchConfig *")
        attr = self.ffi.new("CUlaunchAttribute[2]")
        n = 0
        if cluster > 1 or not programmatic:  # (a plain launch takes no attribute)
            attr[n].id = LAUNCH_ATTR_CLUSTER_DIM
            attr[n].value.cluster_dim = [cluster, 1, 1]
            n += 1
        if programmatic:
            attr[n].id = LAUNCH_ATTR_PROGRAMMATIC
            attr[n].value.flag = 1
            n += 1
        config.gridDimX, config.gridDimY, config.gridDimZ = blocks, 1, 1
        config.blockDimX, config.blockDimY, config.blockDimZ = self.threads(entry), 1, 1
        config.sharedMemBytes = self.entry[entry][1]
        config.hStream = self.ffi.cast("CUstream", s)
        config.attrs, config.numAttrs = attr, n
        return config, attr

    def threads(self, entry):
        """The threads of a block of an entry point."""
        return self.cu.BRGEMM_CUDA_TMA_THREADS if entry.endswith("_tma") \
            else self.cu.BRGEMM_CUDA_THREADS

    def blocks_per_sm(self, entry):
        """How many blocks of an entry point one SM holds at once."""
        if entry not in self._per_sm:
            n = self.ffi.new("int *")
            fn, smem = self.entry[entry]
            self.check(self.cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(
                n, fn, self.threads(entry), smem), "cuOccupancyMaxActiveBlocksPerMultiprocessor")
            self._per_sm[entry] = max(n[0], 1)
        return self._per_sm[entry]

    def tensor_map(self, out, address, ld, rows, box_rows):
        """Encode into `out` (uint64_t[16]) the tensor map of the bf16 array
        [rows][ld] at `address`: 128-byte swizzle, boxes of 64 columns by
        box_rows rows, zeros outside it."""
        ffi = self.ffi
        raw = ffi.new("char[192]")  # the driver wants the map 64-byte aligned
        at = ffi.cast("char *", (int(ffi.cast("uintptr_t", raw)) + 63) // 64 * 64)
        dims, strides = ffi.new("uint64_t[2]", [ld, rows]), ffi.new("uint64_t[1]", [ld * 2])
        box, unit = ffi.new("unsigned int[2]", [64, box_rows]), ffi.new("unsigned int[2]", [1, 1])
        self.check(self.cu.cuTensorMapEncodeTiled(at, MAP_BF16, 2, ffi.cast("void *", address),
                                                  dims, strides, box, unit, 0, MAP_SWIZZLE_128B,
                                                  MAP_L2_256B, 0), "cuTensorMapEncodeTiled")
        ffi.memmove(out, at, 128)

    def max_clusters(self, entry, cluster):
        """How many clusters of `cluster` blocks of an entry point the GPU
        holds at once (0 where clusters cannot launch)."""
        key = (entry, cluster)
        if key not in self._clusters:
            n = self.ffi.new("int *")
            config, _attr = self._cluster_config(entry, cluster, cluster, 0)
            rc = self.cu.cuOccupancyMaxActiveClusters(n, self.entry[entry][0], config)
            self._clusters[key] = n[0] if rc == 0 else 0
        return self._clusters[key]

    def attribute(self, attr):
        v = self.ffi.new("int *")
        self.check(self.cu.cuDeviceGetAttribute(v, attr, self.dev), "cuDeviceGetAttribute")
        return v[0]

    def _read_int_global(self, name, count=None):
        """The int (or `count` ints) of a __device__ variable of the module."""
        ptr, size = self.ffi.new("CUdeviceptr *"), self.ffi.new("size_t *")
        self.check(self.cu.cuModuleGetGlobal_v2(ptr, size, self.module, name), "cuModuleGetGlobal")
        out = np.zeros(count or 1, np.int32)
        if size[0] != out.nbytes:
            raise RuntimeError(f"{name.decode()}: {size[0]} bytes in the fatbin, expected "
                               f"{out.nbytes}; rebuild it (python brgemm/_build_cuda.py)")
        self.check(self.cu.cuMemcpyDtoHAsync_v2(self.ffi.from_buffer(out), ptr[0], out.nbytes,
                                                self.ffi.NULL), "cuMemcpyDtoH")
        self.check(self.cu.cuStreamSynchronize(self.ffi.NULL), "cuStreamSynchronize")
        return int(out[0]) if count is None else [int(v) for v in out]

    def _check_records(self):
        """The fatbin was built from the headers this module read."""
        built = self._read_int_global(b"brgemm_cuda_record_bytes", 4)
        here = [self.ffi.sizeof(t) for t in ("brgemm_cuda_block", "brgemm_cuda_phase_args",
                                             "brgemm_plan_call", "brgemm_plan_op")]
        if built != here:
            raise RuntimeError(f"{FATBIN} was built from other headers (record sizes {built}, "
                               f"here {here}); rebuild it (python brgemm/_build_cuda.py)")

    def bind(self):
        """Make the primary context current on the calling thread."""
        self.check(self.cu.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")

    def check(self, rc, what):
        if rc != 0:
            name = self.ffi.new("const char **")
            text = (self.ffi.string(name[0]).decode()
                    if self.cu.cuGetErrorName(rc, name) == 0 else "unknown")
            raise CudaError(f"{what}: CUDA error {rc} ({text})")


device = once(_Device)  # the driver, the primary context and the loaded module


def stream():
    """The stream work goes on: PyTorch's current one once PyTorch has started CUDA."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return int(torch.cuda.current_stream(device().ordinal).cuda_stream)
    return 0


def bound():
    """The device, its primary context made current on the calling thread: CUDA
    contexts are per thread, and autograd's and users' threads may have none
    yet, so every driver call that needs one takes the device from here."""
    dev = device()
    dev.bind()
    return dev


def synchronize(s=None):
    """Wait for everything queued on stream s (None: the backend's stream)."""
    dev = bound()
    s = stream() if s is None else s
    dev.check(dev.cu.cuStreamSynchronize(dev.ffi.cast("CUstream", s)), "cuStreamSynchronize")


# ---------------------------------------------------------------- memory


class _Allocation:
    """nbytes of device memory, freed when the last reference goes."""

    def __init__(self, nbytes):
        dev = bound()
        self.nbytes = int(nbytes)
        ptr = dev.ffi.new("CUdeviceptr *")
        rc = dev.cu.cuMemAlloc_v2(ptr, max(self.nbytes, 1))
        if rc != 0:
            raise MemoryError(f"CUDA device: could not allocate {self.nbytes} bytes (error {rc})")
        self.address = int(ptr[0])
        self._free, self._bind = dev.cu.cuMemFree_v2, dev.bind

    def __del__(self):
        # the last reference may go on any thread: free in the context it was made in
        if getattr(self, "_free", None) is not None:
            try:
                self._bind()
            except Exception:  # interpreter shutdown: the driver is going too
                return
            self._free(self.address)


def _copy_in(address, x, s):
    dev = bound()
    if x.nbytes:
        dev.check(dev.cu.cuMemcpyHtoDAsync_v2(address, dev.ffi.from_buffer(x), x.nbytes,
                                              dev.ffi.cast("CUstream", s)), "cuMemcpyHtoD")


def _copy_out(x, address, s):
    dev = bound()
    if x.nbytes:
        dev.check(dev.cu.cuMemcpyDtoHAsync_v2(dev.ffi.from_buffer(x), address, x.nbytes,
                                              dev.ffi.cast("CUstream", s)), "cuMemcpyDtoH")


def _upload(x):
    """A device copy of the NumPy array x (contiguous), on the current stream, finished."""
    x = np.ascontiguousarray(x)
    buf = _Allocation(x.nbytes)
    s = stream()
    _copy_in(buf.address, x, s)
    synchronize(s)
    return buf
