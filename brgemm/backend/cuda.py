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

Device choice: BRGEMM_CUDA_DEVICE (an ordinal), else 0. The launch settings
below: brgemm.machine.cuda_launch_settings, per block of code.
"""
import ctypes
import os

import numpy as np

from brgemm.backend._device_replay import DeviceReplay
from brgemm.backend._cuda_arrays import DeviceArray, _adopt, from_dlpack, to_device  # noqa: F401
from brgemm.backend._cuda_small import Launch, small_path
from brgemm.backend._cuda_tma import TMA_ENTRY, Maps, phase_operands, tile_rows
from brgemm.backend._cuda_driver import DTYPE_CODE, _Allocation, _copy_in, _copy_out, _upload, \
    bound, device, stream, synchronize  # noqa: F401
from brgemm.dtypes import ITEMSIZE

launches = 0             # kernel launches made so far (tests count them)


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


# ---------------------------------------------------------------- tables


# the plan's call and op records: NumPy views of brgemm_plan_call / brgemm_plan_op
from brgemm.constants import CALL_RECORD as _CALL_DTYPE, DEVICE_OPS  # noqa: E402
from brgemm.constants import OP_RECORD as _OP_DTYPE  # noqa: E402


class _Tables:
    """A plan's tables on the device, and the launches of its phases."""

    def __init__(self, blocks, calls, a_offs, b_offs, ops, task_begin, phase_begin, extents=None):
        dev = device()
        ffi = dev.ffi
        desc = ffi.new("brgemm_cuda_block[]", max(len(blocks), 1))
        for i, b in enumerate(blocks):
            d = desc[i]
            d.m, d.n, d.k, d.lda, d.ldb, d.ldc = b.m, b.n, b.k, b.lda, b.ldb, b.ldc
            d.dtype_ab, d.dtype_c = DTYPE_CODE[b.dtype], DTYPE_CODE[b.c_dtype]
            d.alpha, d.beta = b.alpha, b.beta
            d.b_vnni = int(getattr(b, "b_vnni", False))
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
        self.phases = _phase_shapes(blocks, calls, paths, task_begin, self.phase_begin,
                                    dev.cu.BRGEMM_CUDA_PATH_TC, dev.cu.BRGEMM_CUDA_PATH_MEM_OPS)
        # the TMA path's tensor views per phase (extents: elements per tensor slot)
        for ph, ops in zip(self.phases, phase_operands(
                blocks, calls, a_offs, b_offs, self.phase_begin, extents,
                [ph["kernel"] if ph["all_tc"] else None for ph in self.phases])):
            ph["tma"] = ops
        self._maps = Maps(dev)
        self._launches = {}  # (allow_tc, settings) -> [Launch] per phase
        self.args = ffi.new("brgemm_cuda_phase_args *")
        for name, buf in self._bufs.items():
            setattr(self.args, name, buf.address)
        self.params = ffi.new("void *[1]", [self.args])
        self.params_tma = ffi.new("void *[2]", [self.args, ffi.NULL])

    def launch_details(self, allow_tc):
        """How every phase launches (a Launch each), as the settings say now."""
        key = (allow_tc, max_cluster, small_tiles, wide_tiles, split_tiles, uniform_args,
               tma_loads, tma_persistent, tma_split, tma_parts)
        if key not in self._launches:
            self._launches[key] = [_launch_shape(ph, allow_tc) for ph in self.phases]
        return self._launches[key]

    def launches(self, allow_tc):
        """(entry point, cluster size) of every phase, as the settings say now."""
        return [(ln.entry, ln.cluster) for ln in self.launch_details(allow_tc)]

    def run(self, addresses, s, programmatic=False):
        """Launch every phase on tensors at these device addresses, in order, on
        stream s; programmatic: the stream's previous work is a kernel, if any
        (not a copy), and each launch may start before it ends."""
        global launches
        dev = device()
        if len(addresses) > dev.cu.BRGEMM_CUDA_MAX_TENSORS:
            raise ValueError(f"tensors: a plan on CUDA binds at most "
                             f"{dev.cu.BRGEMM_CUDA_MAX_TENSORS}, "
                             f"this one {len(addresses)}")
        for i, a in enumerate(addresses):
            self.args.tensors[i] = a
        allow_tc = all(a % 16 == 0 for a in addresses)
        self.args.allow_tc = int(allow_tc)
        self.args.vec_stores = int(vec_stores)
        for p, ln in enumerate(self.launch_details(allow_tc)):
            n_tasks = self.phase_begin[p + 1] - self.phase_begin[p]
            if n_tasks == 0:
                continue
            a = self.args
            a.task0, a.parts, a.tile_m, a.tile_n = self.phase_begin[p], ln.parts, *ln.tile
            kernel = self.phases[p]["kernel"]
            a.uniform = int(kernel is not None and uniform_args)
            a.kernel = kernel if a.uniform else 0
            a.tasks, params, blocks = n_tasks, self.params, n_tasks * ln.parts * ln.cluster
            if ln.entry.endswith("_tma"):  # the uniform phase's kernel and its tensor maps
                a.uniform, a.kernel, params = 1, kernel, self.params_tma
                rows = tile_rows(ln.entry, self.phases[p]["m"], ln.tile)
                self.params_tma[1] = self._maps.get(self.phases[p]["tma"], addresses, rows)
                if tma_persistent and ln.cluster == 1:  # one round of blocks, several parts each
                    blocks = min(blocks, dev.sm_count * dev.blocks_per_sm(ln.entry))
            try:
                dev.launch(ln.entry, blocks, ln.cluster, params, s,
                           programmatic and programmatic_launch and ln.entry != "tc_wide"
                           and (ln.cluster == 1 or clustered_pdl))
            except Exception as e:
                raise type(e)(f"phase {p}: {e}") from None
            launches += 1


