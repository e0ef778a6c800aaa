"""Fully connected layers: y = x W^T + b, as loop nests around the batch-reduce kernel.

    x [N, C], w [K, C], b [K], y [N, K]        (torch.nn.functional.linear)

Blocked layouts (tiles of bn x bc etc., zero-padded; see brgemm/layouts.py):
    x  [Nb][Cb][bn][bc]    y, dy [Nb][Kb][bn][bk]    w  [Kb][Cb][bc][bk] (W^T tiles)
    wt [Cb][Kb][bk][bc]    xt [Cb][Nb][bc][bn]       dw [Kb][Cb][bc][bk]
Forward:        y[n][k]  = sum_c x[n][c] @ w[k][c]     (+ bias, activation on the last c)
Backward-data:  dx[n][c] = sum_k dy[n][k] @ wt[c][k]
Weight update:  dw[k][c] = sum_n xt[c][n] @ dy[n][k],   db = sum_n dy
Each nest's loops (in blocks): forward n, k and c (reduction chunks of `chunk`
blocks); backward n, c, k; update k, c, n. Specs and block sizes come from
configs/fc.toml (BRGEMM_CONFIG or config= override); the block sizes of the
[fwd] table are the layer's blocking for all three passes. A spec may name a
loop twice, blocking it by `group` blocks: "n|KCn" with group = 8 runs the
update's reduction 8 blocks per phase, so the blocks a thread reuses stay in
its L2 (see the LSTM's defaults).
"""
# Over 450 lines: the nests live in fc_forward/fc_backward/fc_update; what stays
# (geometry, plans, functional forms, Linear, MLP, search) shares the geometry,
# the plan cache and the buffer pools. Linear and MLP are next to move out.
import dataclasses
import functools

import numpy as np

from brgemm import dtypes
from brgemm import plan as bplan
from brgemm.arrays import Recycler, Scratch, aligned_empty
from brgemm.info import kernel_path
from brgemm.layouts import (column_sums, convert, from_blocks, nblocks, pick_block, to_blocks,
                            transpose_blocks)
from brgemm.loopspec import Loop, parse_spec
from brgemm.vnni import takes_vnni_b, vnni_tiles
from primitives import reuse as _reuse
from primitives._args import backend_name, block_sizes, fits, positive
from primitives._config import geometry as cached_geometry
from primitives._config import settings
from primitives.fc_backward import backward_nest, backward_plain_nest
from primitives.fc_forward import forward_nest, forward_plain_nest
from primitives.fc_update import update_nest, update_plain_nest

SHAPE = ("N", "C", "K")  # the dimensions of a shape key
SCHEMA = {"fwd": {"spec": str, "bn": int, "bc": int, "bk": int, "chunk": int, "group": int},
          "bwd": {"spec": str, "chunk": int, "group": int},
          "upd": {"spec": str, "chunk": int, "group": int}}
ACTIVATIONS = {None: (), "none": (), "relu": (bplan.relu(),), "sigmoid": (bplan.sigmoid(),),
               "tanh": (bplan.tanh(),)}
_plans = bplan.PlanCache(maxsize=128)


# ---------------------------------------------------------------- the loop nests
# one file per pass (fc_forward, fc_backward, fc_update), each with the nest on
# blocked tensors and the functional forms' nest on plain matrices.

# The functional forms read and write the caller's plain matrices where the
# kernel takes them at full speed: as its broadcast operand A (x, dy) and its
# output (y, dx, dW), row windows C or K apart. The operand it streams as B
# comes in tiles (w, wt, x in the update): read in place, rows C apart, the
# streamed operand misses the cache and both passes slowed down markedly
# (benchmarks/RESULTS.md). dy^T for the update is tiles too. Ragged edges get
# kernels of their own sizes, and a plain ragged last reduction block a call of
# its own (primitives._calls.reduction_calls):
#   forward   y[n rows, k cols]  = sum_c x[n][c] @ w[k][c]
#   backward  dx[n rows, c cols] = sum_k dy[n][k] @ wt[c][k]
#   update    dW[k rows, c cols] = sum_n dyt[k][n] @ x[n][c]

