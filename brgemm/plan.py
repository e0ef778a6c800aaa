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
replays from C with OpenMP: phases in order, the tasks of a phase spread over
threads, the calls of a task in order. Tensors are named flat buffers; offsets
are in elements. Epilogue ops (bias, activations, bf16 stores) are data
attached to a call and applied to its C block right after it.
"""
# Over 450 lines on purpose, for now: Recorder, Plan and their checks share the
# private record layouts (_CALL, _OP) and the validation of calls; split apart
# they would reach into each other. Issue 15's backend-neutral plan (a Plan as
# data, each backend's replay object in its own file) is where this file splits.
from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from brgemm import dtypes
from brgemm.constants import CALL_RECORD, DEVICE_OPS, OP_CODES, OP_RECORD, OPERANDS
from brgemm.backend import get as get_backend
from brgemm.backend import resolve as resolve_backend
from brgemm.kernel import SPAN, Kernel, _dim, _scalar
from brgemm.lru import LRU
from brgemm.vnni import unpack_block

# ---------------------------------------------------------------- descriptions


@dataclass(frozen=True)
class Block:
    """One kernel shape: C[m,n] (row stride ldc) op= sum of count A[m,k] @ B[k,n]."""
    m: int
    n: int
    k: int
    lda: int
    ldb: int
    ldc: int
    dtype: str = "f32"      # of A and B
    c_dtype: str = "f32"
    beta: float = 1.0
    alpha: float = 1.0
    b_vnni: bool = False    # B tiles in VNNI pairs (brgemm.vnni), offsets at a block's first pair

    def __post_init__(self):
        """The checks a Kernel makes of the same values (the plan's kernels are
        made without one), and one normal form: a stride that steps over a
        single row is irrelevant, so it is the row's length (fewer distinct
        JIT kernels, and no huge strides that only look large)."""
        for name in ("m", "n", "k"):
            object.__setattr__(self, name, _dim(getattr(self, name), name))
        if self.m == 1:
            object.__setattr__(self, "lda", self.k)
            object.__setattr__(self, "ldc", self.n)
        if self.k == 1:
            object.__setattr__(self, "ldb", self.n)
        for name in ("lda", "ldb", "ldc"):
            object.__setattr__(self, name, _dim(getattr(self, name), name))
        dtypes.check_name(self.dtype)
        if self.c_dtype not in ("f32", "bf16") or (self.dtype == "f32" and self.c_dtype != "f32"):
            raise ValueError(f"c_dtype: expected 'f32'{' or bf16' * (self.dtype == 'bf16')} "
                             f"for dtype {self.dtype!r}, got {self.c_dtype!r}")
        object.__setattr__(self, "beta", _scalar(self.beta, "beta"))
        object.__setattr__(self, "alpha", _scalar(self.alpha, "alpha"))
        ab, c = dtypes.NUMPY[self.dtype].itemsize, dtypes.NUMPY[self.c_dtype].itemsize
        for name, rows, cols, item in (("lda", self.m, self.k, ab), ("ldb", self.k, self.n, ab),
                                       ("ldc", self.m, self.n, c)):
            ld = getattr(self, name)
            if ld < cols:
                raise ValueError(f"{name}: {ld} is less than the block's {cols} columns")
            if rows * ld * item > SPAN:
                raise ValueError(f"{name}: {rows} rows {ld} elements apart span more than "
                                 "2**31 - 1 bytes, the most the kernel addresses per block")

    @property
    def flops(self):
        return 2 * self.m * self.n * self.k


@dataclass(frozen=True)
class Op:
    """An epilogue op on a call's f32 C block; see the constructors below."""
    code: str                    # bias, relu, sigmoid, tanh, store_bf16, lstm_cell
    tensors: tuple = ()          # operand tensor names
    offsets: tuple = ()          # their element offsets
    ld: int = 0                  # row stride of 2-D operands
    stride: int = 0              # lstm_cell: elements between gate blocks


def bias(tensor, offset=0):
    """C[i, j] += tensor[offset + j]"""
    return Op("bias", (tensor,), (offset,))


def relu():
    return Op("relu")


def sigmoid():
    return Op("sigmoid")


def tanh():
    return Op("tanh")


