"""Plans: a loop nest recorded once, replayed natively.

A primitive's loop nest is a plain Python function of an executor `ex`:

    def gemm(ex, nest, M, N, K, bm, bn):            # C[M,N] = A[M,K] @ B[K,N]
        for phase, task, idx in nest.walk():
            i, j = idx["i"], idx["j"]
            m, n = min(bm, M - i), min(bn, N - j)
            ex.at(phase, task)
            ex.gemm(Block(m, n, K, lda=K, ldb=N, ldc=N, beta=0.0),
                    "A", [i * K], "B", [j], "C", i * N + j)

Run it with `Eager(A=..., B=..., C=...)` and every call happens at once through
brgemm.Kernel (step through it in a debugger); run it with `Recorder(...)` and
every call becomes a row of a Plan, which `plan.run(A=..., B=..., C=...)`
replays natively: phases in order, the tasks of a phase spread over threads
(or a device's work-groups), the calls of a task in order. Tensors are named
flat buffers; offsets are in elements. Epilogue ops (bias, activations, bf16
stores) are data attached to a call and applied to its C block right after it;
copy_b, copy_bt and copy_taps ops, first among a call's ops, fill its B blocks right before it,
copy_at its A rows.

A Plan is data, the same for every backend, checked once when it is recorded
(brgemm.recorder: names, dtypes, offsets; brgemm.races: no two parallel tasks
touch what the other writes). Its tables:

    tensors      name -> dtype ("f32"/"bf16"), in slot order; extent: elements
                 each must hold; written: the names the plan writes
    blocks       one brgemm.block.Block per distinct kernel shape
    calls        CALL_RECORD rows (kernels/cpu/brgemm_plan_call): kernel (index
                 into blocks), a, b, c (tensor slots), c_off (elements), count,
                 offs (first index into a_offs/b_offs), op_begin, op_count
    a_offs, b_offs  int64 element offsets of each call's A and B blocks
    ops          OP_RECORD rows (brgemm_plan_op): code (constants.OP_CODES),
                 tensor slots (-1 unused), element offsets, ld, stride
    task_begin   calls of task t: task_begin[t] .. task_begin[t+1]
    phase_begin  tasks of phase p: phase_begin[p] .. phase_begin[p+1]

Each backend replays it through one small interface (brgemm/backend/__init__.py
says it): `PlanReplay(plan)`, made on the plan's first run on that backend and
kept by the plan, with `run(arrays, threads)`; the CPU's JITs libxsmm kernels
and byte tables, the devices' upload their tables once.
"""
from __future__ import annotations

import threading

import numpy as np

from brgemm import dtypes
from brgemm.backend import get as get_backend
from brgemm.backend import resolve as resolve_backend
from brgemm.block import Block
from brgemm.constants import CALL_RECORD, OP_CODES, OP_RECORD, OPERANDS
from brgemm.eager import Eager
from brgemm.epilogue import (Op, act_grad, bias, bias_rows, col_sum, copy_at, copy_b, copy_bt,
                             copy_rows, copy_taps, lstm_cell, lstm_cell_bwd, relu, sigmoid,
                             store_bf16, store_t, tanh, tap_stride)
from brgemm.lru import LRU
from brgemm.races import check_races
from brgemm.recorder import Recorder, TensorSpec

__all__ = ["Block", "Op", "Eager", "Recorder", "TensorSpec", "Plan", "PlanCache", "bias", "relu",
           "sigmoid", "tanh", "store_bf16", "lstm_cell", "lstm_cell_bwd", "act_grad", "store_t",
           "bias_rows", "col_sum", "copy_rows", "copy_b", "copy_bt", "copy_taps", "copy_at",
           "tap_stride"]

_CALL, _OP = CALL_RECORD, OP_RECORD  # brgemm_plan_call, brgemm_plan_op as NumPy records


def _offsets(values, name):
    """A plan's element offsets as int64: integers only (a float is no offset)."""
    table = np.array(values)
    if table.size and table.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected integer element offsets, got {table.dtype} values")
    return table.astype(np.int64)


