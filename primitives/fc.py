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
[fwd] table are the layer's blocking for all three passes (the functional
backward's update, on tiles of its own, takes its minibatch block from the
[upd] table's bn where one is set). A spec may name a
loop twice, blocking it by `group` blocks: "n|KCn" with group = 8 runs the
update's reduction 8 blocks per phase, so the blocks a thread reuses stay in
its L2 (see the LSTM's defaults).
"""
import functools

import numpy as np

from brgemm import dtypes
from brgemm.arrays import Recycler, Scratch
from brgemm.info import kernel_path
from brgemm.layouts import column_sums, convert, to_blocks
from brgemm.machine import cpu_threads
from primitives import reuse as _reuse
from primitives._args import backend_name, bias_vector, fits, flag, operands
from primitives._config import cached, settings
from primitives.call_memo import CallMemo
from primitives.fc_backward import backward_nest, backward_plain_nest  # noqa: F401  (public names)
from primitives.fc_forward import forward_nest, forward_plain_nest  # noqa: F401  (public names)
from primitives.fc_update import update_nest, update_plain_nest  # noqa: F401  (public names)
from primitives.fc_plans import (SCHEMA, geometry, plain_update, plan, plan_copying, plan_t,
                                 vnni_passes)
from primitives.fc_plans import ACTIVATIONS, Geometry, SHAPE  # noqa: F401  (public names)
from primitives.fc_layers import Linear
from primitives.fc_layers import MLP  # noqa: F401  (public names)


# ---------------------------------------------------------------- the loop nests
# one file per pass (fc_forward, fc_backward, fc_update), each the pass as a
# tiled product (fc_nest) on blocked tensors or on plain matrices.

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

# ---------------------------------------------------------------- functional API

_scratch = Scratch()  # the layout copies of functional calls
_results = Recycler()  # the arrays the functional forms return
_buffer = _scratch.get
_forward_calls, _backward_calls = CallMemo("fc"), CallMemo("fc")  # see call_memo


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

    def blocked():  # VNNI pairs made in the same pass
        return to_blocks(w, br, bs, transpose=role == "w", swap_grid=True, dtype=ab, vnni=vnni,
                         out=None if token else _buffer(role + "_vnni" * vnni, shape, ab))
    return _reuse.blocked(token, ("fc", role, g, dtype, vnni), (w,), blocked)


def can_read_w(dtype, backend, x, w, token):
    """Whether a plan may read W in place as the kernel's broadcast operand
    (fc_forward.forward_t, lstm_plans.projection_t_nest): on the CPU backend,
    x and W of the call's dtype already (nothing to round), W C-contiguous and
    not kept blocked (reuse=). The LSTM adds its own bf16 condition
    (lstm_strips.reads_in_place: whole blocks)."""
    have = dtypes.NUMPY[dtype]
    return (backend == "cpu" and token is None and x.dtype == have and w.dtype == have
            and w.flags.c_contiguous)


def small_batch(g):
    """Whether the batch is small enough that copying x (N x C; y^T's tiles
    stay in cache) and storing y^T transposed cost well under copying W (K x
    C): N (C + K) under half of C K (at N = K / 2 the blocked path was ahead,
    at N = K / 4 even)."""
    return 2 * g.N * (g.C + g.K) < g.C * g.K


def reads_w(g, dtype, backend, x, w, token):
    """Whether the forward reads W in place (fc_forward.forward_t): where it
    can (can_read_w) and the batch is small (small_batch)."""
    return can_read_w(dtype, backend, x, w, token) and small_batch(g)


def _forward_plan(N, C, K, dtype, backend, config, has_bias, readable, bf16_out):
    """(g, plan, its path: "t" reads W in place, "copying" copies W^T's tiles
    itself, "tiles" runs on W^T's tiles copied first; whether those tiles are
    VNNI pairs) of fc.forward, readable: can_read_w; bf16_out: "tiles" also
    stores y in bf16 (tensor y16) as each block finishes."""
    g = geometry(N, C, K, config, path=kernel_path(dtype, backend))
    if readable and small_batch(g):
        vnni = "fwd" in vnni_passes(g, dtype, backend, plain=True)  # xt's tiles: x^T's depth
        return g, plan_t(g, has_bias=has_bias, dtype=dtype, vnni=vnni), "t", vnni
    if dtype != "f32":
        readable = False  # the copying plans are f32
    if readable and copies_wt(g, cpu_threads()):
        return g, plan_copying(g, "fwd", has_bias=has_bias), "copying", False
    vnni = "fwd" in vnni_passes(g, dtype, backend, plain=True)
    return g, plan(g, "fwd", dtype, has_bias=has_bias, plain=True, vnni=vnni,
                   bf16_out=bf16_out), "tiles", vnni


def _sizes(x, w):
    """(N, C, K) of a call on x [N, C] and w [K, C] (2-D arrays, checked by
    operands): a ValueError where w's columns are not x's or a size is 0."""
    (N, C), K = x.shape, w.shape[0]
    if w.shape[1] != C:
        raise ValueError(f"w: expected shape (K, {C}) to match x's {C} columns, got {w.shape}")
    if N == 0 or K == 0 or C == 0:
        raise ValueError(f"x, w: empty sizes N={N}, C={C}, K={K} are not supported")
    # a broadcast x (strides 0) may be far larger than the memory it sits in
    fits(4 * (N * C + N * K + K * C), "x", lambda: f"fc N={N}, C={C}, K={K}'s operands and "
         "result in f32")
    return N, C, K


def forward(x, w, b=None, dtype="f32", backend=None, config=None, reuse=None):
    """y = x @ w.T + b (F.linear). x [N, C], w [K, C], b [K] or None -> y [N, K].
    reuse: keep w's blocked copy across calls (primitives.reuse)."""
    key, run = _forward_calls.get((x, w, b), (dtype, backend), config, reuse)
    if run is None:
        out_dtype = operands(dtype, x, w, names=("x", "w"))
        token = _reuse.check(reuse)
        backend = backend_name(backend)
        N, C, K = _sizes(x, w)
        bias_vector(b, K, dtype)  # checked here, taken as the plans read it by _forward_run
        token = _reuse.steady(token, ("fc.forward", N, C, K, dtype, backend), (w,))
        # the geometry, the plan and the path, decided once per such call
        readable = can_read_w(dtype, backend, x, w, token)
        bf16_out = out_dtype != np.float32
        run = _forward_calls.put(key, functools.partial(
            _forward_run, dtype, backend, token, out_dtype, *cached(
                "fc", ("forward", N, C, K, dtype, backend, b is not None, readable, bf16_out,
                       cpu_threads()), config,
                lambda: _forward_plan(N, C, K, dtype, backend, config, b is not None,
                                      readable, bf16_out))))
    return run(x, w, b)


def _forward_run(dtype, backend, token, out_dtype, g, p, path, vnni, x, w, b):
    """fc.forward's work once its arguments are checked and its plan (g, p,
    path, vnni: _forward_plan) decided."""
    (N, C), K = x.shape, w.shape[0]
    b = bias_vector(b, K, dtype)
    ab = dtypes.NUMPY[dtype]
    bias = {} if b is None else {"b": b}
    if path == "t":  # x and W already of dtype (can_read_w): y in it, rounded as stored
        y = _results.empty("y", (N, K), ab)
        t = dict(w=w, y=y, xt=to_blocks(x, g.bc, g.bn, transpose=True, vnni=vnni,
                                        out=_buffer("xt", (g.Cb, g.Nb, g.bc, g.bn), ab)),
                 yt=_buffer("yt", (g.Kb, g.Nb, g.bk, g.bn), np.float32), **bias)
        p.run(backend=backend, **t)
        return y
    if path == "copying":  # W read in place by the plan's own tile copies (fc_plans.plan_copying)
        y = _results.empty("y", (N, K), np.float32)
        p.run(backend=backend, x=_plain(x, ab, "x"), w=w, y=y,
              wt=_buffer("wt_copies", (p.extent["wt"],), np.float32), **bias)
        return y
    # x and y stay plain; W^T comes in tiles, re-blocked per call unless kept
    # (reuse=): read in place, W's rows would be the streamed operand C apart,
    # which slows the kernel calls down (see the note above fc's nests)
    # (bf16 results: y in f32 as scratch, and its bf16 copy stored block by block)
    t = dict(x=_plain(x, ab, "x"), w=_weights(w, g, dtype, "w", token, vnni), **bias)
    if out_dtype == np.float32:
        y = t["y"] = _results.empty("y", (N, K), np.float32)
    else:
        y = t["y16"] = _results.empty("y", (N, K), out_dtype)
        t["y"] = _buffer("y_tiles", (p.extent["y"],), np.float32)
    p.run(backend=backend, **t)
    return y


def backward(dy, x, w, dtype="f32", backend=None, config=None, reuse=None, *, need_dx=True,
             need_dw=True):
    """Gradients of y = x @ w.T + b: dx [N, C], dw [K, C], db [K]. reuse: keep
    w's blocked copy across calls (primitives.reuse). need_dx=False: dx is not
    computed (None comes back in its place), as for a network's first layer,
    whose input wants no gradient; need_dw=False likewise dw (frozen weights;
    db still comes back)."""
    key, run = _backward_calls.get((dy, x, w), (dtype, backend, need_dx, need_dw), config, reuse)
    if run is None:
        need_dx, need_dw = flag(need_dx, "need_dx"), flag(need_dw, "need_dw")
        out_dtype = operands(dtype, dy, x, w, names=("dy", "x", "w"))
        token = _reuse.check(reuse)
        backend = backend_name(backend)
        N, C, K = _sizes(x, w)
        if dy.shape != (N, K):
            raise ValueError(f"dy: expected shape ({N}, {K}), got {dy.shape}")
        token = _reuse.steady(token, ("fc.backward", N, C, K, dtype, backend), (w,))
        plain_w = token is None and w.dtype == np.float32 and w.flags.c_contiguous
        f32 = out_dtype == np.float32
        run = _backward_calls.put(key, functools.partial(
            _backward_run, dtype, backend, token, out_dtype, need_dx, need_dw, *cached(
                "fc", ("backward", N, C, K, dtype, backend, plain_w, f32, cpu_threads()), config,
                lambda: _backward_plans(N, C, K, dtype, backend, config, plain_w, not f32))))
    return run(dy, x, w)


def _backward_run(dtype, backend, token, out_dtype, need_dx, need_dw, g, gu, vnni, p_bwd, p_upd,
                  copying, dy, x, w):
    """fc.backward's work once its arguments are checked and its plans (g, gu,
    vnni, p_bwd, p_upd, copying: _backward_plans) decided."""
    (N, C), K, f32 = x.shape, w.shape[0], out_dtype == np.float32
    ab = dtypes.NUMPY[dtype]
    # bf16 results: dx and dW in f32 as scratch, their bf16 copies stored block by
    # block (tensors dx16, dw16)
    out, dx = {}, None
    if need_dx:
        dy_p = _plain(dy, ab, "dy")
        dx = _results.empty("dx", (N, C), np.float32) if f32 else _buffer(
            "dx_tiles", (p_bwd.extent["dx"],), np.float32)  # the plan's tiles (fc_plans.plan)
        if not f32:
            out["dx16"] = _results.empty("dx", (N, C), out_dtype)
        if copying:  # W read in place by the plan's own tile copies (fc_plans.plan_copying)
            p_bwd.run(backend=backend, dy=dy_p, w=w, dx=dx,
                      wt=_buffer("wt_copies", (p_bwd.extent["wt"],), np.float32))
        else:
            p_bwd.run(backend=backend, dy=dy_p, dx=dx,
                      wt=_weights(w, g, dtype, "wt", token, "bwd" in vnni), **out)
    if not need_dw:  # db alone: dy's column sums in f32 (the update's pass makes them else)
        db = column_sums(dy, out=_results.empty("db", (K,), np.float32) if f32 else
                         _buffer("db", (K,), np.float32))
        return (dx if f32 else out.get("dx16")), None, (db if f32 else _result(db, out_dtype, "db"))
    dw = _results.empty("dw", (K, C), np.float32) if f32 else _buffer(
        "dw_tiles", (p_upd.extent["dw"],), np.float32)
    if not f32:
        out["dw16"] = _results.empty("dw", (K, C), out_dtype)
    # the update on its own tiles of x and dy^T (gu: its minibatch block)
    # the update streams x's tiles: VNNI pairs where it reads them so, in the same pass
    pairs = "upd" in vnni
    xb = to_blocks(x, gu.bn, gu.bc, dtype=ab, vnni=pairs,
                   out=_buffer("x_vnni" if pairs else "x", (gu.Nb, gu.Cb, gu.bn, gu.bc), ab))
    # dy^T's tiles (bf16 rounded on the way) and db = dy's column sums, in f32
    # from dy as given, in one pass over dy
    db = _results.empty("db", (K,), np.float32) if f32 else _buffer("db", (K,), np.float32)
    dyt = to_blocks(dy, gu.bk, gu.bn, transpose=True, dtype=ab, sums=db,
                    out=_buffer("dyt", (gu.Kb, gu.Nb, gu.bk, gu.bn), ab))
    p_upd.run(backend=backend, dw=dw, x=xb, dyt=dyt, **({} if f32 else {"dw16": out["dw16"]}))
    if f32:
        return dx, dw, db
    return out.get("dx16"), out["dw16"], _result(db, out_dtype, "db")


def _backward_plans(N, C, K, dtype, backend, config, plain_w, bf16_out):
    """(g, the update's geometry (fc_plans.plain_update), the passes in VNNI
    pairs, backward-data's plan, the update's, and whether backward-data's
    plan copies W's tiles itself (copies_w)) of fc.backward; plain_w: W is
    f32, C-contiguous and not kept blocked (reuse=); bf16_out: both plans
    also store their output in bf16 (dx16, dw16)."""
    path = kernel_path(dtype, backend)
    g = geometry(N, C, K, config, path=path)
    gu = plain_update(g, config, path)
    vnni = ((vnni_passes(g, dtype, backend, plain=True) - {"upd"})
            | (vnni_passes(gu, dtype, backend, plain=True) & {"upd"}))
    copying = plain_w and dtype == "f32" and backend == "cpu" and copies_w(g, cpu_threads()) \
        and not bf16_out
    p_bwd = plan_copying(g) if copying else plan(g, "bwd", dtype, plain=True,
                                                  vnni="bwd" in vnni, bf16_out=bf16_out)
    return (g, gu, vnni, p_bwd, plan(gu, "upd", dtype, plain=True, vnni="upd" in vnni,
                                     bf16_out=bf16_out), copying)


# fc.backward's backward-data copies W's tiles inside its plan
# (fc_plans.plan_copying) where W's tiles come to COPY_MIN bytes or more and
# dx has COPY_TASKS block columns per thread: each task copies the tiles it
# reads, a chunk at a time, and reads them from its core's cache, where one
# copy of all the tiles first writes them out (to memory, where they are
# large) and the plan reads them back. Its tasks are dx's block columns
# alone, hence the second condition. On W of 4 MB (the 1k shapes) the copy
# first, then the plain plan ran level or faster on both CPUs (23% on
# square_1k_n1k at 2 threads on the Xeon: the copying plan's reduction
# chunks reload dx's tiles); on 64 MB (square_4k) the copying plan ran
# 18-30% faster at 2 and 16 threads; sizes between were not measured. It
# replaced strips of dx's columns (each a copy, then a plan: two parallel
# regions a strip, each of which, on cores that other processes keep busy,
# could wait out a scheduler slice) (benchmarks/RESULTS.md).
COPY_TASKS = 2
COPY_MIN = 16 << 20


# fc.forward past the small batches copies W^T's tiles inside its plan
# (fc_plans.plan_copying(g, "fwd"), copy_bt) where y has a block column a
# thread: each task transposes the tiles of its block column from W's rows
# (contiguous) and reads them from its core's cache, where one copy of all
# the tiles first writes them out and the plan reads them back from other
# cores' caches or memory. It ran faster than the copy then the plan on the
# quick shapes at 16 threads on the Xeon, and level or faster at 2
# (benchmarks/RESULTS.md, issue 17). With fewer block columns than threads
# some threads would idle.
def copies_wt(g, threads):
    """Whether fc.forward copies W^T's tiles inside its plan
    (fc_plans.plan_copying(g, "fwd")): where y has a block column a thread
    or more."""
    return g.Kb >= threads


def copies_w(g, threads):
    """Whether fc.backward's backward-data copies W's tiles inside its plan
    (fc_plans.plan_copying): where W's tiles come to COPY_MIN bytes or more
    and dx has COPY_TASKS block columns per thread."""
    return g.Kb * g.bk * g.Cb * g.bc * 4 >= COPY_MIN and g.Cb >= COPY_TASKS * threads


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
