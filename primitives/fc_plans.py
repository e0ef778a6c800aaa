"""FC's geometry (blocking of one shape) and plans: which nest (fc_forward,
fc_backward, fc_update; blocked or on plain matrices) each pass records, with
which epilogue, cached per shape, dtype and config. Layouts and formulas:
primitives/fc.py."""
import dataclasses
from functools import cached_property

from brgemm import plan as bplan
from brgemm.layouts import nblocks, pick_block
from brgemm.loopspec import Loop, parse_spec
from brgemm.vnni import takes_vnni_b
from primitives._args import block_sizes
from primitives._calls import reduction_calls
from primitives._config import cached
from primitives._config import settings
from primitives.fc_backward import backward
from primitives.fc_forward import T_CHUNK, forward, forward_t
from primitives.fc_nest import product_nest
from primitives.fc_update import update


SHAPE = ("N", "C", "K")  # the dimensions of a shape key

SCHEMA = {"fwd": {"spec": str, "bn": int, "bc": int, "bk": int, "chunk": int, "group": int},
          "bwd": {"spec": str, "chunk": int, "group": int},
          "upd": {"spec": str, "chunk": int, "group": int, "bn": int}}

ACTIVATIONS = {None: (), "none": (), "relu": (bplan.relu(),), "sigmoid": (bplan.sigmoid(),),
               "tanh": (bplan.tanh(),)}
ACT_GRAD = {  # dL/dz from dL/dy and y = act(z), for the activations above that have one
    "relu": lambda dy, y: dy * (y > 0),
    "sigmoid": lambda dy, y: dy * y * (1 - y),
    "tanh": lambda dy, y: dy * (1 - y * y),
}

_plans = bplan.PlanCache(maxsize=128)


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

    # sizes derived from the fields, computed on first use (plans and calls read them often)
    Nb = cached_property(lambda g: nblocks(g.N, g.bn))
    Cb = cached_property(lambda g: nblocks(g.C, g.bc))
    Kb = cached_property(lambda g: nblocks(g.K, g.bk))
    chunk = property(lambda g: dict(zip(("fwd", "bwd", "upd"), g.chunks)))


