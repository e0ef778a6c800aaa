"""Device arrays of brgemm.backend.cuda: DeviceArray (this GPU's memory, ours
or a view of another library's tensor through DLPack)."""
import ctypes

import numpy as np

from brgemm import dtypes
from brgemm.backend._cuda_driver import DL_BFLOAT, DL_CUDA, DL_FLOAT, _Allocation, _copy_out, \
    _upload, device, stream, synchronize


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
        synchronize(s)
        return out

    def __repr__(self):
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype}, device={device().name!r})"


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