# ---------------------------------------------------------------- geometry and plans

@dataclasses.dataclass(frozen=True)
class Geometry:
    """Sizes, block sizes and block counts of one layer at one minibatch size."""
    N: int
    C: int
    K: int
    bn: int
    bc: int
    bk: int
    specs: tuple    # (fwd, bwd, upd) spec strings
    chunks: tuple   # (fwd, bwd, upd) reduction chunks, in blocks
    groups: tuple   # (fwd, bwd, upd) outer block of the loop a spec names twice, or None

    Nb = property(lambda g: nblocks(g.N, g.bn))
    Cb = property(lambda g: nblocks(g.C, g.bc))
    Kb = property(lambda g: nblocks(g.K, g.bk))
    chunk = property(lambda g: dict(zip(("fwd", "bwd", "upd"), g.chunks)))


def geometry(N, C, K, config=None, blocks=None, path=None):
    """Block sizes from the [fwd] config (or `blocks` = (bn, bc, bk) targets);
    path: the kernel path (brgemm.info.kernel_path), whose tables apply."""
    blocks = block_sizes(blocks)
    return cached_geometry("fc", (N, C, K, blocks, path), config,
                           lambda: _geometry(N, C, K, config, blocks, path))


def _geometry(N, C, K, config, blocks, path=None):
    shape = {"N": N, "C": C, "K": K}
    cfg = {p: settings("fc", p, shape, SCHEMA[p], config, path) for p in ("fwd", "bwd", "upd")}
    bn, bc, bk = blocks or (cfg["fwd"]["bn"], cfg["fwd"]["bc"], cfg["fwd"]["bk"])
    # feature blocks are the kernel's vector dimension in some pass: multiples of 16
    return Geometry(N, C, K, pick_block(N, bn), pick_block(C, bc, 16), pick_block(K, bk, 16),
                    tuple(cfg[p]["spec"] for p in ("fwd", "bwd", "upd")),
                    tuple(cfg[p]["chunk"] for p in ("fwd", "bwd", "upd")),
                    tuple(cfg[p].get("group") for p in ("fwd", "bwd", "upd")))


def _loops(g, pass_):
    i = ("fwd", "bwd", "upd").index(pass_)
    spec, group = g.specs[i], g.groups[i]
    dims = {"n": g.Nb, "c": g.Cb, "k": g.Kb}
    order = {"fwd": "nkc", "bwd": "nck", "upd": "kcn"}[pass_]  # the reduction last
    loops = []
    for name in order:
        step = g.chunks[i] if name == order[-1] else 1
        repeated = spec.lower().count(name) > 1
        if repeated and group is None:
            raise ValueError(f"group: spec {spec!r} names loop {name!r} twice, which needs "
                             f"the group (its outer block, in blocks) in the [{pass_}] config")
        loops.append(Loop(name, 0, dims[name], step, blocks=(group,) if repeated else ()))
    return parse_spec(spec, loops, where="config: ")


def _epilogue(g, pass_, has_bias, activation, bf16_out):
    """The ops on a finished output block, as data: bias, activation, bf16 copy."""
    out, (rows, cols) = {"fwd": ("y", (g.bn, g.bk)), "bwd": ("dx", (g.bn, g.bc)),
                         "upd": ("dw", (g.bc, g.bk))}[pass_]
    outer = {"fwd": g.Kb, "bwd": g.Cb, "upd": g.Cb}[pass_]

    def ops(i, j):
        extra = ()
        if pass_ == "fwd":
            extra = ((bplan.bias("b", j * g.bk),) if has_bias else ()) + ACTIVATIONS[activation]
        if bf16_out:
            extra += (bplan.store_bf16(out + "16", (i * outer + j) * rows * cols, cols),)
        return extra
    return ops