def store_bf16(tensor, offset, ld):
    """tensor[offset + i*ld + j] = bf16(C[i, j]): a bf16 copy of an f32 result."""
    return Op("store_bf16", (tensor,), (offset,), ld)


def lstm_cell(gates, gates_offset, stride, c_prev, c_prev_offset, c, c_offset, h, h_offset, ld,
              h16=None, h16_offset=0):
    """The LSTM cell on one block: gate pre-activations i, f, g, o at gates_offset
    + q * stride (row stride: the call's ldc); i, f, o = sigmoid, g = tanh
    (written back over the gates, for backward), c = f * c_prev + i * g,
    h = o * tanh(c); c_prev, c and h have row stride ld. All blocks are the
    call's m x n; attach it to the call that finishes the last gate. With h16,
    a bf16 copy of h goes there too (the next step's bf16 GEMM input)."""
    names, offs = (gates, c_prev, c, h), (gates_offset, c_prev_offset, c_offset, h_offset)
    if h16 is not None:
        names, offs = names + (h16,), offs + (h16_offset,)
    return Op("lstm_cell", names, offs, ld, stride)


def lstm_cell_bwd(dy, dy_offset, gates, gates_offset, stride, c, c_offset, c_prev_offset, dc,
                  dc_offset, dgates, dgates_offset, ld, dgates16=None):
    """The LSTM cell's derivatives on one block. The call's C block holds the dh
    that flows back from the next step; with dy it makes this step's dh. Reads
    the activated gates (i, f, g, o at gates_offset + q * stride), c_t and
    c_prev (both in tensor c), dc; writes the four pre-activation gradients at
    dgates_offset + q * stride and overwrites dc with the previous step's. With
    dgates16, bf16 copies of the gradients go there too, at the same offsets
    (the bf16 operands of the GEMMs that read them)."""
    names = (dy, gates, c, c, dc, dgates)
    offs = (dy_offset, gates_offset, c_offset, c_prev_offset, dc_offset, dgates_offset)
    if dgates16 is not None:
        names, offs = names + (dgates16,), offs + (dgates_offset,)
    return Op("lstm_cell_bwd", names, offs, ld, stride)


def act_grad(activation, tensor, offset, ld):
    """C[i, j] *= act'(y) from the activation's own output y = tensor[offset + i*ld + j]
    (f32): the gradient at a pre-activation from the gradient at its output."""
    if activation not in ("relu", "sigmoid", "tanh"):
        raise ValueError(f"activation: expected relu, sigmoid or tanh, got {activation!r}")
    return Op(activation + "_bwd", (tensor,), (offset,), ld)


def store_t(tensor, offset, ld, bf16=False):
    """tensor[offset + j*ld + i] = C[i, j] (rounded to bf16 with bf16): a transposed
    copy, for the operand a later batch reduction over C's rows reads."""
    return Op("store_t_bf16" if bf16 else "store_t", (tensor,), (offset,), ld)




# ---------------------------------------------------------------- eager


def _block_view(flat, offset, rows, cols, ld):
    if offset < 0 or offset + (rows - 1) * ld + cols > flat.size:
        raise ValueError(f"block at offset {offset} ({rows}x{cols}, row stride {ld}) "
                         f"runs past a buffer of {flat.size} elements")
    return np.lib.stride_tricks.as_strided(flat[offset:], (rows, cols), (ld * flat.itemsize,
                                                                        flat.itemsize))