def geometry(N, C, K, config=None, blocks=None, path=None):
    """Block sizes from the [fwd] config (or `blocks` = (bn, bc, bk) targets);
    path: the kernel path (brgemm.info.kernel_path), whose tables apply."""
    blocks = block_sizes(blocks)
    return cached("fc", ("geometry", N, C, K, blocks, path), config,
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


def plain_update(g, config=None, path=None):
    """The geometry of the functional backward's update: g with the [upd]
    config's minibatch block bn where one is set. That update tiles x and
    dy^T afresh on every call, so its reduction block need not be the
    layer's: in fewer, deeper blocks each kernel call walks fewer batch
    blocks for the same work (benchmarks/RESULTS.md, issue 17)."""
    bn = settings("fc", "upd", {"N": g.N, "C": g.C, "K": g.K}, SCHEMA["upd"], config,
                  path).get("bn")
    return g if bn is None else dataclasses.replace(g, bn=pick_block(g.N, bn))


def _loops(g, pass_, chunk=None):
    i = ("fwd", "bwd", "upd").index(pass_)
    spec, group = g.specs[i], g.groups[i]
    dims = {"n": g.Nb, "c": g.Cb, "k": g.Kb}
    order = {"fwd": "nkc", "bwd": "nck", "upd": "kcn"}[pass_]  # the reduction last
    loops = []
    for name in order:
        step = (chunk or g.chunks[i]) if name == order[-1] else 1
        repeated = spec.lower().count(name) > 1
        if repeated and group is None:
            raise ValueError(f"config: spec {spec!r} names loop {name!r} twice, which needs "
                             f"the group (its outer block, in blocks) in the [{pass_}] config")
        loops.append(Loop(name, 0, dims[name], step, blocks=(group,) if repeated else ()))
    return parse_spec(spec, loops, where="config: ")


def _epilogue(g, pass_, has_bias, activation, bf16_out, plain=False):
    """The ops on a finished output block, as data: bias, activation, bf16 copy
    (into blocks like the output's, or with plain into the plain matrix)."""
    out, (rows, cols) = {"fwd": ("y", (g.bn, g.bk)), "bwd": ("dx", (g.bn, g.bc)),
                         "upd": ("dw", (g.bc, g.bk))}[pass_]
    outer = {"fwd": g.Kb, "bwd": g.Cb, "upd": g.Cb}[pass_]
    if plain:  # y [N][K], dx [N][C], dW [K][C]: tile (i, j) at row i * bi, column j * bj
        (bi, bj), ld = {"fwd": ((g.bn, g.bk), g.K), "bwd": ((g.bn, g.bc), g.C),
                        "upd": ((g.bk, g.bc), g.C)}[pass_]

    def ops(i, j):
        extra = ()
        if pass_ == "fwd":
            extra = ((bplan.bias("b", j * g.bk),) if has_bias else ()) + ACTIVATIONS[activation]
        if bf16_out and plain:
            extra += (bplan.store_bf16(out + "16", i * bi * ld + j * bj, ld),)
        elif bf16_out:
            extra += (bplan.store_bf16(out + "16", (i * outer + j) * rows * cols, cols),)
        return extra
    return ops


_PRODUCTS = {"fwd": forward, "bwd": backward, "upd": update}


def vnni_passes(g, dtype, backend, plain=False):
    """The passes whose B tiles are kept in VNNI pairs here (AMX): the forward's
    w (depth bc), the backward's wt (bk), the update's dy (bn; x in the plain
    plans). The plain plans' ragged last reduction block must fit too."""
    if dtype != "bf16":  # takes_vnni_b's first condition, ahead of the dict
        return frozenset()
    depth = {"fwd": (g.bc, g.C % g.bc), "bwd": (g.bk, g.K % g.bk), "upd": (g.bn, 0)}
    return frozenset(p for p, (k, rest) in depth.items() if takes_vnni_b(k, dtype, backend)
                     and (not plain or rest == 0 or takes_vnni_b(rest, dtype, backend)))


def outputs_first(spec, out="K"):
    """The functional forward's spec: the configured one with its parallel
    output loop `out` moved just ahead of the parallel minibatch loop N
    ("NKc" -> "KNc"). That pass copies W^T's tiles on every call: with the
    output blocks outer each thread's tasks read few tiles, each for every
    minibatch block in a row, from its own cache; with N outer every thread
    reads every tile, and the next call's copy then rewrote lines that all
    cores held, which made that copy several times slower on the 16-core
    Xeon (benchmarks/RESULTS.md)."""
    return spec.replace("N" + out, out + "N") if spec.count("N") == spec.count(out) == 1 \
        else spec


def plan(g, pass_, dtype="f32", has_bias=False, activation=None, bf16_out=False, plain=False,
         vnni=False):
    """The recorded plan of one pass (cached by geometry and options); plain: the
    functional form's plan, on plain matrices as the plain nests above say (the
    forward's with outputs_first's spec); vnni: the plan's B tiles (w, wt, and
    dy or x in the update) in VNNI pairs (see vnni_passes); bf16_out: also a
    bf16 copy of the output, tensor "<output>16", as each block finishes; in
    the plain plans the f32 output is then a scratch in tiles (the plan's
    extent), which the kernel writes a tile's rows together and the bf16
    store reads back from cache, rather than a matrix's rows K (or C) apart
    (benchmarks/RESULTS.md, issue 17, nineteenth session). The plain update
    stores each dW tile it makes whole with streaming stores (Block.c_stream):
    dW goes back to the caller, and its rows C apart would otherwise each be
    read into the cache before being written."""
    key = (g, pass_, dtype, has_bias, activation, bf16_out, plain, vnni)

    def record():
        gp = g if not (plain and pass_ == "fwd") else \
            dataclasses.replace(g, specs=(outputs_first(g.specs[0]),) + g.specs[1:])
        product = _PRODUCTS[pass_](gp, plain, c_tiles=plain and bf16_out)
        a, b, c = product.a[0], product.b[0], product.c[0]
        tensors = {a: dtype, b: dtype, c: "f32"}
        if pass_ == "fwd" and has_bias:
            tensors["b"] = "f32"
        if bf16_out:
            tensors[c + "16"] = "bf16"
        rec = bplan.Recorder(tensors, spec=gp.specs[("fwd", "bwd", "upd").index(pass_)])
        product_nest(rec, _loops(gp, pass_), product, dtype,
                     _epilogue(gp, pass_, has_bias, activation, bf16_out, plain),
                     gp.chunk[pass_], vnni, stream=plain and pass_ == "upd")
        return rec.finish()
    return _plans.get(key, record)


# W's tiles that one copy in plan_copying fills: with the output's block
# column and the input's rows of the chunk they stay in the core's L2 while
# each minibatch block reads them
COPY_BYTES = 256 << 10


def copy_chunk(g, pass_="bwd"):
    """Reduction blocks per copy (and per call) of plan_copying(g, pass_): the
    pass's chunk, at most COPY_BYTES of W's tiles."""
    i, blocks = ("fwd", "bwd").index(pass_), (g.Cb, g.Kb)[("fwd", "bwd").index(pass_)]
    return max(1, min(g.chunks[i], blocks, COPY_BYTES // (g.bk * g.bc * 4)))


def plan_copying(g, pass_="bwd", has_bias=False, tiles=False):
    """A functional f32 pass whose plan copies W's tiles itself, all in one
    parallel region. "bwd" (backward-data): tensors dy (plain N x K), w (plain
    K x C), wt (scratch, copy_chunk tiles per block column of dx:
    [Cb][chunk][bk][bc]) and dx (plain N x C), the tiles W's blocks (copy_b).
    "fwd": x (plain N x C), w, wt ([Kb][chunk][bc][bk]), y (plain N x K) and,
    with has_bias, b; the tiles W^T's blocks, transposed from W's rows as they
    are copied (copy_bt). One task per block column of the output; in it,
    chunk by chunk of the reduction, the first minibatch block's calls copy
    the chunk's tiles from w and every minibatch block's calls read them from
    the core's cache. Tasks write only their own tiles and output columns, so
    no phase waits on another thread's copy (fc.copies_w, fc.copies_wt).
    tiles: the input and the output in tiles, [Nb][Rb][bn][br] and
    [Nb][Sb][bn][bs] for the reduction's blocks Rb of br and the output's Sb
    of bs (bwd: the LSTM's dG and its backward-data's outputs,
    lstm_strips.copies_w), not plain; w plain still."""
    fwd = pass_ == "fwd"
    a, out = ("x", "y") if fwd else ("dy", "dx")
    R, Rb, br = (g.C, g.Cb, g.bc) if fwd else (g.K, g.Kb, g.bk)  # the reduction
    S, Sb, bs = (g.K, g.Kb, g.bk) if fwd else (g.C, g.Cb, g.bc)  # the output's columns
    ch = copy_chunk(g, pass_)
    tile = g.bk * g.bc
    if tiles:  # (offset of block (n, i), leading dimension) of the input a and the output
        a_at, lda = (lambda n, r: (n * Rb + r) * g.bn * br), br
        c_at, ldc = (lambda n, j: (n * Sb + j) * g.bn * bs), bs
    else:
        a_at, lda = (lambda n, r: n * g.bn * R + r * br), R
        c_at, ldc = (lambda n, j: n * g.bn * S + j * bs), S

    def source(r, j):  # W's element at the corner of reduction block r, output block j
        return j * bs * g.C + r * br if fwd else r * br * g.C + j * bs

    def record():
        _loops(g, pass_)  # its own loop order, but a configured spec is still checked
        tensors = {a: "f32", "w": "f32", "wt": "f32", out: "f32"}
        if has_bias:
            tensors["b"] = "f32"
        rec = bplan.Recorder(tensors, spec="K" if fwd else "C")
        copy = bplan.copy_bt if fwd else bplan.copy_b
        blocks = {}
        # each chunk's calls (reduction blocks and depth), the same for every column
        chunks = [(r0, list(reduction_calls(range(r0, min(r0 + ch, Rb)), Rb, R, br)))
                  for r0 in range(0, Rb, ch)]
        for j in range(Sb):
            wc = min(bs, S - j * bs)
            rec.at(0, (j,))
            for r0, calls in chunks:
                for n in range(g.Nb):
                    m = min(g.bn, g.N - n * g.bn)
                    for rs, depth in calls:
                        beta = 0.0 if rs[0] == 0 else 1.0
                        blk = blocks.get((m, wc, depth, beta))
                        if blk is None:
                            blk = blocks[m, wc, depth, beta] = bplan.Block(
                                m, wc, depth, lda=lda, ldb=bs, ldc=ldc, beta=beta)
                        b_offs = [(j * ch + r - r0) * tile for r in rs]
                        ops = tuple(copy("w", source(r, j), g.C, "wt", o)
                                    for r, o in zip(rs, b_offs)) if n == 0 else ()
                        if has_bias and rs[-1] == Rb - 1:  # the output block's last call
                            ops += (bplan.bias("b", j * bs),)
                        rec.gemm(blk, a, [a_at(n, r) for r in rs], "wt", b_offs, out,
                                 c_at(n, j), ops=ops)
        return rec.finish()
    return _plans.get((g, pass_ + "_copying", has_bias, tiles), record)


def plan_t(g, has_bias=False, dtype="f32", vnni=False):
    """The functional forward's plan that reads W in place (fc_forward.forward_t):
    tensors w (plain K x C), xt (x^T tiles, in VNNI pairs with vnni), yt
    (scratch tiles, f32), y (of dtype: bf16 rounded as it is stored), b (f32)."""
    def record():
        tensors = {"w": dtype, "xt": dtype, "yt": "f32", "y": dtype}
        if has_bias:
            tensors["b"] = "f32"
        # its own reduction chunk: a spec that blocks c (a group) falls back to NKc
        spec = g.specs[0] if g.specs[0].lower().count("c") == 1 else "NKc"
        gt = dataclasses.replace(g, specs=(spec,) + g.specs[1:])
        rec = bplan.Recorder(tensors, spec=spec)
        product_nest(rec, _loops(gt, "fwd", T_CHUNK), forward_t(g), dtype, lambda k, n: (
            ((bplan.bias_rows("b", k * g.bk),) if has_bias else ())
            + (bplan.store_t("y", n * g.bn * g.K + k * g.bk, g.K, bf16=dtype == "bf16"),)),
            T_CHUNK, vnni)
        return rec.finish()
    return _plans.get((g, "fwd_t", has_bias, dtype, vnni), record)