class Plan:
    """A recorded loop nest (see the module docstring for its tables).
    run(**arrays) binds buffers and replays it on a backend."""

    def __init__(self, rec: Recorder):
        check_races(rec)
        self.tensors = dict(rec.tensors)
        self.slots = {name: i for i, name in enumerate(self.tensors)}
        self.extent = dict(rec.extent)
        self.written = frozenset(rec.written)
        self.blocks = sorted(rec.blocks, key=rec.blocks.get)
        calls, a_offs, b_offs, ops, task_begin, phase_begin = [], [], [], [], [0], [0]
        for tasks in rec.phases.values():
            for task_calls in tasks.values():
                for kid, a, b, c, c_off, ao, bo, call_ops in task_calls:
                    calls.append((kid, self.slots[a], self.slots[b], self.slots[c], c_off,
                                  len(ao), len(a_offs), len(ops), len(call_ops)))
                    a_offs += ao
                    b_offs += bo
                    ops += [self._op_row(o) for o in call_ops]
                task_begin.append(len(calls))
            phase_begin.append(len(task_begin) - 1)
        self.calls = np.array(calls, _CALL)
        self.a_offs, self.b_offs = _offsets(a_offs, "a_offs"), _offsets(b_offs, "b_offs")
        self.ops = np.array(ops, _OP)
        self.task_begin = np.array(task_begin, np.int64)
        self.phase_begin = np.array(phase_begin, np.int64)
        for table in (self.calls, self.a_offs, self.b_offs, self.ops, self.task_begin,
                      self.phase_begin):
            table.flags.writeable = False  # checked once, here: from now on it is fixed
        self._replays = {}  # backend name -> its PlanReplay, made on first use
        self._replay_lock = threading.Lock()

    def _op_row(self, op):
        pad = OPERANDS - len(op.tensors)
        return (OP_CODES[op.code], tuple(self.slots[t] for t in op.tensors) + (-1,) * pad,
                tuple(op.offsets) + (0,) * (OPERANDS - len(op.offsets)), op.ld, op.stride)

    # -- what backends read --
    def byte_offsets(self):
        """a_offs, b_offs in bytes (uint64), for backends whose kernels take
        byte offsets (libxsmm, the CUDA kernel)."""
        item = np.array([dtypes.ITEMSIZE[b.dtype] for b in self.blocks], np.int64)
        per = np.repeat(item[self.calls["kernel"]], self.calls["count"]) if len(self.calls) \
            else np.zeros(0, np.int64)
        return (self.a_offs * per).astype(np.uint64), (self.b_offs * per).astype(np.uint64)

    def require(self, backend, max_op, b_vnni, a_t=False):
        """Raise ValueError, naming `backend`, if this plan uses an epilogue op
        above code max_op, (b_vnni False) B tiles in VNNI pairs or (a_t False)
        transposed A blocks: what a backend calls when its replay is made."""
        if len(self.ops) and self.ops["code"].max() > max_op:
            code = {v: k for k, v in OP_CODES.items()}[int(self.ops["code"].max())]
            raise ValueError(f"backend: the {backend!r} backend has no {code!r} epilogue; "
                             f"run this plan on 'cpu'")
        if not b_vnni and any(b.b_vnni for b in self.blocks):
            raise ValueError(f"backend: this plan reads B tiles as VNNI pairs (the layout "
                             f"AMX CPUs take); the {backend!r} backend reads plain tiles")
        if not a_t and any(b.a_t for b in self.blocks):
            raise ValueError(f"backend: this plan reads A blocks transposed (the CPU's "
                             f"kernel does); the {backend!r} backend reads them in rows")

    def replay(self, backend=None):
        """The backend's replay of this plan, made on first use and kept."""
        replay = self._replays.get(backend)  # a name that resolved before (None never is)
        if replay is not None:
            return replay
        name = resolve_backend(backend)
        replay = self._replays.get(name)
        if replay is None:
            with self._replay_lock:
                replay = self._replays.get(name)
                if replay is None:
                    replay = self._replays[name] = get_backend(name).PlanReplay(self)
        return replay

    @property
    def replayed_on(self):
        """The backends this plan has a replay on (made on a first run there)."""
        return sorted(self._replays)

    @property
    def kernels(self):
        """The CPU's libxsmm kernels, one per block (JIT-compiled on first use)."""
        return self.replay("cpu").kernels

    @property
    def paths(self):
        return sorted({k.path for k in self.kernels})

    # -- binding and running --
    def check(self, arrays, device_type=None):
        """The one check of a run's arguments: every tensor present, of the
        right dtype and size, flat, writable where written, and no written
        tensor overlapping another. device_type: the backend's device-resident
        array class (with .address and .nbytes), accepted in place of NumPy."""
        missing = set(self.tensors) - set(arrays)
        if missing:
            raise ValueError(f"{sorted(missing)[0]}: the plan needs it (tensors: "
                             f"{', '.join(self.tensors)})")
        extra = set(arrays) - set(self.tensors)
        if extra:
            raise ValueError(f"{sorted(extra)[0]}: not a tensor of this plan "
                             f"(tensors: {', '.join(self.tensors)})")
        for name, want in self.tensors.items():
            _check_tensor(name, arrays[name], want, self.extent[name], name in self.written,
                          device_type)
        for w in self.written:
            for name in self.tensors:
                if name != w and _overlap(arrays[w], arrays[name]):
                    raise ValueError(f"{w}: overlaps {name}; the plan writes {w}")

    def run(self, threads=None, backend=None, **arrays):
        """Replay on `backend` (default: BRGEMM_BACKEND, else "cpu"). On the CPU,
        with `threads` OpenMP threads (default: OMP_NUM_THREADS, else all cores);
        elsewhere the device schedules the tasks and `threads` must be None."""
        replay = self._replays.get(backend) or self.replay(backend)
        if threads is not None and not replay.takes_threads:
            raise ValueError(f"threads: the {resolve_backend(backend)!r} backend schedules its "
                             f"own work; pass threads=None")
        adopt = getattr(replay, "adopt", None)  # other libraries' device tensors (DLPack)
        if adopt is not None:
            arrays = adopt(arrays)
        checked = getattr(replay, "run_checked", None)  # this check natively, and the run
        if checked is not None and checked(arrays, threads):
            return None
        self.check(arrays, replay.device_array)
        return replay.run(arrays, threads)

    def time_bare(self, reps=1, **arrays):
        """Seconds for `reps` passes over the calls from a plain C loop, one thread,
        no epilogues (copy_b and copy_bt ops still fill the blocks their calls read): what the
        kernel calls alone cost (benchmarks compare run() to it)."""
        self.check(arrays)
        return self.replay("cpu").time_bare(arrays, reps)

    # -- inspection --
    @property
    def flops(self):
        return sum(self.blocks[c["kernel"]].flops * int(c["count"]) for c in self.calls)

    def summary(self, threads=None) -> str:
        """Calls, phases, FLOPs, bytes the kernel calls touch, and how the static
        schedule spreads FLOPs over `threads` threads (1.00 = perfectly even)."""
        nthreads = get_backend("cpu").plan_threads(threads)
        flops = np.array([self.blocks[c["kernel"]].flops * int(c["count"]) for c in self.calls],
                         dtype=np.float64)
        nbytes = 0
        for c in self.calls:
            b = self.blocks[c["kernel"]]
            item = dtypes.ITEMSIZE[b.dtype]
            nbytes += int(c["count"]) * (b.m * b.k + b.k * b.n) * item
            nbytes += b.m * b.n * dtypes.ITEMSIZE[b.c_dtype]
        per_thread = np.zeros(nthreads)
        task_flops = np.add.reduceat(flops, self.task_begin[:-1]) if len(flops) else np.zeros(0)
        task_flops[np.diff(self.task_begin) == 0] = 0  # reduceat quirk on empty tasks
        for p in range(len(self.phase_begin) - 1):
            t0, t1 = self.phase_begin[p], self.phase_begin[p + 1]
            # GNU OpenMP's static schedule: contiguous chunks, the first ones one longer
            q, r = divmod(int(t1 - t0), nthreads)
            start = t0
            for th in range(nthreads):
                size = q + (th < r)
                per_thread[th] += task_flops[start:start + size].sum()
                start += size
        balance = per_thread.max() / per_thread.mean() if per_thread.sum() else 1.0
        lines = [
            f"plan: {len(self.calls)} calls in {len(self.task_begin) - 1} tasks, "
            f"{len(self.phase_begin) - 1} phases; {len(self.kernels)} kernels "
            f"({', '.join(self.paths) or '-'})",
            f"  {self.flops / 1e9:.3f} GFLOP, {nbytes / 1e6:.1f} MB read+written by kernel calls, "
            f"{len(self.ops)} epilogue ops",
            f"  {nthreads} threads: GFLOP per thread "
            + " ".join(f"{x / 1e9:.3f}" for x in per_thread)
            + f"; max/mean {balance:.2f}",
        ]
        return "\n".join(lines)

    def __repr__(self):
        return self.summary()