class Eager:
    """Runs each call as the loop nest makes it: the reference and debugging path."""

    def __init__(self, backend=None, **arrays):
        self.backend = backend
        self.arrays = {name: a.reshape(-1) for name, a in arrays.items()}
        self._kernels = {}

    def at(self, phase, task):
        pass  # one thread, nest order: phases and tasks need no bookkeeping

    def gemm(self, blk: Block, a, a_offs, b, b_offs, c, c_off, ops=()):
        kern = self._kernels.get(blk)
        if kern is None:
            kern = self._kernels[blk] = Kernel(blk.m, blk.n, blk.k, dtype=blk.dtype, beta=blk.beta,
                                               alpha=blk.alpha, backend=self.backend,
                                               lda=blk.lda, ldb=blk.ldb)
        C = _block_view(self.arrays[c], c_off, blk.m, blk.n, blk.ldc)
        if blk.b_vnni:  # the plain blocks, through a kernel that reads them so
            B = np.stack([unpack_block(self.arrays[b], o, blk.k, blk.n, blk.ldb) for o in b_offs])
            kern = self._kernels.get((blk, "plain b"))
            if kern is None:
                kern = self._kernels[blk, "plain b"] = Kernel(
                    blk.m, blk.n, blk.k, dtype=blk.dtype, beta=blk.beta, alpha=blk.alpha,
                    backend=self.backend, lda=blk.lda, ldb=blk.n)
            kern.offs(self.arrays[a], B, a_offs, [i * blk.k * blk.n for i in range(len(B))], C)
        else:
            kern.offs(self.arrays[a], self.arrays[b], a_offs, b_offs, C)
        for op in ops:
            self._apply(op, C)

    def _apply(self, op, C):
        if op.code == "bias":
            C += self.arrays[op.tensors[0]][op.offsets[0]:op.offsets[0] + C.shape[1]]
        elif op.code == "relu":
            np.maximum(C, 0, out=C)
        elif op.code == "sigmoid":
            C[...] = 1 / (1 + np.exp(-C))
        elif op.code == "tanh":
            np.tanh(C, out=C)
        elif op.code == "store_bf16":
            dst = _block_view(self.arrays[op.tensors[0]], op.offsets[0], *C.shape, op.ld)
            dst[...] = C.astype(dtypes.bfloat16)
        elif op.code.endswith("_bwd") and op.code != "lstm_cell_bwd":
            y = _block_view(self.arrays[op.tensors[0]], op.offsets[0], *C.shape, op.ld)
            C *= {"relu_bwd": lambda: y > 0, "sigmoid_bwd": lambda: y * (1 - y),
                  "tanh_bwd": lambda: 1 - y * y}[op.code]()
        elif op.code in ("store_t", "store_t_bf16"):
            dst = _block_view(self.arrays[op.tensors[0]], op.offsets[0], C.shape[1], C.shape[0],
                              op.ld)
            dst[...] = C.T.astype(dtypes.bfloat16 if op.code == "store_t_bf16" else np.float32)
        elif op.code == "lstm_cell":
            ldc = C.strides[0] // C.itemsize
            view = lambda q, extra=0: _block_view(  # noqa: E731
                self.arrays[op.tensors[q]], op.offsets[q] + extra, *C.shape, ldc if q == 0 else op.ld)
            sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
            gi, gf, gg, go = (view(0, q * op.stride) for q in range(4))
            gi[...], gf[...], gg[...], go[...] = sig(gi), sig(gf), np.tanh(gg), sig(go)
            view(2)[...] = gf * view(1) + gi * gg
            view(3)[...] = go * np.tanh(view(2))
            if len(op.tensors) > 4:
                view(4)[...] = view(3).astype(dtypes.bfloat16)
        elif op.code == "lstm_cell_bwd":
            blk = lambda q, extra=0: _block_view(  # noqa: E731
                self.arrays[op.tensors[q]], op.offsets[q] + extra, *C.shape, op.ld)
            dh = C + blk(0)
            i, f, g, o = (blk(1, q * op.stride) for q in range(4))
            tc = np.tanh(blk(2))
            dc = blk(4) + dh * o * (1 - tc * tc)
            dgi, dgf, dgg, dgo = (blk(5, q * op.stride) for q in range(4))
            dgo[...] = dh * tc * o * (1 - o)
            dgi[...] = dc * g * i * (1 - i)
            dgg[...] = dc * i * (1 - g * g)
            dgf[...] = dc * blk(3) * f * (1 - f)
            blk(4)[...] = dc * f
            if len(op.tensors) > 6:
                for q in range(4):
                    blk(6, q * op.stride)[...] = blk(5, q * op.stride).astype(dtypes.bfloat16)
        else:
            raise ValueError(f"op: unknown code {op.code!r}")


# ---------------------------------------------------------------- recording


@dataclass(frozen=True)
class TensorSpec:
    """A named flat buffer a plan reads or writes."""
    dtype: str   # "f32" or "bf16"


