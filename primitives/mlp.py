"""Fully fused MLPs: every layer of a batch tile runs before the next tile starts.

    x [N, C] -> y [N, K];   h_0 = x,  h_{l+1} = act_l(h_l @ W_l^T + b_l),  W_l [out_l, in_l]

Layer by layer, a narrow MLP (widths 16 to 128) is memory-bound: each layer
streams its whole input and output through memory for a few FLOPs per byte.
Fused, a tile of `tile` rows goes through `depth` consecutive layers while its
activations sit in a scratch slot of its task (tile x width, reused by every
tile of the task, so it stays in L1/L2); only the weights (blocked once per
call, a few KiB per layer) are shared. The nest, one spec for all passes:

    s  segments of `depth` layers (depth = all: one pass; 1: layer by layer)
    |  a barrier: a segment's outputs are all in memory before the next reads them
    N  parallel tasks, each a run of consecutive batch tiles (its scratch slot)
    n  the task's tiles
    l  the segment's layers (descending in backward)

Forward:        h_{l+1}[n] = act(h_l[n] @ W_l^T + b_l)         B = W_l^T, [in][out]
Backward-data:  dh_l[n] = dz_l[n] @ W_l,  dz_{l-1}[n] = dh_l[n] * act'(h_l[n])   B = W_l
Weight grads:   dW_l += sum over a group of tiles of dz_l[n]^T @ h_l[n]  (a batch-reduce
                GEMM over the tiles; each task sums into its own partial dW, the
                partials are added at the end), db_l likewise with a column of ones.
Training keeps h (f32, and its bf16 copy) for backward; backward's epilogues
write dz^T tiles next to it for the weight gradients. Activations crossing a
segment boundary go to memory ([N, width] buffers); inside a segment they only
touch the task's slot. `pipeline` in configs/mlp.toml (or config=) sets depth,
tile and group; unset, cost() picks them (the model is in its docstring).
A segment runs over the whole batch before the next starts (a barrier
between them), so depth 1 is layer by layer through memory, as unfused.
"""
import dataclasses
import math
import os

import numpy as np

from brgemm import dtypes
from brgemm import plan as P
from brgemm.arrays import Recycler, aligned_empty, poison
from brgemm.layouts import convert, to_blocks
from brgemm.loopspec import Loop, parse_spec
from brgemm.vnni import takes_vnni_b, vnni_tiles
from primitives._config import settings

SCHEMA = {"pipeline": {"depth": int, "tile": int, "group": int}}
SPEC = "s|Nnl"     # segments one after another over the whole batch, then tasks, tiles, layers
TASKS = 64         # parallel tasks (at most): enough for 16-32 threads to share evenly
_ACT_OPS = {"relu": P.relu, "sigmoid": P.sigmoid, "tanh": P.tanh}
_plans = P.PlanCache(maxsize=32)
_results = Recycler()  # y and dx, handed back once callers let go of them

# The cost model's machine: per core, what the EPYC and Xeon hosts roughly have.
def _cache_bytes(level, default):
    """This machine's per-core cache of `level` (Linux sysfs), else `default`."""
    try:
        text = open(f"/sys/devices/system/cpu/cpu0/cache/index{level}/size").read().strip()
        return int(text[:-1]) << 10 if text.endswith("K") else int(text)
    except (OSError, ValueError):
        return default


L1_BYTES = _cache_bytes(0, 32 << 10)   # index0: L1 data
L2_BYTES = _cache_bytes(2, 1 << 20)
L2_BYTES_PER_S = 80e9      # what one core's epilogue passes get from L2
FLOPS_PER_CORE = 60e9      # f32 GEMM of wide blocks, sustained (bf16 via f32 alike)
BYTES_PER_S = 10e9         # memory bandwidth one core gets when all stream
CALL_ROWS = 8          # a kernel call costs about this many rows' worth of FMAs


# ---------------------------------------------------------------- geometry