# How phases launch; benchmarks/gpu.py varies these to show what each is worth.
max_cluster = 8      # most blocks that share one task's reductions (1: never split)
# phases of 64-row tensor-core tiles on the two-blocks-per-SM entry point
# (fewer stages): None where that measured faster (split reductions, or more
# tasks than SMs), True always, False never
small_tiles = None
# phases with C blocks over 128 columns (and over 64 rows) on 128 x 256 tiles
# where their reductions are not split (False: 128 x 128 tiles, as before)
wide_tiles = True

# Phases whose one-call tasks leave SMs idle on tiles of up to 128 x 128 deal
# each task's tiles out over several blocks, on smaller tiles where that uses
# more SMs (the "small-problem path"): None where the phase leaves SMs idle,
# False never; or (tile rows, tile columns, cluster size, entry) forced for
# every phase that qualifies (benchmarks/gpu.py compares them).
split_tiles = None
# runs on device tensors launch with programmatic dependent launch (each may
# start while the stream's previous kernel ends; the kernel waits before
# touching tensors); never on the 128 x 256 entry (the GEMM was slower)
programmatic_launch = True
# uniform phases pass their kernel index in the launch argument (two table reads less)
uniform_args = True
# programmatic launch for clustered launches too (benchmarks/RESULTS.md)
clustered_pdl = True
# uniform phases whose operands tensor maps can describe (_cuda_tma.py) read
# them with the bulk tensor copy engine, a producer warp and mbarrier stages
# (entries *_tma); BRGEMM_CUDA_TMA=0 turns it off
tma_loads = os.environ.get("BRGEMM_CUDA_TMA", "1") != "0"
# with tma_loads: launches that deal a task's tiles over blocks too (False: not)
tma_parts = True
# with tma_loads: unclustered launches as one round of blocks, each taking
# several parts in turn (as fast or faster on every FC pass measured)
tma_persistent = True
# with tma_loads: clustered (split) launches too (BRGEMM_CUDA_TMA_SPLIT=0: not)
tma_split = os.environ.get("BRGEMM_CUDA_TMA_SPLIT", "1") != "0"
# TMA entries: bf16 C and f32 C with register ops stored several elements a
# thread (as f32 C without ops always is); BRGEMM_CUDA_VEC_STORES=0: not
vec_stores = os.environ.get("BRGEMM_CUDA_VEC_STORES", "1") != "0"

