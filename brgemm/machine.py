"""Facts about this machine and its backends that benchmarks and tools need:
peak probes, the CPU runtime's thread count, device names, why a backend is
missing, how the CUDA backend launches a plan. Public, so that nothing
outside brgemm reaches into brgemm.backend."""
import contextlib

from brgemm.backend import _module, get, resolve
from brgemm.plan import Plan


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


def _seconds(seconds):
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds <= 60:
        raise ValueError(f"seconds: expected a number in (0, 60], got {seconds!r}")
    return float(seconds)


def amx_step(loads=False, seconds=0.3) -> float:
    """The AMX kernel's inner step alone on one core, GFLOP/s (0.0 without AMX
    tiles): its four 2x2 C tiles fed from registers, or with loads=True with
    the step's four tile loads from L1. Against amx_peak it says what the C
    tiles and the loads cost before any data comes from L2."""
    if not isinstance(loads, bool):
        raise ValueError(f"loads: expected True or False, got {loads!r}")
    return get("cpu").amx_probe(int(loads), _seconds(seconds))


def amx_turns(every, by_tile=False, seconds=0.3) -> float:
    """The AMX kernel's inner step from L1 (as amx_step(True)) with a turn
    between macro blocks every `every` steps (2, 8 or 32): its four C tiles
    stored and four others loaded, all at once or tile by tile with the next
    step's products between. GFLOP/s, 0.0 without AMX tiles; against
    amx_step(True) it says what a turn costs."""
    if every not in (2, 8, 32) or isinstance(every, bool):
        raise ValueError(f"every: expected 2, 8 or 32, got {every!r}")
    if not isinstance(by_tile, bool):
        raise ValueError(f"by_tile: expected True or False, got {by_tile!r}")
    pattern = {2: 2, 8: 4, 32: 6}[every] + int(by_tile)
    return get("cpu").amx_probe(pattern, _seconds(seconds))


def amx_config_seconds(release=False, seconds=0.3) -> float:
    """Seconds per AMX tile config load (with a tile zeroed and stored; with
    release=True a tile release after each): what every kernel call on AMX
    pays around its tile work (0.0 without AMX tiles)."""
    if not isinstance(release, bool):
        raise ValueError(f"release: expected True or False, got {release!r}")
    return get("cpu").amx_config_ns(int(release), _seconds(seconds)) * 1e-9


def set_cpu_threads(threads: int) -> None:
    """Threads of the CPU backend's replays from now on. The OpenMP runtime read
    OMP_NUM_THREADS when it loaded, so setting the variable later is not enough."""
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads: expected a positive int, got {threads!r}")
    get("cpu").lib.brgemm_cpu_set_threads(threads)


_plan_threads = []  # the CPU backend's brgemm_cpu_plan_threads, once looked up


def cpu_threads() -> int:
    """Threads a CPU plan replay uses when it is not told how many (asked on
    every functional conv call: the backend looked up once)."""
    if not _plan_threads:
        _plan_threads.append(get("cpu").lib.brgemm_cpu_plan_threads)
    return _plan_threads[0](0)


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


_KEEP = object()  # a launch setting left as it is