@dataclasses.dataclass(frozen=True)
class Geometry:
    """One fused MLP at one batch size: sizes, activations and the pipeline."""
    N: int
    sizes: tuple        # (C, hidden..., K)
    acts: tuple         # activation per layer (None = identity)
    has_bias: bool
    dtype: str
    depth: int          # layers per segment
    tile: int           # batch rows per tile
    group: int          # tiles per weight-gradient call

    L = property(lambda g: len(g.sizes) - 1)
    Nb = property(lambda g: -(-g.N // g.tile))
    per_task = property(lambda g: -(-g.Nb // min(g.Nb, TASKS)))
    tasks = property(lambda g: -(-g.Nb // g.per_task))
    width = property(lambda g: max(g.sizes[1:]))          # widest layer output
    fan = property(lambda g: max(g.sizes))

    def rows(self, n):
        return min(self.tile, self.N - n * self.tile)

    def boundary(self, l):
        """Does layer l's output leave its segment (and so go to memory)?"""
        return l < self.L - 1 and l % self.depth == self.depth - 1


def shape_of(N, sizes):
    """The config shape key of an MLP: batch, input, widest hidden, output, layers."""
    hidden = sizes[1:-1]
    return {"N": N, "C": sizes[0], "W": max(hidden) if hidden else sizes[-1], "K": sizes[-1],
            "L": len(sizes) - 1}


def geometry(N, sizes, acts, has_bias, dtype, train, config=None):
    sizes = tuple(sizes)
    shape = shape_of(N, sizes)
    cfg = settings("mlp", "pipeline", shape, SCHEMA["pipeline"], config)
    pick = default_pipeline(shape, dtype, train)
    depth = min(cfg.get("depth", pick["depth"]), len(sizes) - 1)
    tile = min(cfg.get("tile", pick["tile"]), N)
    return Geometry(N, sizes, tuple(acts), has_bias, dtype, depth, tile,
                    cfg.get("group", pick["group"]))


# ---------------------------------------------------------------- the cost model

def cost(shape, dtype, train, depth, tile, group=4, threads=1):
    """Seconds the model predicts for one pass (forward; with train, forward and
    backward). Per core, with the batch split evenly:

      compute   FLOPs / FLOPS_PER_CORE, each kernel call charged CALL_ROWS more rows
                (call overhead and the libxsmm kernel's ramp) over the tile's rows;
      memory    input and output once, plus one write and one read of an [N, W]
                activation per segment boundary (ceil(L / depth) - 1 of them), at
                BYTES_PER_S (at L2_BYTES_PER_S when a core's share of such an
                activation fits in its L2: then depth hardly matters); training
                adds h, dz^T and dx traffic that no pipeline choice removes;
      spill     when a tile's working set (its activations, f32 and bf16, and the
                weights of one segment) exceeds L2, each layer's activations go to
                memory as if unfused: 2 * N * W bytes per layer more; when a
                layer's input and output tiles (f32) exceed L1, its epilogue
                passes and the next call's read cost about two more passes over
                the output from L2, at L2_BYTES_PER_S.

    The time is compute + memory (one core does both, overlap is poor at these
    sizes). Depth = all layers and the widest tile that stays in L2 win unless
    the weights alone fill L2; tiny tiles lose to call overhead."""
    N, C, W, K, L = (shape[k] for k in ("N", "C", "W", "K", "L"))
    ab = dtypes.ITEMSIZE[dtype]
    n = N / threads
    flops = 2 * n * (C * W + (L - 2) * W * W + W * K) if L > 1 else 2 * n * C * K
    passes = 3 if train else 1
    compute = passes * flops * (1 + CALL_ROWS / tile) / FLOPS_PER_CORE
    bounds = math.ceil(L / depth) - 1
    boundary = bounds * 2 * n * W * ab * (2 if train else 1)
    in_l2 = 2 * n * W * ab <= L2_BYTES
    traffic = n * (C * ab + K * 4) + (0 if in_l2 else boundary)
    if train:
        traffic += n * W * (L - 1) * (4 + ab) * 2 + n * W * L * ab * 2
    act_bytes = tile * W * (4 + ab) * (4 if train else 2)
    weights = min(depth, L) * W * max(W, C, K) * ab * (2 if train else 1)
    if train:
        act_bytes += group * tile * W * ab * 2
    if act_bytes + weights > L2_BYTES:
        traffic += 2 * n * W * ab * L * passes
    l2 = 0.0
    if 2 * tile * W * 4 > L1_BYTES:
        l2 = passes * n * W * L * 4 * 2 / L2_BYTES_PER_S
    if in_l2:
        l2 += boundary / L2_BYTES_PER_S
    return compute + traffic / BYTES_PER_S + l2


def candidates(shape):
    L, N = shape["L"], shape["N"]
    depths = sorted({d for d in (1, 2, 3, 4, 6, 8, L) if d <= L})
    tiles = [t for t in (16, 32, 64, 128, 256, 512) if t <= max(N, 16)]
    return depths, tiles


def default_pipeline(shape, dtype, train):
    """The cost model's choice of depth and tile (group: tiles per weight-gradient
    call, as many as keep their dz^T and h tiles in L2 next to the rest)."""
    depths, tiles = candidates(shape)
    threads = len(os.sched_getaffinity(0))
    best = min(((cost(shape, dtype, train, d, t, threads=threads), -d, -t)
                for d in depths for t in tiles))
    depth, tile = -best[1], -best[2]
    ab = dtypes.ITEMSIZE[dtype]
    group = max(1, min(8, L2_BYTES // 4 // max(1, tile * shape["W"] * ab * 2)))
    return {"depth": depth, "tile": tile, "group": group}


# ---------------------------------------------------------------- where things live

class Places:
    """Offsets of every tensor region the nests name: a layer's output (or its
    gradient), by tile, in a persistent buffer or the task's scratch slot."""

    def __init__(self, g, train):
        self.g, self.train = g, train
        L, sizes, Nb, T = g.L, g.sizes, g.Nb, g.tasks
        self.bf16 = g.dtype == "bf16"
        self.stored = [l for l in range(L - 1) if train or g.boundary(l)]
        self.bounds = [l for l in range(L - 1) if g.boundary(l)]
        rows = lambda l: g.N * sizes[l + 1]  # noqa: E731 (an [N, out_l] activation)
        self.h_off, h = self._regions(self.stored, rows)
        self.g_off, gs = self._regions(self.bounds, rows)
        self.w_off, w = self._regions(range(L), lambda l: sizes[l] * sizes[l + 1])
        self.b_off, b = self._regions(range(L), lambda l: sizes[l + 1])
        self.dzt_off, dzt = self._regions(range(L), lambda l: Nb * g.tile * sizes[l + 1])
        self.slot = 2 * g.tile * g.width       # a task's scratch: two activations
        self.dslot = 2 * g.tile * g.fan        # ... and two gradients in backward
        # layers whose weights the kernel reads as VNNI pairs in place (bf16 on AMX):
        # packed once per call here instead of once per kernel call
        self.vnni_fwd = frozenset(l for l in range(L) if takes_vnni_b(sizes[l], g.dtype))
        self.vnni_bwd = frozenset(l for l in range(L) if takes_vnni_b(sizes[l + 1], g.dtype))
        self.totals = dict(h=h, g=gs, w=w, b=b, dzt=dzt, s=T * self.slot, d=T * self.dslot)

    @staticmethod
    def _regions(layers, size):
        """(offset of each layer's region, total size) of regions laid end to end."""
        out, at = {}, 0
        for l in layers:
            out[l], at = at, at + size(l)
        return out, at

    def act_in(self, l, n, slot):
        """Layer l's input tile as an A or B operand (dtype of the GEMMs)."""
        g = self.g
        if l == 0:
            return "x", n * g.tile * g.sizes[0], g.sizes[0]
        width = g.sizes[l]
        if l - 1 in self.h_off:
            return ("h16" if self.bf16 else "h"), self.h_off[l - 1] + n * g.tile * width, width
        return ("s16" if self.bf16 else "s"), slot * self.slot + ((l - 1) % 2) * g.tile * g.width, \
            width

    def act_out(self, l, n, slot):
        """(C place (f32), bf16 copy place or None) of layer l's output tile."""
        g = self.g
        width = g.sizes[l + 1]
        if l == g.L - 1:
            return ("y", n * g.tile * width, width), None
        if l in self.h_off:
            at = self.h_off[l] + n * g.tile * width
            if not self.bf16:
                return ("h", at, width), None
            c = ("h", at, width) if self.train else \
                ("s", slot * self.slot + (l % 2) * g.tile * g.width, width)
            return c, ("h16", at, width)
        at = slot * self.slot + (l % 2) * g.tile * g.width
        return ("s", at, width), (("s16", at, width) if self.bf16 else None)

    def dz(self, l, n, slot):
        """Where dz_l (the gradient at layer l's pre-activation) is, row-major, as
        the A operand of layer l's backward-data GEMM."""
        g = self.g
        width = g.sizes[l + 1]
        if l == g.L - 1:
            return "dz", n * g.tile * width, width
        if l in self.g_off:
            return ("g16" if self.bf16 else "g"), self.g_off[l] + n * g.tile * width, width
        return ("d16" if self.bf16 else "d"), slot * self.dslot + (l % 2) * g.tile * g.fan, width

    def dz_c(self, l, n, slot):
        """(C place (f32), bf16 copy place or None) of dz_l, made by layer l+1's
        backward-data GEMM and its epilogue."""
        g = self.g
        width = g.sizes[l + 1]
        if l in self.g_off and not self.bf16:
            return ("g", self.g_off[l] + n * g.tile * width, width), None
        at = slot * self.dslot + (l % 2) * g.tile * g.fan
        copy = None
        if self.bf16:
            copy = ("g16", self.g_off[l] + n * g.tile * width, width) if l in self.g_off else \
                ("d16", at, width)
        return ("d", at, width), copy

    def dzt(self, l, n):
        """dz_l^T of tile n: [out_l][tile], row stride tile."""
        return self.dzt_off[l] + n * self.g.sizes[l + 1] * self.g.tile


def tensors(g, pass_, train):
    """name -> dtype of the buffers the pass's plan reads and writes."""
    ab = g.dtype
    pl = Places(g, train)
    if pass_ == "fwd":
        t = {"x": ab, "w": ab, "y": "f32"}
        if g.has_bias:
            t["b"] = "f32"
        scratch = len(pl.stored) < g.L - 1
        if pl.stored:
            if train or not pl.bf16:
                t["h"] = "f32"
            if pl.bf16:
                t["h16"] = "bf16"
        if scratch or (pl.bf16 and not train and pl.stored):
            t["s"] = "f32"
        if scratch and pl.bf16:
            t["s16"] = "bf16"
        return t
    t = {"x": ab, "wt": ab, "dz": ab, "dzt": ab, "dwp": "f32", "dx": "f32"}
    if g.has_bias:
        t.update(ones=ab, dbp="f32")
    if g.L > 1:
        t["h"] = "f32"
        t["d"] = "f32"
        if pl.bf16:
            t.update(h16="bf16", d16="bf16")
        if pl.bounds:
            t["g16" if pl.bf16 else "g"] = ab
    return t


def _loops(g):
    return parse_spec(SPEC, [Loop("n", 0, g.Nb, 1, blocks=(g.per_task,)),
                             Loop("s", 0, -(-g.L // g.depth), 1), Loop("l", 0, g.depth, 1)])


# ---------------------------------------------------------------- the loop nests

class _Blocks(dict):
    """Kernel shapes by their arguments, made once."""

    def __call__(self, *args, **kw):
        key = (args, tuple(sorted(kw.items())))
        if key not in self:
            self[key] = P.Block(*args, **kw)
        return self[key]


def forward_nest(ex, loops, g, train):
    """h_{l+1}[n] = act(h_l[n] @ W_l^T + b_l), all layers of a segment per tile."""
    pl, blk = Places(g, train), _Blocks()
    for phase, task, at in loops.walk():
        n, l = at["n"], at["s"] * g.depth + at["l"]
        if l >= g.L:
            continue
        slot = task[0] // g.per_task
        a, a_off, lda = pl.act_in(l, n, slot)
        (c, c_off, ldc), copy = pl.act_out(l, n, slot)
        ops = (P.bias("b", pl.b_off[l]),) if g.has_bias else ()
        if g.acts[l] is not None:
            ops += (_ACT_OPS[g.acts[l]](),)
        if copy is not None:
            ops += (P.store_bf16(copy[0], copy[1], copy[2]),)
        ex.at(phase, task)
        ex.gemm(blk(g.rows(n), g.sizes[l + 1], g.sizes[l], lda=lda, ldb=g.sizes[l + 1], ldc=ldc,
                    dtype=g.dtype, beta=0.0, b_vnni=l in pl.vnni_fwd),
                a, [a_off], "w", [pl.w_off[l]], c, c_off, ops=ops)


def backward_nest(ex, loops, g):
    """Per tile, layers descending: dz_{l-1} = (dz_l @ W_l) * act'(h_l) (with its
    transpose stored for the weight gradients), dx at layer 0; after every
    `group` tiles of a task, dW_l and db_l of those tiles as batch-reduce calls."""
    pl, blk = Places(g, True), _Blocks()
    bf16 = g.dtype == "bf16"
    segments = -(-g.L // g.depth)
    for phase, task, at in loops.walk():
        s, n = segments - 1 - at["s"], at["n"]
        l = s * g.depth + (g.depth - 1 - at["l"])
        if l >= g.L:
            continue
        slot, first = task[0] // g.per_task, task[0]
        last = min(first + g.per_task, g.Nb) - 1
        ex.at(phase, task)
        a, a_off, lda = pl.dz(l, n, slot)
        out, inp = g.sizes[l + 1], g.sizes[l]
        if l == 0:
            ex.gemm(blk(g.rows(n), inp, out, lda=lda, ldb=inp, ldc=inp, dtype=g.dtype, beta=0.0,
                        b_vnni=l in pl.vnni_bwd),
                    a, [a_off], "wt", [pl.w_off[l]], "dx", n * g.tile * inp)
        else:
            (c, c_off, ldc), copy = pl.dz_c(l - 1, n, slot)
            h_at = pl.h_off[l - 1] + n * g.tile * inp
            ops = (P.act_grad(g.acts[l - 1], "h", h_at, inp),) if g.acts[l - 1] else ()
            ops += (P.store_t("dzt", pl.dzt(l - 1, n), g.tile, bf16=bf16),)
            if copy is not None:
                ops += (P.store_bf16(*copy),)
            ex.gemm(blk(g.rows(n), inp, out, lda=lda, ldb=inp, ldc=ldc, dtype=g.dtype, beta=0.0,
                        b_vnni=l in pl.vnni_bwd),
                    a, [a_off], "wt", [pl.w_off[l]], c, c_off, ops=ops)
        if (n - first) % g.group == g.group - 1 or n == last:
            _weight_grads(ex, g, pl, blk, l, n - (n - first) % g.group, n + 1, first, slot)


def _weight_grads(ex, g, pl, blk, l, n0, n1, first, slot):
    """dW_l (+)= sum_{n0 <= n < n1} dz_l[n]^T @ h_l[n] into the task's partial sum;
    db_l likewise against a column of ones. The ragged last tile gets its own call."""
    out, inp = g.sizes[l + 1], g.sizes[l]
    full = [n for n in range(n0, n1) if g.rows(n) == g.tile]
    calls = [(full, g.tile)] if full else []
    if n1 - 1 not in full:
        calls.append(([n1 - 1], g.rows(n1 - 1)))
    for tiles, k in calls:
        beta = 0.0 if tiles[0] == first else 1.0
        src = [pl.act_in(l, n, slot) for n in tiles]
        ex.gemm(blk(out, inp, k, lda=g.tile, ldb=inp, ldc=inp, dtype=g.dtype, beta=beta),
                "dzt", [pl.dzt(l, n) for n in tiles], src[0][0], [s[1] for s in src],
                "dwp", slot * pl.totals["w"] + pl.w_off[l])
        if g.has_bias:
            ex.gemm(blk(out, 1, k, lda=g.tile, ldb=1, ldc=1, dtype=g.dtype, beta=beta),
                    "dzt", [pl.dzt(l, n) for n in tiles], "ones", [0] * len(tiles),
                    "dbp", slot * pl.totals["b"] + pl.b_off[l])


def plan(g, pass_, train=False):
    """The recorded plan of the forward (pass_ "fwd", train: keep what backward
    reads) or the backward ("bwd": backward-data and weight gradients)."""
    def record():
        rec = P.Recorder(tensors(g, pass_, train))
        if pass_ == "fwd":
            forward_nest(rec, _loops(g), g, train)
        else:
            backward_nest(rec, _loops(g), g)
        return rec.finish()
    return _plans.get((g, pass_, train), record)


# ---------------------------------------------------------------- the layer stack

_ACT_GRAD = {"relu": lambda dy, y: dy * (y > 0), "sigmoid": lambda dy, y: dy * y * (1 - y),
             "tanh": lambda dy, y: dy * (1 - y * y)}


def fused(layers, dtype, backend, config):
    """What runs fc.MLP(fused=True)'s layers: Fused (recorded plans) on the CPU,
    the fused CUDA kernels on "cuda" (primitives/mlp_cuda.py), or None where
    those cannot take this MLP (then fc.MLP runs layer by layer, with a warning)."""
    if backend != "cuda":
        return Fused(layers, dtype, backend, config)
    import warnings

    from primitives import mlp_cuda
    try:
        return mlp_cuda.CudaFused(layers, dtype)
    except mlp_cuda.Unsupported as e:
        warnings.warn(f"fc.MLP(fused=True) runs layer by layer on 'cuda': {e}", stacklevel=3)
        return None


class Fused:
    """Runs fc.MLP's layers (their f32 weight and bias) as fused plans. forward
    and backward take and return plain arrays, as the unfused MLP's do; backward
    leaves dW, db on each layer (grad_weight, grad_bias, db)."""

    def __init__(self, layers, dtype, backend, config):
        if backend != "cpu":
            raise ValueError(f"backend: the fused MLP runs on 'cpu' and 'cuda' (got {backend!r}); "
                             f"use fused=False on other backends")
        self.layers, self.dtype, self.config = layers, dtype, config
        self.sizes = (layers[0].C,) + tuple(layer.K for layer in layers)
        self.acts = tuple(None if layer.activation in (None, "none") else layer.activation
                          for layer in layers)
        self.has_bias = layers[0].bias is not None
        self.g = self.saved = self.last = None
        self._buffers = {}
        self._kept = Recycler()  # h for backward: fresh while an earlier state is still held

    def _buffer(self, name, size, dtype):
        a = self._buffers.get(name)
        if a is None or a.size < size or a.dtype != dtype:
            a = self._buffers[name] = aligned_empty((max(size, 1),), dtype)
        # every task has tiles (per_task), so each partial dW, db is written with
        # beta 0 first; in check mode each hand-out is NaN-filled to prove it
        return poison(a[:max(size, 1)])

    def _weights(self, pl, backward):
        """All layers' W^T (the forward's B, [in][out]) or W (backward's, [out][in]),
        flat in the GEMMs' dtype, blocked afresh per call (a few KiB per layer)."""
        ab = dtypes.NUMPY[self.dtype]
        w = self._buffer("wt" if backward else "w", pl.totals["w"], ab)
        vnni = pl.vnni_bwd if backward else pl.vnni_fwd
        for l, layer in enumerate(self.layers):
            m = (layer.weight if backward else layer.weight.T).astype(ab)
            region = w[pl.w_off[l]:pl.w_off[l] + m.size]
            if l in vnni:
                vnni_tiles(np.ascontiguousarray(m), out=region.reshape(m.shape), threads=1)
            else:
                region[...] = m.reshape(-1)
        return w

    def forward(self, x, train=True):
        from primitives.fc import _dtype_of
        _dtype_of(self.dtype, x, names=("x",))
        if x.shape[1] != self.sizes[0]:
            raise ValueError(f"x: expected shape (N, {self.sizes[0]}), got {x.shape}")
        N = x.shape[0]
        if N == 0:
            raise ValueError("x: an empty batch is not supported")
        ab = dtypes.NUMPY[self.dtype]
        if train:
            # a new training forward replaces the kept state: let go of it first, so
            # its activation buffers go back to the recycler unless the caller took
            # them through state() (fresh ones cost a page fault per page)
            self.g = self.saved = None
        g = geometry(N, self.sizes, self.acts, self.has_bias, self.dtype, train, self.config)
        pl = Places(g, train)
        t = {"x": x if x.dtype == ab and x.flags.c_contiguous else convert(x, ab),
             "w": self._weights(pl, False),
             "y": _results.empty("y", (N, self.sizes[-1]), np.float32)}
        if g.has_bias:
            t["b"] = self._buffer("b", pl.totals["b"], np.float32)
            for l, layer in enumerate(self.layers):
                t["b"][pl.b_off[l]:pl.b_off[l] + layer.K] = layer.bias
        names = tensors(g, "fwd", train)
        for name in ("h", "h16", "s", "s16"):
            if name in names:
                size, dt = pl.totals["s" if name[0] == "s" else "h"], dtypes.NUMPY[names[name]]
                t[name] = self._kept.empty(name, (size,), dt) if train and name[0] == "h" else \
                    self._buffer(name, size, dt)
        plan(g, "fwd", train).run(**t)
        self.last = g
        self.g, self.saved = (g, t) if train else (None, None)
        # a bf16 caller gets bf16 back, through the parallel copy (NumPy's is serial)
        return t["y"] if x.dtype == np.float32 else convert(t["y"], x.dtype)

    def state(self):
        """What backward reads of the last training forward (for backward(state=))."""
        return self.g, self.saved

    def backward(self, dy, state=None):
        """dy [N, K] -> dx [N, C] for the last training forward (or `state`)."""
        from primitives.fc import _dtype_of
        _dtype_of(self.dtype, dy, names=("dy",))
        g, saved = state or (self.g, self.saved)
        if g is None or dy.shape != (g.N, self.sizes[-1]):
            raise ValueError(f"dy: expected the training forward's output shape "
                             f"{(g.N, self.sizes[-1]) if g else '(call forward first)'}, "
                             f"got {dy.shape}")
        ab = dtypes.NUMPY[self.dtype]
        pl = Places(g, True)
        dz = dy
        if self.acts[-1] is not None:
            dz = _ACT_GRAD[self.acts[-1]](dy.astype(np.float32, copy=False), saved["y"])
        dz = convert(dz, ab)  # dz itself when it already is C-contiguous in the GEMMs' dtype
        K = self.sizes[-1]
        dzt = self._buffer("dzt", pl.totals["dzt"], ab)
        last = dzt[pl.dzt_off[g.L - 1]:pl.dzt_off[g.L - 1] + g.Nb * K * g.tile]
        to_blocks(dz, K, g.tile, transpose=True, out=last.reshape(1, g.Nb, K, g.tile))
        names = tensors(g, "bwd", True)
        t = {"x": saved["x"], "wt": self._weights(pl, True), "dz": dz, "dzt": dzt,
             "dwp": self._buffer("dwp", g.tasks * pl.totals["w"], np.float32),
             "dx": _results.empty("dx", (g.N, self.sizes[0]), np.float32)}
        if g.has_bias:
            t["ones"] = np.ones(g.tile, ab)
            t["dbp"] = self._buffer("dbp", g.tasks * pl.totals["b"], np.float32)
        for name in ("h", "h16"):
            if name in names:
                t[name] = saved[name]
        for name in ("d", "d16", "g", "g16"):
            if name in names:
                t[name] = self._buffer(name, pl.totals["d" if name[0] == "d" else "g"],
                                       dtypes.NUMPY[names[name]])
        plan(g, "bwd").run(**t)
        dw = t["dwp"].reshape(g.tasks, -1).sum(axis=0)
        db = t["dbp"].reshape(g.tasks, -1).sum(axis=0) if g.has_bias else None
        for l, layer in enumerate(self.layers):
            layer._fused_dw = dw[pl.w_off[l]:pl.w_off[l] + layer.K * layer.C].reshape(layer.K,
                                                                                    layer.C)
            layer.db = db[pl.b_off[l]:pl.b_off[l] + layer.K] if g.has_bias else None
        dx = t["dx"]
        return dx if dy.dtype == np.float32 else convert(dx, dy.dtype)


# ---------------------------------------------------------------- tuning

def search(pass_, shape, threads=None):
    """The pipeline's legal (depth, tile) pairs for one MLP shape, the cost model
    above, and a timer that runs a training step (forward + backward) of an
    MLP with hidden width W (brgemm.tuning.Search)."""
    from brgemm.tuning import Search, best_time
    from primitives import fc
    if pass_ != "pipeline":
        raise ValueError(f"pass: the fused MLP tunes 'pipeline', got {pass_!r}")
    N, C, W, K, L = (shape[k] for k in ("N", "C", "W", "K", "L"))
    for name, v in (("N", N), ("C", C), ("W", W), ("K", K), ("L", L)):
        if v < 1:
            raise ValueError(f"shape: {name} = {v} must be at least 1")
    depths, tiles = candidates(shape)
    cands = [dict(depth=d, tile=t) for d in depths for t in tiles]
    sizes = [C] + [W] * (L - 1) + [K]
    rng = np.random.default_rng()
    x = rng.standard_normal((N, C)).astype(np.float32)
    dy = rng.standard_normal((N, K)).astype(np.float32)
    default = {k: v for k, v in settings("mlp", "pipeline", shape, SCHEMA["pipeline"]).items()}
    default = {**default_pipeline(shape, "f32", True), **default}
    default.pop("group", None)

    def time(cfg, threads_):
        net = fc.MLP(sizes, fused=True, config={"pipeline": cfg}, rng=rng)

        def step():
            net.forward(x)
            net.backward(dy)
        return best_time(step)
    return Search("mlp", "pipeline", dict(shape), default, cands,
                  lambda cfg: cost(shape, "f32", True, cfg["depth"], cfg["tile"]), time)