class Recorder:
    """Records each call as a row of a Plan instead of running it."""

    def __init__(self, tensors: dict[str, str], backend=None, spec=None):
        """tensors: name -> dtype ("f32"/"bf16") of every buffer the nest names;
        spec: the loop spec the nest walks, named when the plan is refused."""
        self.tensors = {name: dtypes.check_name(dt) for name, dt in tensors.items()}
        self.backend = backend
        self.spec = spec
        self.blocks: dict[Block, int] = {}
        self.phases: dict[tuple, dict[tuple, list]] = {}
        self._where = ((), ())
        self.extent = dict.fromkeys(self.tensors, 0)  # elements each tensor must hold
        self.written = set()

    def at(self, phase, task):
        """Calls made from now on belong to this phase and task (from Nest.walk)."""
        self._where = (phase, task)

    def _touch(self, name, offsets, rows, cols, ld, role):
        if name not in self.tensors:
            raise ValueError(f"{role}: unknown tensor {name!r} (declared: {', '.join(self.tensors)})")
        lo = min(offsets) if len(offsets) else 0
        if lo < 0:
            raise ValueError(f"{role}: negative offset {lo} into {name!r}")
        if len(offsets):
            self.extent[name] = max(self.extent[name], max(offsets) + (rows - 1) * ld + cols)

    def gemm(self, blk: Block, a, a_offs, b, b_offs, c, c_off, ops=()):
        a_offs, b_offs = list(a_offs), list(b_offs)
        if len(a_offs) != len(b_offs):
            raise ValueError(f"b_offs: {len(b_offs)} offsets, a_offs has {len(a_offs)}")
        for name, want, role in ((a, blk.dtype, "a"), (b, blk.dtype, "b"), (c, blk.c_dtype, "c")):
            if self.tensors.get(name, want) != want:
                raise ValueError(f"{role}: tensor {name!r} is {self.tensors[name]}, the block "
                                 f"wants {want}")
        self._touch(a, a_offs, blk.m, blk.k, blk.lda, "a")
        self._touch(b, b_offs, blk.k, blk.n, blk.ldb, "b")
        self._touch(c, [c_off], blk.m, blk.n, blk.ldc, "c")
        self.written.add(c)
        for op in ops:
            self._check_op(op, blk)
        kid = self.blocks.setdefault(blk, len(self.blocks))
        phase, task = self._where
        self.phases.setdefault(phase, {}).setdefault(task, []).append(
            (kid, a, b, c, c_off, a_offs, b_offs, tuple(ops)))

    def _check_op(self, op, blk):
        if op.code not in OP_CODES:
            raise ValueError(f"ops: unknown op {op.code!r}")
        if blk.c_dtype != "f32":
            raise ValueError(f"ops: {op.code} needs an f32 C block, this one is {blk.c_dtype}")
        if op.code == "bias":
            self._touch(op.tensors[0], op.offsets, 1, blk.n, blk.n, "bias")
        elif op.code == "store_bf16":
            self._touch(op.tensors[0], op.offsets, blk.m, blk.n, op.ld, "store_bf16")
            if self.tensors[op.tensors[0]] != "bf16":
                raise ValueError(f"store_bf16: tensor {op.tensors[0]!r} is not bf16")
            self.written.add(op.tensors[0])
        elif op.code in ("relu_bwd", "sigmoid_bwd", "tanh_bwd"):
            self._touch(op.tensors[0], op.offsets, blk.m, blk.n, op.ld, op.code)
            if self.tensors[op.tensors[0]] != "f32":
                raise ValueError(f"{op.code}: tensor {op.tensors[0]!r} is not f32")
        elif op.code in ("store_t", "store_t_bf16"):
            self._touch(op.tensors[0], op.offsets, blk.n, blk.m, op.ld, op.code)
            want = "bf16" if op.code == "store_t_bf16" else "f32"
            if self.tensors[op.tensors[0]] != want:
                raise ValueError(f"{op.code}: tensor {op.tensors[0]!r} is not {want}")
            self.written.add(op.tensors[0])
        elif op.code == "lstm_cell":
            gates = op.tensors[0]
            self._touch(gates, [op.offsets[0] + q * op.stride for q in range(4)],
                        blk.m, blk.n, blk.ldc, "lstm_cell")
            for name, off in zip(op.tensors[1:], op.offsets[1:]):
                self._touch(name, [off], blk.m, blk.n, op.ld, "lstm_cell")
            for q, name in enumerate(op.tensors):
                want = "bf16" if q == 4 else "f32"
                if self.tensors[name] != want:
                    raise ValueError(f"lstm_cell: tensor {name!r} is not {want}")
            self.written.update((gates,) + op.tensors[2:])
        elif op.code == "lstm_cell_bwd":
            for q, (name, off) in enumerate(zip(op.tensors, op.offsets)):
                offs = [off + g * op.stride for g in range(4)] if q in (1, 5, 6) else [off]
                self._touch(name, offs, blk.m, blk.n, op.ld, "lstm_cell_bwd")
                want = "bf16" if q == 6 else "f32"
                if self.tensors[name] != want:
                    raise ValueError(f"lstm_cell_bwd: tensor {name!r} is not {want}")
            self.written.update(op.tensors[4:])

    def finish(self) -> Plan:
        return Plan(self)


