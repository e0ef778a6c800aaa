"""The few functions of dpctl's C library (libDPCTLSyclInterface) the SYCL
backend calls, through cffi's ABI mode: no compiler and no headers needed,
and no Python between a plan's phases beyond one C call each. Signatures from
dpctl 0.22's include/syclinterface headers."""
import pathlib

import cffi

CDEF = """
typedef struct DPCTLOpaqueSyclQueue *DPCTLSyclQueueRef;
typedef struct DPCTLOpaqueSyclKernel *DPCTLSyclKernelRef;
typedef struct DPCTLOpaqueSyclEvent *DPCTLSyclEventRef;
typedef struct DPCTLOpaqueSyclUSM *DPCTLSyclUSMRef;
typedef enum {
    DPCTL_INT8_T, DPCTL_UINT8_T, DPCTL_INT16_T, DPCTL_UINT16_T, DPCTL_INT32_T, DPCTL_UINT32_T,
    DPCTL_INT64_T, DPCTL_UINT64_T, DPCTL_FLOAT32_T, DPCTL_FLOAT64_T, DPCTL_VOID_PTR,
    DPCTL_LOCAL_ACCESSOR, DPCTL_WORK_GROUP_MEMORY, DPCTL_RAW_KERNEL_ARG,
    DPCTL_UNSUPPORTED_KERNEL_ARG
} DPCTLKernelArgType;

DPCTLSyclEventRef DPCTLQueue_SubmitNDRange(const DPCTLSyclKernelRef KRef,
    const DPCTLSyclQueueRef QRef, void **Args, const DPCTLKernelArgType *ArgTypes, size_t NArgs,
    const size_t gRange[3], const size_t lRange[3], size_t NDims,
    const DPCTLSyclEventRef *DepEvents, size_t NDepEvents);
DPCTLSyclEventRef DPCTLQueue_Memcpy(const DPCTLSyclQueueRef QRef, void *Dest, const void *Src,
                                    size_t Count);
void DPCTLQueue_Wait(const DPCTLSyclQueueRef QRef);
void DPCTLEvent_Wait(DPCTLSyclEventRef ERef);
void DPCTLEvent_Delete(DPCTLSyclEventRef ERef);
DPCTLSyclUSMRef DPCTLmalloc_device(size_t size, const DPCTLSyclQueueRef QRef);
void DPCTLfree_with_queue(DPCTLSyclUSMRef MRef, const DPCTLSyclQueueRef QRef);
"""


def load(dpctl_module):
    """(ffi, lib) for the libDPCTLSyclInterface that this dpctl package ships."""
    ffi = cffi.FFI()
    ffi.cdef(CDEF)
    path = pathlib.Path(dpctl_module.__file__).parent / "libDPCTLSyclInterface.so"
    if not path.exists():  # newer dpctl builds may version the file name
        found = sorted(path.parent.glob("libDPCTLSyclInterface.so*"))
        if not found:
            raise ImportError(f"libDPCTLSyclInterface.so not found next to {dpctl_module.__file__}")
        path = found[0]
    return ffi, ffi.dlopen(str(path))