def _check_tensor(name, x, want, extent, written, device_type):
    resident = device_type is not None and isinstance(x, device_type)
    if not resident and not isinstance(x, np.ndarray):
        where = f" or {device_type.__name__}" if device_type is not None else ""
        raise TypeError(f"{name}: expected a numpy.ndarray{where}, got {type(x).__name__}")
    if x.dtype != dtypes.NUMPY[want]:
        raise TypeError(f"{name}: expected dtype {want} ({dtypes.NUMPY[want]}), got {x.dtype}")
    if x.size < extent:
        raise ValueError(f"{name}: the plan touches {extent} elements, the array has {x.size}")
    if resident:
        return
    if not x.flags.c_contiguous:
        raise ValueError(f"{name}: a plan reads tensors as flat buffers; pass "
                         f"np.ascontiguousarray({name})")
    if written and not x.flags.writeable:
        raise ValueError(f"{name}: is read-only; the plan writes it")


def _overlap(a, b):
    """Whether two bound tensors share memory: NumPy's exact test for arrays,
    byte ranges for device arrays (address, nbytes), never for one of each."""
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return np.may_share_memory(a, b) and np.shares_memory(a, b, max_work=10**5)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return False
    if a is b:
        return True
    return bool(a.nbytes and b.nbytes and a.address < b.address + b.nbytes
                and b.address < a.address + a.nbytes)


# ---------------------------------------------------------------- cache


class PlanCache:
    """Plans by key (shape, dtype, config, backend): recorded once, reused; the
    least recently used go when more than `maxsize` are kept (brgemm/lru.py)."""

    def __init__(self, maxsize=64):
        self._plans = LRU(maxsize)
        self.maxsize = maxsize

    def get(self, key, record):
        return self._plans.get_or_make(key, record)

    def __len__(self):
        return len(self._plans)
