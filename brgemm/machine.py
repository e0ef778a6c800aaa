"""Facts about this machine and its backends that benchmarks and tools need:
peak probes, the CPU runtime's thread count, device names, why a backend is
missing. Public, so that nothing outside brgemm reaches into brgemm.backend."""
from brgemm.backend import _module, get, resolve


def resolve_backend(backend=None) -> str:
    """The backend argument resolved: a known name that runs here (None:
    BRGEMM_BACKEND, else "cpu"); a ValueError naming `backend` otherwise."""
    return resolve(backend)


def cpu_arch() -> str:
    """The instruction set libxsmm generates CPU kernels for, e.g. "avx512_core"."""
    return get("cpu").arch()


def fma_peak(seconds=0.3):
    """(GFLOP/s, unit): the measured single-core f32 FMA peak and the vector unit it used."""
    return get("cpu").fma_peak(seconds)


def bf16_peak(seconds=0.3) -> float:
    """The measured single-core AVX512-BF16 dot-product peak, GFLOP/s; 0.0 without one."""
    return get("cpu").bf16_peak(seconds)


def amx_peak(seconds=0.3) -> float:
    """The measured single-core AMX tdpbf16ps peak, GFLOP/s; 0.0 without AMX tiles."""
    return get("cpu").amx_peak(seconds)


def set_cpu_threads(threads: int) -> None:
    """Threads of the CPU backend's replays from now on. The OpenMP runtime read
    OMP_NUM_THREADS when it loaded, so setting the variable later is not enough."""
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads: expected a positive int, got {threads!r}")
    get("cpu").lib.brgemm_cpu_set_threads(threads)


def cpu_threads() -> int:
    """Threads a CPU plan replay uses when it is not told how many."""
    return get("cpu").lib.brgemm_cpu_plan_threads(0)


def unavailable_reason(backend: str):
    """Why `backend` cannot run here, or None when it can."""
    return _module(backend)[1]


def device_name(backend: str) -> str:
    """The name of the device `backend` runs on (sycl or cuda)."""
    if backend not in ("sycl", "cuda"):
        raise ValueError(f"backend: expected 'sycl' or 'cuda', got {backend!r}")
    return get(backend).device_name()


def cuda_has_tensor_cores() -> bool:
    """True where the CUDA backend's bf16 tensor-core (wgmma) path runs."""
    return get("cuda").has_tensor_cores()


def point_opencl_loader():
    """Point the OpenCL ICD loader at the SYCL CPU device before a library that
    loads libsycl (e.g. oneDNN's SYCL build) does."""
    from brgemm.backend.opencl_icd import point_icd_loader
    return point_icd_loader()