_NESTS = {"fwd": forward_nest, "bwd": backward_nest, "upd": update_nest}
_TENSORS = {"fwd": ("x", "w", "y"), "bwd": ("dy", "wt", "dx"), "upd": ("xt", "dy", "dw")}
_PLAIN_NESTS = {"fwd": forward_plain_nest, "bwd": backward_plain_nest, "upd": update_plain_nest}
_PLAIN_TENSORS = {"fwd": ("x", "w", "y"), "bwd": ("dy", "wt", "dx"), "upd": ("dyt", "x", "dw")}


def vnni_passes(g, dtype, backend, plain=False):
    """The passes whose B tiles are kept in VNNI pairs here (AMX): the forward's
    w (depth bc), the backward's wt (bk), the update's dy (bn; x in the plain
    plans). The plain plans' ragged last reduction block must fit too."""
    depth = {"fwd": (g.bc, g.C % g.bc), "bwd": (g.bk, g.K % g.bk), "upd": (g.bn, 0)}
    return frozenset(p for p, (k, rest) in depth.items() if takes_vnni_b(k, dtype, backend)
                     and (not plain or rest == 0 or takes_vnni_b(rest, dtype, backend)))


def plan(g, pass_, dtype="f32", has_bias=False, activation=None, bf16_out=False, plain=False,
         vnni=False):
    """The recorded plan of one pass (cached by geometry and options); plain: the
    functional form's plan, on plain matrices as the plain nests above say;
    vnni: the plan's B tiles (w, wt, and dy or x in the update) in VNNI pairs
    (see vnni_passes)."""
    if plain and bf16_out:
        raise ValueError("bf16_out: the plain (functional) plans write f32 only")
    key = (g, pass_, dtype, has_bias, activation, bf16_out, plain, vnni)

    def record():
        a, b, c = (_PLAIN_TENSORS if plain else _TENSORS)[pass_]
        tensors = {a: dtype, b: dtype, c: "f32"}
        if pass_ == "fwd" and has_bias:
            tensors["b"] = "f32"
        if bf16_out:
            tensors[c + "16"] = "bf16"
        rec = bplan.Recorder(tensors, spec=g.specs[("fwd", "bwd", "upd").index(pass_)])
        nest = functools.partial((_PLAIN_NESTS if plain else _NESTS)[pass_], vnni=vnni)
        nest(rec, _loops(g, pass_), g, dtype, _epilogue(g, pass_, has_bias, activation, bf16_out))
        return rec.finish()
    return _plans.get(key, record)


# ---------------------------------------------------------------- functional API

_scratch = Scratch()  # the layout copies of functional calls
_results = Recycler()  # the arrays the functional forms return
_buffer = _scratch.get


def _plain(a, dtype, name):
    """a as the C-contiguous matrix of `dtype` a plain plan reads: a itself if it
    is one, else a parallel copy (bf16 rounded from f32) into a scratch buffer."""
    if a.dtype == dtype and a.flags.c_contiguous:
        return a
    return convert(a, dtype, out=_buffer(name, a.shape, dtype))


def _result(a, dtype, name):
    """The f32 result a, in the caller's dtype (bf16: rounded in parallel)."""
    return a if a.dtype == dtype else convert(a, dtype, out=_results.empty(name, a.shape, dtype))


def _weights(w, g, dtype, role, token, vnni=False):
    """W^T tiles for the forward (role "w") or W tiles for backward-data ("wt"),
    in VNNI pairs with vnni, kept under `token` while provably unchanged
    (primitives.reuse)."""
    ab = dtypes.NUMPY[dtype]
    shape = (g.Kb, g.Cb, g.bc, g.bk) if role == "w" else (g.Cb, g.Kb, g.bk, g.bc)
    br, bs = (g.bc, g.bk) if role == "w" else (g.bk, g.bc)

    def blocked():
        t = to_blocks(w, br, bs, transpose=role == "w", swap_grid=True, dtype=ab,
                      out=None if token else _buffer(role, shape, ab))
        return vnni_tiles(t, out=None if token else _buffer(role + "_vnni", shape, ab)) \
            if vnni else t
    return _reuse.blocked(token, ("fc", role, g, dtype, vnni), (w,), blocked)