# The split cost model, in k-steps of one tile: a tile pays its pipeline fill
# and epilogue once, and one more for the sum over the cluster when split.
_TILE_STEPS, _SPLIT_STEPS = 3, 1


def _phase_shapes(blocks, calls, paths, task_begin, phase_begin, tc_bit, mem_bit):
    """What the launch choice needs of each phase: its task count, whether it
    has tensor-core calls, whether all of them are (and none has memory ops),
    whether their tiles are all 64 rows, whether some would fill 128 x 256
    tiles, its heaviest task's k-steps and tiles (of up to 128 x 128), and
    where task t is call t alone and every call has one kernel shape, that
    shape's index and its m and n (kernel: None otherwise)."""
    task_begin = np.asarray(task_begin, np.int64)
    if len(calls):
        m = np.array([b.m for b in blocks], np.int64)[calls["kernel"]]
        n = np.array([b.n for b in blocks], np.int64)[calls["kernel"]]
        k = np.array([b.k for b in blocks], np.int64)[calls["kernel"]]
        rows = np.where(m > 64, 128, 64)
        tiles = -(-m // rows) * -(-n // np.where(n > 64, 128, 64))
        steps = tiles * calls["count"].astype(np.int64) * -(-k // 64)
    else:
        m = n = tiles = steps = np.zeros(0, np.int64)
    tc = (paths & tc_bit) != 0
    plain_tc = tc & ((paths & mem_bit) == 0)
    sums = {name: np.concatenate([[0], np.cumsum(v)]) for name, v in
            (("tc", tc), ("plain", plain_tc), ("wide", tc & (m > 64)),
             ("broad", tc & (m > 64) & (n > 128)), ("tiles", tiles), ("steps", steps))}
    out = []
    for p in range(len(phase_begin) - 1):
        t0, t1 = phase_begin[p], phase_begin[p + 1]
        c0, c1 = task_begin[t0], task_begin[t1]

        def per_task(name):
            v = sums[name][task_begin[t0:t1 + 1]]
            return int(np.max(np.diff(v))) if t1 > t0 else 0
        n_calls = int(c1 - c0)
        kernel = None
        if t1 > t0 and np.array_equal(task_begin[t0:t1 + 1], np.arange(t0, t1 + 1)):
            ks = calls["kernel"][c0:c1]
            kernel = int(ks[0]) if np.all(ks == ks[0]) else None
        out.append(dict(kernel=kernel, m=int(m[c0]) if kernel is not None else 0,
                        n=int(n[c0]) if kernel is not None else 0,
                        tasks=int(t1 - t0), tc=bool(sums["tc"][c1] > sums["tc"][c0]),
                        all_tc=bool(sums["plain"][c1] - sums["plain"][c0] == n_calls),
                        wide=bool(sums["wide"][c1] > sums["wide"][c0]),
                        broad=bool(sums["broad"][c1] > sums["broad"][c0]),
                        steps=per_task("steps"), tiles=per_task("tiles")))
    return out


def _launch_shape(phase, allow_tc):
    """The Launch of one phase: the small-problem path's where it applies."""
    tma = TMA_ENTRY if tma_loads and phase.get("tma") and tma_parts and tma_split else None
    ln = small_path(phase, allow_tc, device(), split_tiles, max_cluster, tma)  # TMA: its model
    if ln is None:
        entry, size = _entry_and_cluster(phase, allow_tc)
        ln = Launch("tc_split" if entry == "tc" and size > 1 else entry, size, 1, (128, 128))
    entry = TMA_ENTRY.get((ln.entry, ln.cluster > 1))
    if tma_loads and phase.get("tma") and entry and (ln.parts == 1 or tma_parts) and (
            ln.cluster == 1 or tma_split):
        ln = ln._replace(entry=entry)
    return ln


def _entry_and_cluster(phase, allow_tc):
    """The entry point by the phase's paths and tiles, and the cluster size. A
    cluster shares each tile's k-steps among its blocks: worth it when the
    phase's tasks leave SMs idle and their reductions are long enough to pay
    for the sum, and only where the whole grid fits the GPU at once."""
    dev = device()
    if not (phase["tc"] and dev.has_tc and allow_tc):
        return "generic", 1
    if phase["wide"] or small_tiles is False:
        entry, size = _cluster("tc", phase)
        if size == 1 and phase["broad"] and wide_tiles:
            return "tc_wide", 1
        return entry, size
    entry, size = _cluster("tc_small", phase)
    if small_tiles is None and size == 1 and phase["tasks"] <= dev.sm_count:
        return "tc", 1  # one block per SM anyway: the deeper pipeline wins
    return entry, size


def _cluster(entry, phase):
    """(entry, cluster size) by the split cost model."""
    dev = device()
    if not phase["all_tc"] or max_cluster <= 1:
        return entry, 1
    tasks, steps, tiles = phase["tasks"], phase["steps"], phase["tiles"]
    best, best_cost = 1, -(-tasks // dev.sm_count) * (steps + tiles * _TILE_STEPS)
    for size in range(2, max_cluster + 1):
        if tasks > dev.max_clusters("tc_split" if entry == "tc" else entry, size):
            continue
        # blocks beyond one per SM share SMs: each counts as another round
        cost = -(-tasks * size // dev.sm_count) * (
            -(-steps // size) + tiles * (_TILE_STEPS + _SPLIT_STEPS))
        if cost < best_cost:
            best, best_cost = size, cost
    return entry, best


def _nonempty(x, dtype):
    x = np.ascontiguousarray(x, dtype)
    return x if x.size else np.zeros(1, dtype)


def _call_paths(blocks, calls, a_offs, b_offs, ops):
    """BRGEMM_CUDA_PATH_* bits per call: the tensor-core path where its block is
    bf16 (B not in VNNI pairs) with k, n, lda, ldb multiples of 8 and every A/B byte offset a multiple
    of 16 (16-byte copies); memory-order ops where it has an LSTM op."""
    dev = device()
    tc, mem_ops = dev.cu.BRGEMM_CUDA_PATH_TC, dev.cu.BRGEMM_CUDA_PATH_MEM_OPS
    if len(calls) == 0:
        return np.zeros(0, np.uint8)
    block_ok = np.array([b.dtype == "bf16" and not getattr(b, "b_vnni", False)
                         and not (b.k % 8 or b.n % 8 or b.lda % 8 or b.ldb % 8) for b in blocks],
                        bool)
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
        self.item = ITEMSIZE[dtype_ab]
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
        synchronize(s)

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


class PlanReplay(DeviceReplay):
    """A recorded brgemm.plan.Plan on the GPU: its tables uploaded once, one
    launch per phase on every run."""

    device_array = DeviceArray  # Plan.run accepts these in place of NumPy arrays

    def __init__(self, plan):
        plan.require("cuda", max_op=DEVICE_OPS, b_vnni=True)
        super().__init__(plan)
        self.tables = _Tables(plan.blocks, plan.calls, *plan.byte_offsets(), plan.ops,
                              plan.task_begin, plan.phase_begin,
                              [plan.extent[name] for name in plan.tensors])

    def adopt(self, arrays):
        """Device tensors of other libraries (DLPack) as DeviceArray views."""
        return {name: _adopt(x, name) for name, x in arrays.items()}

    allocate = staticmethod(lambda nbytes: _Allocation(nbytes))

    def begin(self):
        bound()
        self._copied = False
        return stream()

    def copy_in(self, buf, x, s):
        _copy_in(buf.address, x, s)
        self._copied = True

    def launch(self, addresses, s):
        # after a copy the launch waits for the stream as usual
        self.tables.run(addresses, s, programmatic=not self._copied)

    def copy_out(self, x, buf, s):
        _copy_out(x, buf.address, s)

    def finish(self, s, staged):
        """Wait where NumPy arguments were copied (runs on device tensors do
        not wait, like PyTorch's own ops)."""
        if staged:
            synchronize(s)
