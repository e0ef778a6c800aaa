"""What this machine runs: brgemm.info()."""
from brgemm.backend import resolve as resolve_backend
from brgemm.kernel import Kernel


def info(backend=None):
    """A dict: the backend, the path bf16 kernels take here and, on the CPU,
    whether they run on AMX tiles and why not (e.g. no AMX in the CPU)."""
    backend = resolve_backend(backend)
    out = {"backend": backend, "bf16_path": Kernel(32, 32, 32, dtype="bf16", backend=backend).path}
    if backend == "cpu":
        from brgemm.backend import cpu
        impl, reason = cpu.amx()
        out.update(arch=cpu.arch(), amx=impl or None, amx_reason=reason or None)
    return out


_paths = {}
# libxsmm's targets without AVX-512 (brgemm.machine.cpu_arch): their kernels'
# vectors are 8 floats or fewer, and the CPU adds "@avx2" to its kernel path
NARROW_TARGETS = ("generic", "wsm", "snb", "hsw")


def kernel_path(dtype, backend="cpu"):
    """The kernel path for `dtype` here, which selects the ["<path>".<pass>]
    tables of primitive configs: the CPU kernel's ("f32", "bf16-amx", ...),
    with "@amx" on a CPU with AMX tiles where the path itself does not say so
    ("f32@amx": the ["f32".<pass>] tables, then the ["f32@amx".<pass>] ones;
    brgemm.config.CPUS) and "@avx2" where libxsmm targets no AVX-512
    (NARROW_TARGETS, LIBXSMM_TARGET included), "cuda" on NVIDIA GPUs (both
    dtypes), None elsewhere."""
    if backend == "cuda":
        return "cuda"
    if backend != "cpu":
        return None
    if dtype not in _paths:
        from brgemm.backend import cpu
        path = Kernel(32, 32, 32, dtype=dtype, backend="cpu").path
        _paths[dtype] = path + "@amx" if cpu.amx()[0] == "hardware" and "amx" not in path \
            else path + "@avx2" if cpu.arch() in NARROW_TARGETS else path
    return _paths[dtype]