def _dtype_of(dtype, *arrays, names):
    dtypes.check_name(dtype)
    allowed = (dtypes.float32,) if dtype == "f32" else (dtypes.float32, dtypes.bfloat16)
    for x, name in zip(arrays, names):
        if not isinstance(x, np.ndarray):
            raise TypeError(f"{name}: expected a numpy.ndarray, got {type(x).__name__}")
        if x.dtype not in allowed:
            raise TypeError(f"{name}: expected dtype {' or '.join(str(a) for a in allowed)} "
                            f"for dtype={dtype!r}, got {x.dtype}")
        if x.ndim != 2 and name != "b":
            raise ValueError(f"{name}: expected 2 dimensions, got shape {x.shape}")
    return arrays[0].dtype


def forward(x, w, b=None, dtype="f32", backend=None, config=None, reuse=None):
    """y = x @ w.T + b (F.linear). x [N, C], w [K, C], b [K] or None -> y [N, K].
    reuse: keep w's blocked copy across calls (primitives.reuse)."""
    out_dtype = _dtype_of(dtype, x, w, names=("x", "w"))
    token = _reuse.check(reuse)
    backend = backend_name(backend)
    (N, C), K = x.shape, w.shape[0]
    if w.shape[1] != C:
        raise ValueError(f"w: expected shape (K, {C}) to match x's {C} columns, got {w.shape}")
    if b is not None:
        _dtype_of(dtype, b, names=("b",))
        if b.shape != (K,):
            raise ValueError(f"b: expected shape ({K},), got {b.shape}")
    if N == 0 or K == 0 or C == 0:
        raise ValueError(f"x, w: empty sizes N={N}, C={C}, K={K} are not supported")
    g = geometry(N, C, K, config, path=kernel_path(dtype, backend))
    ab = dtypes.NUMPY[dtype]
    # x and y stay plain; W^T comes in tiles, re-blocked per call unless kept
    # (reuse=): read in place, W's rows would be the streamed operand C apart,
    # which slows the kernel calls down (see the note above fc's nests)
    y = _results.empty("y", (N, K), np.float32) if out_dtype == np.float32 else \
        _buffer("y", (N, K), np.float32)
    vnni = "fwd" in vnni_passes(g, dtype, backend, plain=True)
    t = dict(x=_plain(x, ab, "x"), y=y, w=_weights(w, g, dtype, "w", token, vnni))
    if b is not None:
        t["b"] = np.ascontiguousarray(b, dtype=np.float32)
    plan(g, "fwd", dtype, has_bias=b is not None, plain=True, vnni=vnni).run(backend=backend, **t)
    return _result(y, out_dtype, "y")


def backward(dy, x, w, dtype="f32", backend=None, config=None, reuse=None):
    """Gradients of y = x @ w.T + b: dx [N, C], dw [K, C], db [K]. reuse: keep
    w's blocked copy across calls (primitives.reuse)."""
    out_dtype = _dtype_of(dtype, dy, x, w, names=("dy", "x", "w"))
    token = _reuse.check(reuse)
    backend = backend_name(backend)
    (N, C), K = x.shape, w.shape[0]
    if w.shape[1] != C:
        raise ValueError(f"w: expected shape (K, {C}) to match x's {C} columns, got {w.shape}")
    if dy.shape != (N, K):
        raise ValueError(f"dy: expected shape ({N}, {K}), got {dy.shape}")
    if N == 0 or K == 0 or C == 0:
        raise ValueError(f"x, w: empty sizes N={N}, C={C}, K={K} are not supported")
    g = geometry(N, C, K, config, path=kernel_path(dtype, backend))
    ab = dtypes.NUMPY[dtype]
    f32 = out_dtype == np.float32
    dy_p = _plain(dy, ab, "dy")
    dx = _results.empty("dx", (N, C), np.float32) if f32 else _buffer("dx", (N, C), np.float32)
    vnni = vnni_passes(g, dtype, backend, plain=True)
    plan(g, "bwd", dtype, plain=True, vnni="bwd" in vnni).run(
        backend=backend, dy=dy_p, dx=dx, wt=_weights(w, g, dtype, "wt", token, "bwd" in vnni))
    dw = _results.empty("dw", (K, C), np.float32) if f32 else _buffer("dw", (K, C), np.float32)
    xb = to_blocks(x, g.bn, g.bc, dtype=ab, out=_buffer("x", (g.Nb, g.Cb, g.bn, g.bc), ab))
    if "upd" in vnni:  # the update streams x's tiles: VNNI pairs, once per call
        xb = vnni_tiles(xb, out=_buffer("x_vnni", xb.shape, ab))
    plan(g, "upd", dtype, plain=True, vnni="upd" in vnni).run(
        backend=backend, dw=dw, x=xb,
        dyt=to_blocks(dy_p, g.bk, g.bn, transpose=True,
                      out=_buffer("dyt", (g.Kb, g.Nb, g.bk, g.bn), ab)))
    db = column_sums(dy, out=_results.empty("db", (K,), np.float32) if f32 else None)
    return (_result(dx, out_dtype, "dx"), _result(dw, out_dtype, "dw"),
            _result(db, out_dtype, "db"))


