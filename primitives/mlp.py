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
                partials are added at the end); db_l = the column sums of dz_l, added
                up by the epilogue that makes dz_l (the last layer's, whose dz no
                epilogue makes, as a batch-reduce GEMM against a column of ones).
Training keeps h for backward (in bf16 runs only in bf16, from which act' comes
too, as in PyTorch's bf16 autograd); backward's epilogues
write dz^T tiles next to it for the weight gradients. Activations crossing a
segment boundary go to memory ([N, width] buffers); inside a segment they only
touch the task's slot. `pipeline` in configs/mlp.toml (or config=) sets depth,
tile and group; unset, cost() picks them (the model is in its docstring).
A segment runs over the whole batch before the next starts (a barrier
between them), so depth 1 is layer by layer through memory, as unfused.
"""
import dataclasses

import numpy as np

from brgemm import dtypes
from brgemm import plan as bplan
from brgemm.arrays import Buffers, Recycler
from brgemm.layouts import convert, to_blocks
from brgemm.vnni import vnni_tiles
from primitives._args import operands, weight_array
from primitives._config import settings
from primitives.fc_layers import batch_fits
from primitives.fc_plans import ACT_GRAD
from primitives.mlp_cost import candidates, cost, default_pipeline
from primitives.mlp_cost import (  # noqa: F401  (public names)
    BYTES_PER_S, CALL_ROWS, FLOPS_PER_CORE, L1_BYTES, L2_BYTES, L2_BYTES_PER_S)
from primitives.mlp_nests import Places, _loops, backward_nest, forward_nest, tensors
from primitives.mlp_nests import SPEC  # noqa: F401  (public names)

SCHEMA = {"pipeline": {"depth": int, "tile": int, "group": int}}
TASKS = 64         # parallel tasks (at most): enough for 16-32 threads to share evenly
_plans = bplan.PlanCache(maxsize=32)
_results = Recycler()  # y and dx, handed back once callers let go of them


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


# ---------------------------------------------------------------- the loop nests


def plan(g, pass_, train=False, out16=False):
    """The recorded plan of the forward (pass_ "fwd", train: keep what backward
    reads) or the backward ("bwd": backward-data and weight gradients); out16:
    its result (y, dx) in bf16 (Places)."""
    def record():
        rec = bplan.Recorder(tensors(g, pass_, train, out16))
        if pass_ == "fwd":
            forward_nest(rec, _loops(g), g, train, out16)
        else:
            backward_nest(rec, _loops(g), g, out16)
        return rec.finish()
    return _plans.get((g, pass_, train, out16), record)


# ---------------------------------------------------------------- the layer stack

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
        self._buffers = Buffers()
        self._kept = Recycler()  # h for backward: fresh while an earlier state is still held

    def __getstate__(self):
        """What a copy (copy.deepcopy, pickle) keeps: the layers and arguments;
        no training forward's state, no buffers."""
        keep = ("layers", "dtype", "config", "sizes", "acts", "has_bias")
        return {k: self.__dict__[k] for k in keep}

    def __setstate__(self, state):
        self.__dict__.update(state, g=None, saved=None, last=None)
        self._buffers, self._kept = Buffers(), Recycler()

    def _buffer(self, name, size, dtype):
        # every task has tiles (per_task), so each partial dW, db is written with
        # beta 0 first; in check mode each hand-out is NaN-filled to prove it
        return self._buffers.get(name, (max(size, 1),), dtype)

    def _weights(self, pl, backward):
        """All layers' W^T (the forward's B, [in][out]) or W (backward's, [out][in]),
        flat in the GEMMs' dtype, blocked afresh per call (a few KiB per layer)."""
        ab = dtypes.NUMPY[self.dtype]
        w = self._buffer("wt" if backward else "w", pl.totals["w"], ab)
        vnni = pl.vnni_bwd if backward else pl.vnni_fwd
        for l, layer in enumerate(self.layers):
            weight_array(layer.weight, f"layers[{l}].weight", (layer.K, layer.C))
            m = (layer.weight if backward else layer.weight.T).astype(ab)
            region = w[pl.w_off[l]:pl.w_off[l] + m.size]
            if l in vnni:
                vnni_tiles(np.ascontiguousarray(m), out=region.reshape(m.shape), threads=1)
            else:
                region[...] = m.reshape(-1)
        return w

    def forward(self, x, train=True):
        operands(self.dtype, x, names=("x",))
        if x.shape[1] != self.sizes[0]:
            raise ValueError(f"x: expected shape (N, {self.sizes[0]}), got {x.shape}")
        N = x.shape[0]
        if N == 0:
            raise ValueError("x: an empty batch is not supported")
        batch_fits(x, self.sizes)
        ab = dtypes.NUMPY[self.dtype]
        if train:
            # a new training forward replaces the kept state: let go of it first, so
            # its activation buffers go back to the recycler unless the caller took
            # them through state() (fresh ones cost a page fault per page)
            self.g = self.saved = None
        g = geometry(N, self.sizes, self.acts, self.has_bias, self.dtype, train, self.config)
        # y leaves the plan in bf16 for a bf16 caller, and for a bf16 MLP whatever
        # the caller's dtype: the unfused MLP's last layer rounds its y to bf16 too
        out16 = x.dtype == dtypes.bfloat16 or self.dtype == "bf16"
        pl = Places(g, train, out16)
        xs = x if x.dtype == ab and x.flags.c_contiguous else convert(x, ab)
        if train and xs is x:  # backward reads it: a copy of its own (a caller may
            # refill x, a batch buffer, before backward), as of y below
            xs = self._kept.empty("x", x.shape, ab)
            np.copyto(xs, x)
        t = {"x": xs, "w": self._weights(pl, False)}
        if pl.y32:
            t["y"] = _results.empty("y", (N, self.sizes[-1]), np.float32)
        if out16:
            t["y16"] = _results.empty("y16", (N, self.sizes[-1]), dtypes.bfloat16)
        if g.has_bias:
            t["b"] = self._buffer("b", pl.totals["b"], np.float32)
            for l, layer in enumerate(self.layers):
                t["b"][pl.b_off[l]:pl.b_off[l] + layer.K] = layer.bias
        names = tensors(g, "fwd", train, out16)
        for name in ("h", "h16", "s", "s16"):
            if name in names:
                size, dt = pl.totals["s" if name[0] == "s" else "h"], dtypes.NUMPY[names[name]]
                t[name] = self._kept.empty(name, (size,), dt) if train and name[0] == "h" else \
                    self._buffer(name, size, dt)
        plan(g, "fwd", train, out16).run(**t)
        self.last = g
        y = t.get("y")
        if train and self.acts[-1] is not None and not out16:
            # backward reads y for the last activation's derivative: a copy of its
            # own, since the caller may change the y it gets (y -= target) first
            t["y"] = self._kept.empty("y_act", y.shape, np.float32)
            np.copyto(t["y"], y)
        self.g, self.saved = (g, t) if train else (None, None)
        return y if not out16 else t["y16"] if x.dtype == dtypes.bfloat16 else \
            t["y16"].astype(x.dtype)

    def state(self):
        """What backward reads of the last training forward (for backward(state=))."""
        return self.g, self.saved

    def backward(self, dy, state=None):
        """dy [N, K] -> dx [N, C] for the last training forward (or `state`)."""
        operands(self.dtype, dy, names=("dy",))
        g, saved = state or (self.g, self.saved)
        if g is None or dy.shape != (g.N, self.sizes[-1]):
            want = (g.N, self.sizes[-1]) if g else "(call forward(x, train=True) first)"
            raise ValueError(f"dy: expected the training forward's output shape {want}, "
                             f"got {dy.shape}")
        ab = dtypes.NUMPY[self.dtype]
        out16 = dy.dtype == dtypes.bfloat16 or self.dtype == "bf16"  # dx in bf16, as y
        pl = Places(g, True, out16)
        dz = dy
        if self.acts[-1] is not None:
            dz = ACT_GRAD[self.acts[-1]](dy.astype(np.float32, copy=False), saved["y"])
        dz = convert(dz, ab)  # dz itself when it already is C-contiguous in the GEMMs' dtype
        K = self.sizes[-1]
        dzt = self._buffer("dzt", pl.totals["dzt"], ab)
        last = dzt[pl.dzt_off[g.L - 1]:pl.dzt_off[g.L - 1] + g.Nb * K * g.tile]
        to_blocks(dz, K, g.tile, transpose=True, out=last.reshape(1, g.Nb, K, g.tile))
        names = tensors(g, "bwd", True, out16)
        t = {"x": saved["x"], "wt": self._weights(pl, True), "dz": dz, "dzt": dzt,
             "dwp": self._buffer("dwp", g.tasks * pl.totals["w"], np.float32)}
        if out16:
            t["dx16"] = _results.empty("dx16", (g.N, self.sizes[0]), dtypes.bfloat16)
        else:
            t["dx"] = _results.empty("dx", (g.N, self.sizes[0]), np.float32)
        if g.has_bias:  # the epilogues add each tile's column sums to their task's
            t["dbp"] = self._buffer("dbp", g.tasks * pl.totals["b"], np.float32)
            t["dbp"][...] = 0
            t["ones"] = np.ones(g.tile, ab)
        for name in ("h", "h16"):
            if name in names:
                t[name] = saved[name]
        for name in ("d", "d16", "g", "g16"):
            if name in names:
                t[name] = self._buffer(name, pl.totals["d" if name[0] == "d" else "g"],
                                       dtypes.NUMPY[names[name]])
        plan(g, "bwd", out16=out16).run(**t)
        dw = t["dwp"].reshape(g.tasks, -1).sum(axis=0)
        db = t["dbp"].reshape(g.tasks, -1).sum(axis=0) if g.has_bias else None
        for l, layer in enumerate(self.layers):
            layer._fused_dw = dw[pl.w_off[l]:pl.w_off[l] + layer.K * layer.C].reshape(layer.K,
                                                                                    layer.C)
            layer.db = db[pl.b_off[l]:pl.b_off[l] + layer.K] if g.has_bias else None
        return t["dx"] if not out16 else t["dx16"] if dy.dtype == dtypes.bfloat16 else \
            t["dx16"].astype(dy.dtype)


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