# ---------------------------------------------------------------- plans

_CALL, _OP = CALL_RECORD, OP_RECORD  # brgemm_plan_call, brgemm_plan_op as NumPy records


def _op_accesses(op, blk):
    """(tensor, offsets, rows, cols, ld, writes) of what an epilogue op touches
    besides its call's C block."""
    m, n = blk.m, blk.n
    if op.code == "bias":
        return [(op.tensors[0], op.offsets, 1, n, n, False)]
    if op.code == "store_bf16":
        return [(op.tensors[0], op.offsets, m, n, op.ld, True)]
    if op.code == "lstm_cell":  # gates (read and written), c_prev; writes c, h, (h16)
        gates = [op.offsets[0] + q * op.stride for q in range(4)]
        out = [(op.tensors[0], gates, m, n, blk.ldc, False), (op.tensors[0], gates, m, n, blk.ldc, True),
               (op.tensors[1], op.offsets[1:2], m, n, op.ld, False)]
        return out + [(t, [o], m, n, op.ld, True) for t, o in zip(op.tensors[2:], op.offsets[2:])]
    if op.code == "lstm_cell_bwd":  # dy, gates, c_t, c_prev, dc read; dc, dG, (dG16) written
        four = lambda q: [op.offsets[q] + g * op.stride for g in range(4)]  # noqa: E731
        out = [(op.tensors[q], four(q) if q == 1 else [op.offsets[q]], m, n, op.ld, False)
               for q in range(5)]
        return out + [(op.tensors[4], [op.offsets[4]], m, n, op.ld, True)] + [
            (op.tensors[q], four(q), m, n, op.ld, True) for q in range(5, len(op.tensors))]
    return []


def _intervals(entries):
    """Element intervals [start, end) and their tasks from (offsets, rows, cols,
    ld, task) blocks: a strided block becomes one interval per row, so the
    intervals are exactly its elements."""
    offs = np.concatenate([np.asarray(o, np.int64) for o, *_ in entries])
    per = np.array([len(o) for o, *_ in entries])
    meta = np.array([e[1:5] for e in entries], np.int64)
    rows, cols, ld, task = (np.repeat(meta[:, i], per) for i in range(4))
    flat = (ld == cols) | (rows == 1)
    length = np.where(flat, (rows - 1) * ld + cols, cols)
    nrows = np.where(flat, 1, rows)
    first = np.repeat(np.cumsum(nrows) - nrows, nrows)
    start = np.repeat(offs, nrows) + (np.arange(first.size) - first) * np.repeat(ld, nrows)
    return start, start + np.repeat(length, nrows), np.repeat(task, nrows)


def _merge(start, end, task):
    """The union of each task's intervals, sorted by start (different tasks' may overlap)."""
    span = int(end.max()) + 1
    if int(task.max()) * span < 2**62:  # shift each task into a range of its own
        s, e = start + task * span, end + task * span
    else:  # too large to shift: merge per task
        parts = [_merge(start[task == t], end[task == t], task[task == t]) for t in np.unique(task)]
        s, e, t = (np.concatenate(x) for x in zip(*parts))
        order = np.argsort(s, kind="stable")
        return s[order], e[order], t[order]
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    new = np.ones(s.size, bool)
    new[1:] = s[1:] > reach[:-1]
    heads = np.flatnonzero(new)
    t = task[order][heads]
    ms, me = s[heads] - t * span, np.maximum.reduceat(e, heads) - t * span
    order = np.argsort(ms, kind="stable")
    return ms[order], me[order], t[order]