# ---------------------------------------------------------------- layers

_ACT_GRAD = {  # dL/dz from dL/dy and y = act(z)
    "relu": lambda dy, y: dy * (y > 0),
    "sigmoid": lambda dy, y: dy * y * (1 - y),
    "tanh": lambda dy, y: dy * (1 - y * y),
}


class Linear:
    """y = act(x W^T + b) that keeps weights, activations and plans blocked.

    forward/backward take and return plain [N, *] arrays; the *_blocked methods
    work on the blocked layouts directly (what an MLP chains and what the
    benchmarks time). Weights are kept in f32 (`weight` [K, C], `bias` [K]);
    with dtype "bf16" their blocked copies and the activations are bf16."""

    def __init__(self, C, K, bias=True, activation=None, dtype="f32", backend=None,
                 config=None, blocks=None, rng=None):
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation: expected one of relu, sigmoid, tanh, none, "
                             f"got {activation!r}")
        self.backend = backend_name(backend)
        self.C, self.K = positive(C, "C"), positive(K, "K")
        self.dtype, self.activation = dtypes.check_name(dtype), activation
        self.config, self.blocks = config, block_sizes(blocks)
        rng = rng or np.random.default_rng()
        bound = 1 / np.sqrt(C)  # torch.nn.Linear's initialisation
        self.weight = rng.uniform(-bound, bound, (K, C)).astype(np.float32)
        self.bias = rng.uniform(-bound, bound, K).astype(np.float32) if bias else None
        self.g = None

    # -- set-up per minibatch size --
    def prepare(self, N):
        """Geometry, plans and blocked buffers for minibatch N (done once per N)."""
        if self.g is not None and self.g.N == N:
            return self.g
        g = self.g = geometry(N, self.C, self.K, self.config, self.blocks,
                              kernel_path(self.dtype, self.backend))
        bf16 = self.dtype == "bf16"
        ab = dtypes.NUMPY[self.dtype]
        vnni = self.vnni = vnni_passes(g, self.dtype, self.backend)
        self.plans = {"fwd": plan(g, "fwd", self.dtype, self.bias is not None,
                                  None if self.activation == "none" else self.activation, bf16,
                                  vnni="fwd" in vnni),
                      "bwd": plan(g, "bwd", self.dtype, bf16_out=bf16, vnni="bwd" in vnni),
                      "upd": plan(g, "upd", self.dtype, vnni="upd" in vnni)}
        self.dy_vnni = aligned_empty((g.Nb, g.Kb, g.bn, g.bk), ab) if "upd" in vnni else None
        self.y = aligned_empty((g.Nb, g.Kb, g.bn, g.bk), np.float32)
        self.y16 = aligned_empty(self.y.shape, ab) if bf16 else None
        self.dx = aligned_empty((g.Nb, g.Cb, g.bn, g.bc), np.float32)
        self.dx16 = aligned_empty(self.dx.shape, ab) if bf16 else None
        self.dw = aligned_empty((g.Kb, g.Cb, g.bc, g.bk), np.float32)
        self.xt = aligned_empty((g.Cb, g.Nb, g.bc, g.bn), ab)
        self.load_weights()
        return g

    def load_weights(self):
        """Re-block weight and bias after they changed (done by step())."""
        g, ab = self.g, dtypes.NUMPY[self.dtype]
        if g is None:
            return
        weight = self.weight.astype(ab, copy=False)
        self.w = to_blocks(weight, g.bc, g.bk, transpose=True, swap_grid=True)
        self.wt = to_blocks(weight, g.bk, g.bc, swap_grid=True)
        if "fwd" in self.vnni:  # AMX reads B tiles as VNNI pairs: repacked once per change
            self.w = vnni_tiles(self.w)
        if "bwd" in self.vnni:
            self.wt = vnni_tiles(self.wt)
        self.b = np.zeros(g.Kb * g.bk, np.float32)
        if self.bias is not None:
            self.b[:self.K] = self.bias

    # -- blocked passes --
    def forward_blocked(self, x):
        """x [Nb][Cb][bn][bc] of dtype -> y [Nb][Kb][bn][bk] (f32; bf16 too for bf16)."""
        t = dict(x=x, w=self.w, y=self.y)
        if self.bias is not None:
            t["b"] = self.b
        if self.y16 is not None:
            t["y16"] = self.y16
        self.plans["fwd"].run(backend=self.backend, **t)
        self.x = x
        return self.y16 if self.y16 is not None else self.y

    def backward_data_blocked(self, dz):
        """dz (gradient at the pre-activation, blocked like y) -> dx [Nb][Cb][bn][bc]."""
        t = dict(dy=dz, wt=self.wt, dx=self.dx)
        if self.dx16 is not None:
            t["dx16"] = self.dx16
        self.plans["bwd"].run(backend=self.backend, **t)
        return self.dx16 if self.dx16 is not None else self.dx

    def update_blocked(self, dz):
        """dW^T tiles into self.dw and db from dz; needs the forward's x."""
        transpose_blocks(self.x, out=self.xt)  # [Cb][Nb][bc][bn]: x^T tiles
        dy = dz if self.dy_vnni is None else vnni_tiles(np.ascontiguousarray(dz), out=self.dy_vnni)
        self.plans["upd"].run(backend=self.backend, xt=self.xt, dy=dy, dw=self.dw)
        if self.bias is not None:
            self.db = dz.astype(np.float32, copy=False).sum(axis=(0, 2)).reshape(-1)[:self.K]

    def backward_blocked(self, dy):
        """dy blocked like y -> dx blocked like x; fills the weight gradients."""
        dz = dy
        if self.activation in _ACT_GRAD:
            dz = _ACT_GRAD[self.activation](dy.astype(np.float32), self.y)
            dz = dz.astype(dtypes.NUMPY[self.dtype])
        dx = self.backward_data_blocked(dz)
        self.update_blocked(dz)
        return dx

    # -- plain arrays --
    def forward(self, x):
        """x [N, C] -> y [N, K] in x's dtype."""
        _dtype_of(self.dtype, x, names=("x",))
        if x.shape[1] != self.C or x.shape[0] == 0:
            raise ValueError(f"x: expected shape (N, {self.C}) with N >= 1, got {x.shape}")
        g = self.prepare(x.shape[0])
        xb = to_blocks(x.astype(dtypes.NUMPY[self.dtype], copy=False), g.bn, g.bc)
        return from_blocks(self.forward_blocked(xb), g.N, self.K, dtype=x.dtype)

    def backward(self, dy):
        """dy [N, K] -> dx [N, C]; grad_weight and grad_bias hold dW, db."""
        _dtype_of(self.dtype, dy, names=("dy",))
        if self.g is None or dy.shape != (self.g.N, self.K):
            raise ValueError(f"dy: expected the forward's output shape "
                             f"{(self.g.N, self.K) if self.g else '(call forward first)'}, "
                             f"got {dy.shape}")
        g = self.g
        dyb = to_blocks(dy.astype(dtypes.NUMPY[self.dtype], copy=False), g.bn, g.bk)
        return from_blocks(self.backward_blocked(dyb), g.N, self.C, dtype=dy.dtype)

    @property
    def grad_weight(self):
        if getattr(self, "_fused_dw", None) is not None:  # left by a fused MLP's backward
            return self._fused_dw
        return from_blocks(self.dw, self.C, self.K, transpose=True, swap_grid=True)

    @property
    def grad_bias(self):
        return self.db if self.bias is not None else None

    def step(self, lr):
        """Plain SGD on the f32 weights, then re-block them."""
        self.weight -= np.float32(lr) * self.grad_weight
        if self.bias is not None:
            self.bias -= np.float32(lr) * self.db
        self.load_weights()