@contextlib.contextmanager
def cuda_launch_settings(max_cluster=_KEEP, small_tiles=_KEEP, wide_tiles=_KEEP,
                         split_tiles=_KEEP, uniform_args=_KEEP, programmatic_launch=_KEEP,
                         clustered_pdl=_KEEP, tma_loads=_KEEP, tma_persistent=_KEEP,
                         vec_stores=_KEEP, tma_split=_KEEP, tma_parts=_KEEP):
    """Within the block, plans run on "cuda" launch their phases with these
    settings, and the old ones come back after it (process-wide, not per
    thread). max_cluster: the most blocks of a thread-block cluster that share
    one task's reductions (1: never split; the backend's default is 8).
    small_tiles: phases of 64-row tiles on the entry point that fits two blocks
    per SM always (True), never (False) or where the backend's choice says
    (None, the default). wide_tiles: phases with C blocks over 128 columns (and
    64 rows) on 128 x 256 tiles (True, the default) or on 128 x 128 ones
    (False). split_tiles: phases of few one-call tasks on the small-problem
    path as its model chooses (None, the default), never (False), or forced
    to (tile rows, tile columns, cluster size, entry point) wherever it
    applies. uniform_args: a uniform phase's kernel index in the launch
    argument (True, the default). programmatic_launch: launches on device
    tensors may start while the stream's previous kernel ends (True, the
    default); clustered_pdl: so may launches in clusters (True, the default;
    False: single blocks only). tma_loads: uniform phases read their operands
    through tensor maps (the bulk tensor copy engine, a producer warp) where
    they qualify (True, the default, unless BRGEMM_CUDA_TMA=0; False:
    cp.async); tma_parts: launches that deal each task's tiles out over several
    blocks too (True, the default; False: those keep cp.async, and the
    small-problem path chooses by its cp.async model); tma_persistent: those launch at most
    one round of blocks, each taking several parts in turn (True, the
    default); tma_split: clustered launches take it too (True, the default,
    unless BRGEMM_CUDA_TMA_SPLIT=0). vec_stores: the TMA entries' epilogue
    stores several elements a thread for bf16 C and for f32 C with ops too
    (True, the default, unless BRGEMM_CUDA_VEC_STORES=0).
    A BackendUnavailable where CUDA does not run here."""
    if max_cluster is not _KEEP and (isinstance(max_cluster, bool)
                                     or not isinstance(max_cluster, int) or max_cluster < 1):
        raise ValueError(f"max_cluster: expected a positive int, got {max_cluster!r}")
    if small_tiles is not _KEEP and small_tiles is not None and not isinstance(small_tiles, bool):
        raise ValueError(f"small_tiles: expected True, False or None, got {small_tiles!r}")
    flags = (("wide_tiles", wide_tiles), ("uniform_args", uniform_args),
             ("programmatic_launch", programmatic_launch), ("clustered_pdl", clustered_pdl),
             ("tma_loads", tma_loads), ("tma_persistent", tma_persistent),
             ("vec_stores", vec_stores), ("tma_split", tma_split), ("tma_parts", tma_parts))
    for name, v in flags:
        if v is not _KEEP and not isinstance(v, bool):
            raise ValueError(f"{name}: expected True or False, got {v!r}")
    if split_tiles is not _KEEP and split_tiles not in (None, False) and not (
            isinstance(split_tiles, tuple) and len(split_tiles) == 4
            and split_tiles[0] in (64, 128) and split_tiles[1] in (64, 128)
            and isinstance(split_tiles[2], int) and 1 <= split_tiles[2] <= 8
            and split_tiles[3] in ("tc", "tc_small", "tc_split")):
        raise ValueError(f"split_tiles: expected None, False or (rows, columns, cluster, entry) "
                         f"with rows and columns 64 or 128, cluster 1-8, entry tc, tc_small or "
                         f"tc_split, got {split_tiles!r}")
    cuda = get("cuda")
    new = {k: v for k, v in (("max_cluster", max_cluster), ("small_tiles", small_tiles),
                             ("split_tiles", split_tiles)) + flags if v is not _KEEP}
    old = {k: getattr(cuda, k) for k in new}
    for k, v in new.items():
        setattr(cuda, k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            setattr(cuda, k, v)


def cuda_launches(plan):
    """(tasks, entry point, cluster size) of each phase of `plan` as the CUDA
    backend launches it now (tensors 16-byte aligned, as device tensors are;
    the settings of cuda_launch_settings). Uploads the plan's tables on its
    first use on "cuda", as a run does."""
    if not isinstance(plan, Plan):
        raise TypeError(f"plan: expected a brgemm.plan.Plan, got {type(plan).__name__}")
    tables = plan.replay("cuda").tables
    return [(tables.phase_begin[i + 1] - tables.phase_begin[i], entry, cluster)
            for i, (entry, cluster) in enumerate(tables.launches(True))]


def cuda_max_clusters(entry: str, size: int) -> int:
    """How many clusters of `size` blocks of the CUDA entry point `entry`
    ("tc_split", "tc_small", ...) the GPU holds at once (0: they cannot launch)."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"size: expected a positive int, got {size!r}")
    dev = get("cuda").device()
    if entry not in dev.entry:
        raise ValueError(f"entry: expected one of {', '.join(sorted(dev.entry))}, got {entry!r}")
    return dev.max_clusters(entry, size)


def point_opencl_loader():
    """Point the OpenCL ICD loader at the SYCL CPU device before a library that
    loads libsycl (e.g. oneDNN's SYCL build) does."""
    from brgemm.backend.opencl_icd import point_icd_loader
    return point_icd_loader()