def _check_races(rec: Recorder):
    """Within a phase, tasks run at the same time: no two may write the same
    element, and none may read an element another one writes. That is what
    makes a replay race-free and independent of the thread count. Exact, in
    element intervals per tensor (a strided block is one interval per row);
    calls of one task may overlap freely (they run in order)."""
    blocks = {blk_id: blk for blk, blk_id in rec.blocks.items()}
    where = f"config: spec {rec.spec!r}: " if rec.spec else ""
    for tasks in rec.phases.values():
        if len(tasks) < 2:
            continue
        writes, reads = {}, {}  # tensor -> [(offsets, rows, cols, ld, task)]
        for t, calls in enumerate(tasks.values()):
            for kid, a, b, c, c_off, a_offs, b_offs, ops in calls:
                blk = blocks[kid]
                # a task's chunks accumulate into one C block: the dict keeps it once
                writes.setdefault(c, {})[(c_off, blk.m, blk.n, blk.ldc, t)] = None
                reads.setdefault(a, []).append((a_offs, blk.m, blk.k, blk.lda, t))
                reads.setdefault(b, []).append((b_offs, blk.k, blk.n, blk.ldb, t))
                for op in ops:
                    for name, offs, rows, cols, ld, w in _op_accesses(op, blk):
                        if w:
                            for o in offs:
                                writes.setdefault(name, {})[(o, rows, cols, ld, t)] = None
                        else:
                            reads.setdefault(name, []).append((list(offs), rows, cols, ld, t))
        for name, keys in writes.items():
            writers = {key[4] for key in keys}
            if len(writers) == 1 and all(e[4] in writers for e in reads.get(name, ())):
                continue  # one task writes it and only that task reads it
            entries = [([o], *rest) for o, *rest in keys]
            ws, we, wt = _merge(*_intervals(entries))
            before = np.maximum.accumulate(we)
            clash = np.flatnonzero(ws[1:] < before[:-1])
            if clash.size:
                raise ValueError(f"{where}tensor {name!r}: two parallel tasks of one phase write "
                                 f"the same elements (at offset {int(ws[clash[0] + 1])}); make the "
                                 "parallel loop one that splits the output")
            read = [e for e in reads.get(name, ()) if len(e[0])]
            if not read:
                continue
            rs, re, rt = _merge(*_intervals(read))
            # the writes are now disjoint and sorted: those a read meets are a run
            lo = np.searchsorted(we, rs, side="right")
            hi = np.searchsorted(ws, re, side="left")
            change = np.append(np.flatnonzero(wt[1:] != wt[:-1]) + 1, wt.size)
            first = np.minimum(lo, wt.size - 1)
            other_next = change[np.searchsorted(change, first, side="right")]
            bad = np.flatnonzero((lo < hi) & ((wt[first] != rt) | (other_next < hi)))
            if bad.size:
                raise ValueError(f"{where}tensor {name!r}: a parallel task reads elements that "
                                 f"another task of the same phase writes (near offset "
                                 f"{int(rs[bad[0]])}); put a barrier ('|') after the loop whose "
                                 "steps depend on each other, or make it sequential")