class MLP:
    """A stack of Linear layers that hands blocked activations from one to the
    next (one feature block size for all, so layer i's y is layer i+1's x).
    fused=True runs all layers per batch tile instead (primitives/mlp.py; its
    pipeline config replaces `blocks`): same weights, results and methods."""

    def __init__(self, sizes, activation="relu", last_activation=None, bias=True,
                 dtype="f32", backend=None, config=None, blocks=(64, 64, 64), rng=None,
                 fused=False):
        if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__len__"):
            raise TypeError(f"sizes: expected a list of layer sizes, got {type(sizes).__name__}")
        if len(sizes) < 2:
            raise ValueError(f"sizes: need at least an input and an output size, got {sizes!r}")
        sizes = [positive(s, "sizes") for s in sizes]
        blocks = block_sizes(blocks)
        if blocks is None:
            raise TypeError("blocks: the MLP needs block sizes (bn, bc, bk)")
        if blocks[1] != blocks[2]:
            raise ValueError(f"blocks: input and output feature blocks must match, got {blocks}")
        if not isinstance(fused, bool):
            raise TypeError(f"fused: expected True or False, got {fused!r}")
        rng = rng or np.random.default_rng()
        self.layers = [Linear(c, k, bias, activation if i < len(sizes) - 2 else last_activation,
                              dtype, backend, config, blocks, rng)
                       for i, (c, k) in enumerate(zip(sizes[:-1], sizes[1:]))]
        self.dtype = dtype
        self.fused = None
        if fused:
            from primitives import mlp
            self.fused = mlp.fused(self.layers, dtype, self.layers[0].backend, config)

    def forward(self, x, train=True):
        """x [N, C] -> y [N, K]; train=False lets the fused MLP skip keeping the
        activations backward reads (the unfused one always keeps them)."""
        if self.fused is not None:
            return self.fused.forward(x, train)
        first, last = self.layers[0], self.layers[-1]
        _dtype_of(self.dtype, x, names=("x",))
        if x.shape[1] != first.C or x.shape[0] == 0:
            raise ValueError(f"x: expected shape (N, {first.C}) with N >= 1, got {x.shape}")
        N = x.shape[0]
        for layer in self.layers:
            layer.prepare(N)
        h = to_blocks(x.astype(dtypes.NUMPY[self.dtype], copy=False), first.g.bn, first.g.bc)
        for layer in self.layers:
            h = layer.forward_blocked(h)
        return from_blocks(h, N, last.K, dtype=x.dtype)

    def backward(self, dy):
        if self.fused is not None:
            return self.fused.backward(dy)
        last = self.layers[-1]
        _dtype_of(self.dtype, dy, names=("dy",))
        if last.g is None or dy.shape != (last.g.N, last.K):
            raise ValueError(f"dy: expected the forward's output shape, got {dy.shape}")
        d = to_blocks(dy.astype(dtypes.NUMPY[self.dtype], copy=False), last.g.bn, last.g.bk)
        for layer in reversed(self.layers):
            d = layer.backward_blocked(d)
        first = self.layers[0]
        return from_blocks(d, first.g.N, first.C, dtype=dy.dtype)

    def step(self, lr):
        for layer in self.layers:
            layer.step(lr)


# ---------------------------------------------------------------- tuning

def search(pass_, shape, threads=None):
    """Configs the tuner may try for one pass of this shape (brgemm.tuning.Search).
    fwd tunes the blocking too (it is the layer's blocking for all passes);
    bwd and upd tune their loop order and reduction chunk on that blocking."""
    import itertools

    from brgemm.tuning import Search, best_time
    if pass_ not in SCHEMA:
        raise ValueError(f"pass: expected fwd, bwd or upd, got {pass_!r}")
    N, C, K = shape["N"], shape["C"], shape["K"]
    for name in ("N", "C", "K"):
        if shape[name] < 1:
            raise ValueError(f"shape: {name} = {shape[name]} must be at least 1")
    fits(4 * 4 * (N * C + N * K + K * C), "shape", f"fc N={N}, C={C}, K={K} with its copies")
    specs = {"fwd": ["NKc", "KNc", "Nkc", "Knc", "nKc", "kNc"],
             "bwd": ["NCk", "CNk", "Nck", "Cnk", "nCk", "cNk"],
             "upd": ["KCn", "CKn", "Kcn", "Ckn", "kCn", "cKn"]}[pass_]
    chunks = (1024, 8, 4)
    if pass_ == "fwd":
        cands = [dict(spec=s, bn=bn, bc=bc, bk=bk, chunk=ch)
                 for s, bn, bc, bk, ch in itertools.product(specs, (32, 64, 128), (32, 64, 128),
                                                            (32, 64, 128), chunks)
                 if bn <= max(N, 32) and bc <= max(C, 32) and bk <= max(K, 32)]
    else:
        cands = [dict(spec=s, chunk=ch) for s, ch in itertools.product(specs, chunks)]
    rng = np.random.default_rng()
    x = rng.standard_normal((N, C)).astype(np.float32)
    dy = rng.standard_normal((N, K)).astype(np.float32)

    def cost(cfg):
        # wide vector blocks and several blocks per call run best; the parallel
        # loops need at least a few tasks per thread
        full = {**settings("fc", "fwd", shape, SCHEMA["fwd"]), **cfg} if pass_ == "fwd" else \
            settings("fc", "fwd", shape, SCHEMA["fwd"])
        bn, bc, bk = full["bn"], full["bc"], full["bk"]
        eff = min(1, bk / 64) * min(1, bn / 32) * min(1, bc / 32)
        par = sum(ch.isupper() for ch in cfg.get("spec", "NK"))
        return 2.0 * N * C * K / (eff * 50e9) / min(par, 2) * (1 + 0.1 * (cfg["chunk"] < 16))

    def time(cfg, threads_):
        # the other passes as configured (BRGEMM_CONFIG included): bwd and upd are
        # tuned on the blocking that a tuned fwd chose
        others = {p: settings("fc", p, shape, SCHEMA[p]) for p in SCHEMA if p != pass_}
        lin = Linear(C, K, config={**others, pass_: cfg}, rng=rng)
        g = lin.prepare(N)
        xb, dyb = to_blocks(x, g.bn, g.bc), to_blocks(dy, g.bn, g.bk)
        lin.forward_blocked(xb)
        lin.update_blocked(dyb)  # fills lin.xt, which upd reads
        run = {"fwd": lambda: lin.plans["fwd"].run(threads=threads_, x=xb, w=lin.w, y=lin.y,
                                                   b=lin.b),
               "bwd": lambda: lin.plans["bwd"].run(threads=threads_, dy=dyb, wt=lin.wt, dx=lin.dx),
               "upd": lambda: lin.plans["upd"].run(threads=threads_, xt=lin.xt, dy=dyb,
                                                   dw=lin.dw)}[pass_]
        return best_time(run)

    default = settings("fc", pass_, shape, SCHEMA[pass_])
    return Search("fc", pass_, dict(shape), default, cands, cost, time)