class Plan:
    """A recorded loop nest. run(**arrays) binds buffers and replays it natively."""

    def __init__(self, rec: Recorder):
        from brgemm.backend import cpu  # recording makes the CPU tables; other backends convert them
        self._cpu = cpu
        _check_races(rec)
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
                    item = dtypes.ITEMSIZE[self.blocks[kid].dtype]
                    a_offs += [o * item for o in ao]  # bytes, libxsmm's unit
                    b_offs += [o * item for o in bo]
                    ops += [(OP_CODES[o.code],
                             tuple(self.slots[t] for t in o.tensors) + (-1,) * (OPERANDS - len(o.tensors)),
                             tuple(o.offsets) + (0,) * (OPERANDS - len(o.offsets)), o.ld, o.stride)
                            for o in call_ops]
                task_begin.append(len(calls))
            phase_begin.append(len(task_begin) - 1)
        self.calls = np.array(calls, _CALL)
        self.a_offs = np.array(a_offs, np.uint64)
        self.b_offs = np.array(b_offs, np.uint64)
        self.ops = np.array(ops, _OP)
        self.task_begin = np.array(task_begin, np.int64)
        self.phase_begin = np.array(phase_begin, np.int64)
        self._cpu_plan = None  # (kernels, brgemm_cpu_plan): JIT on the first CPU use only
        self._replays = {}  # other backends' replays, by name
        self._replay_lock = threading.Lock()

    @property
    def kernels(self):
        """The CPU's libxsmm kernels, one per block (JIT-compiled on first use)."""
        return self._cpu_native()[0]

    @property
    def paths(self):
        return sorted({k.path for k in self.kernels})

    @property
    def _native(self):
        return self._cpu_native()[1]

    def _cpu_native(self):
        if self._cpu_plan is None:
            with self._replay_lock:
                if self._cpu_plan is None:
                    cpu = self._cpu
                    kernels = [cpu.CpuKernel(form="offs", dtype_ab=b.dtype, dtype_c=b.c_dtype,
                                             m=b.m, n=b.n, k=b.k, lda=b.lda, ldb=b.ldb, ldc=b.ldc,
                                             alpha=b.alpha, beta=b.beta, b_vnni=b.b_vnni)
                               for b in self.blocks]
                    self._cpu_plan = (kernels, self._describe(kernels))
        return self._cpu_plan

    def _describe(self, kernels):
        """The brgemm_cpu_plan struct; it points into this object's arrays."""
        ffi = self._cpu.ffi
        for ctype, dt in (("brgemm_plan_call", _CALL), ("brgemm_plan_op", _OP)):
            if ffi.sizeof(ctype) != dt.itemsize:  # the NumPy records must be the C structs
                raise RuntimeError(f"{ctype}: {ffi.sizeof(ctype)} bytes in C, {dt.itemsize} here")
        keep = [ffi.new("brgemm_cpu_kernel *[]", [k._k for k in kernels] or [ffi.NULL])]

        def buf(ctype, arr):
            if arr.size == 0:
                keep.append(ffi.new(f"{ctype}[]", 1))
                return keep[-1]
            keep.append(ffi.from_buffer(f"{ctype}[]", arr))
            return keep[-1]

        desc = ffi.new("brgemm_cpu_plan *", dict(
            kernels=keep[0], n_kernels=len(kernels), n_tensors=len(self.tensors),
            calls=buf("brgemm_plan_call", self.calls), n_calls=len(self.calls),
            a_offs=buf("uint64_t", self.a_offs), b_offs=buf("uint64_t", self.b_offs),
            n_offs=len(self.a_offs), ops=buf("brgemm_plan_op", self.ops), n_ops=len(self.ops),
            task_begin=buf("int64_t", self.task_begin), n_tasks=len(self.task_begin) - 1,
            phase_begin=buf("int64_t", self.phase_begin), n_phases=len(self.phase_begin) - 1))
        self._keep = keep
        return desc

    # -- binding and running --
    def _check(self, arrays, device_type=None):
        """Every tensor present, of the right dtype and size, flat, writable where
        written, and no written tensor overlapping another. device_type: the
        backend's device-resident array class, accepted in place of NumPy."""
        missing = set(self.tensors) - set(arrays)
        if missing:
            raise ValueError(f"{sorted(missing)[0]}: the plan needs it (tensors: "
                             f"{', '.join(self.tensors)})")
        extra = set(arrays) - set(self.tensors)
        if extra:
            raise ValueError(f"{sorted(extra)[0]}: not a tensor of this plan "
                             f"(tensors: {', '.join(self.tensors)})")
        for name, want in self.tensors.items():
            x = arrays[name]
            resident = device_type is not None and isinstance(x, device_type)
            if not resident and not isinstance(x, np.ndarray):
                where = f" or {device_type.__name__}" if device_type is not None else ""
                raise TypeError(f"{name}: expected a numpy.ndarray{where}, got {type(x).__name__}")
            if x.dtype != dtypes.NUMPY[want]:
                raise TypeError(f"{name}: expected dtype {want} ({dtypes.NUMPY[want]}), "
                                f"got {x.dtype}")
            if x.size < self.extent[name]:
                raise ValueError(f"{name}: the plan touches {self.extent[name]} elements, "
                                 f"the array has {x.size}")
            if resident:
                continue
            if not x.flags.c_contiguous:
                raise ValueError(f"{name}: a plan reads tensors as flat buffers; pass "
                                 f"np.ascontiguousarray({name})")
            if name in self.written and not x.flags.writeable:
                raise ValueError(f"{name}: is read-only; the plan writes it")
        for w in self.written:
            for name in self.tensors:
                if name == w:
                    continue
                a, b = arrays[w], arrays[name]
                if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
                    shared = np.may_share_memory(a, b) and np.shares_memory(a, b, max_work=10**5)
                else:
                    shared = a is b
                if shared:
                    raise ValueError(f"{w}: overlaps {name}; the plan writes {w}")

    def _bind(self, arrays):
        self._check(arrays)
        ptrs = [self._cpu.address(arrays[name]) for name in self.tensors]
        return self._cpu.ffi.new("void *[]", ptrs or [self._cpu.ffi.NULL])

    def run(self, threads=None, backend=None, **arrays):
        """Replay on `backend` (default: BRGEMM_BACKEND, else "cpu"). On the CPU,
        with `threads` OpenMP threads (default: OMP_NUM_THREADS, else all cores);
        elsewhere the device schedules the tasks and `threads` must be None."""
        name = resolve_backend(backend)
        if name != "cpu":
            if len(self.ops) and self.ops["code"].max() > DEVICE_OPS:
                code = {v: k for k, v in OP_CODES.items()}[int(self.ops["code"].max())]
                raise ValueError(f"backend: the {name!r} backend has no {code!r} epilogue; "
                                 f"run this plan on 'cpu'")
            if threads is not None:
                raise ValueError(f"threads: the {name!r} backend schedules its own work; "
                                 f"pass threads=None")
            if name == "sycl" and any(b.b_vnni for b in self.blocks):
                raise ValueError("backend: this plan reads B tiles as VNNI pairs (the layout "
                                 "AMX CPUs take); the 'sycl' backend reads plain tiles")
            replay = self._replay(name)
            adopt = getattr(replay, "adopt", None)  # other libraries' device tensors (DLPack)
            if adopt is not None:
                arrays = adopt(arrays)
            self._check(arrays, replay.device_array)
            return replay.run(arrays)
        tensors = self._bind(arrays)
        self._cpu.check(self._cpu.lib.brgemm_cpu_plan_run(self._native, tensors,
                                                          _threads(threads)), "Plan.run")

    def _replay(self, name):
        """The backend's replay of this plan, made on first use (tables uploaded once)."""
        replay = self._replays.get(name)
        if replay is None:
            with self._replay_lock:
                replay = self._replays.get(name)
                if replay is None:
                    replay = self._replays[name] = get_backend(name).PlanReplay(self)
        return replay

    def time_bare(self, reps=1, **arrays):
        """Seconds for `reps` passes over the calls from a plain C loop, one thread,
        no epilogues: what the kernel calls alone cost (benchmarks compare run() to it)."""
        tensors = self._bind(arrays)
        seconds = self._cpu.ffi.new("double *")
        self._cpu.check(self._cpu.lib.brgemm_cpu_plan_time_bare(self._native, tensors, reps,
                                                                seconds), "Plan.time_bare")
        return seconds[0]

    # -- inspection --
    @property
    def flops(self):
        return sum(self.blocks[c["kernel"]].flops * int(c["count"]) for c in self.calls)

    def summary(self, threads=None) -> str:
        """Calls, phases, FLOPs, bytes the kernel calls touch, and how the static
        schedule spreads FLOPs over `threads` threads (1.00 = perfectly even)."""
        nthreads = self._cpu.lib.brgemm_cpu_plan_threads(_threads(threads))
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


def _threads(threads):
    """The threads argument of run() and summary(): None (OpenMP's default,
    capped like any count) or 1 .. brgemm_cpu_max_threads()."""
    if threads is None:
        return 0
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise ValueError(f"threads: expected a positive int, got {threads!r}")
    from brgemm.backend import cpu
    cap = cpu.lib.brgemm_cpu_max_threads()
    if threads > cap:
        raise ValueError(f"threads: {threads} is more than the {cap} this machine runs "
                         "(4 per core, at least 8)")
    return int(threads)


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
