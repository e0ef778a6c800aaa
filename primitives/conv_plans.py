"""Convolution's geometry (blocking, padding and strides of one shape) and
plans: which nest (conv_forward, conv_backward, conv_update) each pass
records, cached per shape, dtype and config, and the update's input and
output buffers. Layouts and formulas: primitives/conv.py."""
import dataclasses
import functools

import numpy as np

from brgemm import dtypes
from brgemm import plan as bplan
from brgemm.arrays import aligned_empty
from brgemm.kernel import SPAN
from brgemm.layouts import nblocks, pick_block
from brgemm.loopspec import Loop, parse_spec
from brgemm.lru import HashedOnce
from brgemm.machine import cpu_threads
from brgemm.vnni import takes_vnni_b, vnni_tiles
from primitives._args import fits, operands
from primitives._config import cached
from primitives._config import settings
from primitives.conv_backward import backward_nest
from primitives.conv_forward import forward_nest
from primitives.conv_update import (FLAT_TILE, c_rows, flat_layout, flat_parts, flat_sizes,
                                    update_flat_nest, update_form, update_narrow_nest, update_nest)
from primitives.conv_layouts import block_dyf, block_x, block_xf, block_xs, block_y


SHAPE = ("N", "C", "K", "H", "W", "R", "S", "sh", "sw", "ph", "pw")  # a shape key's dimensions

SCHEMA = {"fwd": {"spec": str, "bc": int, "bk": int, "bq": int, "call_kb": int, "span": bool,
                 "span_q": int, "w_reuse": int, "pointwise_kb": int, "pointwise_bp": int,
                 "pointwise_classes": bool,
                 "classes_bp": int, "pointwise_pairs": bool, "nchw_x": bool,
                 "nchw_copies_w": bool, "nchw_x_rows": bool, "pointwise_rows": bool,
                 "columns": bool, "pointwise": bool, "pointwise_tail": bool,
                 "pointwise_tail_rows": int},
          "bwd": {"spec": str, "call_kb": int, "span": bool, "w_reuse": int, "columns": bool,
                  "pointwise": bool,
                  "columns_copies_w": bool, "columns_copy_block": int},
          "upd": {"spec": str, "tiles": int, "call_kb": int, "flat": bool, "share_kb": int,
                  "flat_below_q": int, "pointwise_images": bool, "pointwise_shares": int}}

_plans = bplan.PlanCache(maxsize=64)


@dataclasses.dataclass(frozen=True)
class Geometry(HashedOnce):
    N: int
    C: int
    K: int
    H: int
    W: int
    R: int
    S: int
    sh: int
    sw: int
    ph: int
    pw: int
    bc: int
    bk: int
    bq: int
    specs: tuple
    splits: int  # shares of the weight update's reduction (see update_nest)
    call_kb: tuple  # per pass: at most this many KiB of A and B blocks per kernel call
    flat: bool = False  # the weight update reduces over runs of pixels across rows (update_flat_nest)
    parts: bool = False  # the flat update computes its tiles in C blocks of 32 x 32 (flat_parts)
    # fwd, bwd: pixel blocks of bs pixels that run on across rows (spans)
    span: tuple = (False, False)
    bs: int = 1
    # fwd, bwd: pixel blocks of a task that take each kernel call's weight
    # blocks in turn (_calls.record_grouped; 1: one block's reduction at a time)
    w_reuse: tuple = (1, 1)
    # the functional forms' pointwise plans (conv_pointwise, 1x1 layers): KiB of
    # A and B blocks per kernel call, and the pixel block's target
    pointwise_kb: int = 32
    pointwise_bp: int = 112
    # backward-data's pointwise plan by classes of dy's rows (conv_pointwise.
    # data_operands), and its pixel block's target
    pointwise_classes: bool = False
    classes_bp: int = 64
    # the bf16 functional forward's pointwise plan on x's rows in VNNI pairs
    # where its rule allows (conv_pointwise.pointwise_pairs)
    pointwise_pairs: bool = False
    # the f32 functional forward reading x in place, NCHW (conv_in_place.reads_x_nchw)
    nchw_x: bool = False
    # the f32 functional pointwise forward on a copy of x whose rows start on
    # lines (conv_pointwise.pointwise_rows)
    pointwise_rows: bool = False
    # fwd, bwd: the functional forms may take conv.columns where its rule allows
    columns: tuple = (True, True)
    # conv.columns' backward-data as fc's copying plan (w's tiles copied as its
    # calls need them) rather than on w in place
    columns_copies_w: bool = False
    # the functional pointwise weight update in this many shares of images,
    # shares outermost (0: the rule; the config's pointwise_shares, or N where
    # its pointwise_images says one share per image: conv_pointwise.pointwise_update)
    pointwise_shares: int = 0
    # the f32 functional forward on x in place copying w's tiles in its plan
    # (conv_in_place.copies_w_nchw)
    nchw_copies_w: bool = False
    # the f32 functional forward on x in place, each task copying the rows of x
    # it reads into blocked rows of its own (conv_in_place.copies_x_rows)
    nchw_x_rows: bool = False
    # conv.columns' copying backward-data's block targets (fc's bn, bc, bk)
    columns_copy_block: int = 64
    # fwd, bwd: the functional forms may take the pointwise plans (conv_pointwise)
    # where their rule allows: the forward (fwd) and backward-data (bwd)
    pointwise: tuple = (True, True)
    # the f32 pointwise plans compute each image's pixels past its last whole
    # vector for all images at once (conv_pointwise.pointwise_tail)
    pointwise_tail: bool = True
    # and in calls of this many rows of w (conv_forward.pointwise_nest)
    pointwise_tail_rows: int = 8
    __hash__ = HashedOnce.__hash__  # plan caches hash it on every call

    # sizes derived from the fields, computed on first use (plans and calls read them often)
    P = functools.cached_property(lambda g: (g.H + 2 * g.ph - g.R) // g.sh + 1)
    Q = functools.cached_property(lambda g: (g.W + 2 * g.pw - g.S) // g.sw + 1)
    Hp = functools.cached_property(lambda g: g.H + 2 * g.ph)
    Wp = functools.cached_property(lambda g: g.W + 2 * g.pw)
    Cb = functools.cached_property(lambda g: nblocks(g.C, g.bc))
    Kb = functools.cached_property(lambda g: nblocks(g.K, g.bk))
    # dy's zero border for backward-data: output rows/pixels a tap can reach from outside
    bp = functools.cached_property(lambda g: -(-(g.R - 1) // g.sh))
    bw = functools.cached_property(lambda g: -(-(g.S - 1) // g.sw))
    Pp = functools.cached_property(lambda g: g.P + 2 * g.bp)
    # a residue class of padded input pixels reaches dy pixels up to (Wp - 1) / sw
    Qp = functools.cached_property(lambda g: max(g.Q, nblocks(g.Wp, g.sw)) + 2 * g.bw)


def spans_rows(S, sh, sw, pw):
    """Whether x, y, dx and dy's blocked layouts hold the output rows (and the
    input rows they read) back to back, without a gap: no columns of padding
    and no stride, and one tap across (S = 1; so Wp = W = Q = Qp). Then a
    block of pixels may run on from one row into the next, and the kernel's
    rows (its tile rows on AMX) fill up on small images (7 or 14 pixels a row)."""
    return S == 1 and sh == 1 and sw == 1 and pw == 0


def geometry(N, C, K, H, W, R, S, stride, padding, config=None, path=None):
    """path: the kernel path (brgemm.info.kernel_path), whose config tables apply."""
    # a stride past the last tap position leaves one output row (column) whatever
    # its size: the smallest such stride computes the same, and the backward
    # nests and layouts that step through residue classes of the stride stay small
    stride = (min(stride[0], H + 2 * padding[0] - R + 1), min(stride[1], W + 2 * padding[1] - S + 1))
    padding = tuple(padding)
    threads = cpu_threads()  # the weight update's shares feed this many
    return cached("conv", ("geometry", N, C, K, H, W, R, S, stride, padding, path, threads),
                  config, lambda: _geometry(N, C, K, H, W, R, S, stride, padding, config, path,
                                            threads))


def _geometry(N, C, K, H, W, R, S, stride, padding, config, path=None, threads=1):
    shape = dict(N=N, C=C, K=K, H=H, W=W, R=R, S=S, sh=stride[0], sw=stride[1], ph=padding[0],
                 pw=padding[1])
    cfg = {p: settings("conv", p, shape, SCHEMA[p], config, path) for p in SCHEMA}
    f = cfg["fwd"]
    Q = (W + 2 * padding[1] - S) // stride[1] + 1
    P_ = (H + 2 * padding[0] - R) // stride[0] + 1
    bc, bk = pick_block(C, f["bc"], 16), pick_block(K, f["bk"], 16)
    fl = flat_sizes(P_, H + 2 * padding[0], W + 2 * padding[1], R, S, *stride)
    # the flat nest's blocks span bc planes of x: past the kernel's reach per
    # block (huge images), the row nests do the update; flat_below_q: only for
    # output rows shorter than that (the rows nest's blocks are a row deep)
    flat = cfg["upd"]["flat"] and bc * fl.L * 4 <= SPAN and Q < cfg["upd"].get("flat_below_q",
                                                                              Q + 1)
    # enough weight-update tasks: split its reduction until there are `tiles` of them
    tiles = nblocks(C, bc) * nblocks(K, bk) * R * S
    units = N * P_  # what the shares split: output rows, or the flat nest's chunks
    # too few tiles for `tiles` tasks: the flat nest first splits them into C blocks
    parts = flat and tiles < cfg["upd"]["tiles"]
    splits = 1
    if flat:
        tiles *= nblocks(bc, FLAT_TILE) * nblocks(bk, FLAT_TILE) if parts else 1
        units = N * fl.chunks
        # and shares small enough that a tile's x and dy of one share (counted
        # in bf16) stay in a core's cache while its taps and C blocks pass over them
        splits = -(-units * fl.Tc * (bc + bk) * 2 // (cfg["upd"]["share_kb"] << 10))
    # at least 4 tasks a thread: at 16 threads, 16 tiles x shares left the static
    # schedule's busiest thread 1.3-1.8x the mean (2 tasks where most had 1)
    aim = max(cfg["upd"]["tiles"], 4 * threads)
    splits = max(1, min(units, max(splits, -(-aim // tiles))))
    # units per share rounded up can leave the last shares with none, and an
    # empty share would leave its slice of the reduction buffer unwritten:
    # keep only as many shares as the rounded-up share size needs
    splits = -(-units // -(-units // splits))
    span = tuple(cfg[p]["span"] and spans_rows(S, *stride, padding[1]) for p in ("fwd", "bwd"))
    return Geometry(N, C, K, H, W, R, S, *stride, *padding, bc, bk, pick_block(Q, f["bq"]),
                    tuple(cfg[p]["spec"] for p in SCHEMA), splits,
                    tuple(cfg[p]["call_kb"] for p in SCHEMA), flat, parts, span,
                    pick_block(P_ * Q, f["span_q"]) if any(span) else 1,
                    tuple(cfg[p]["w_reuse"] for p in ("fwd", "bwd")), f["pointwise_kb"],
                    f["pointwise_bp"], f["pointwise_classes"], f["classes_bp"],
                    f["pointwise_pairs"], f["nchw_x"], f["pointwise_rows"],
                    tuple(cfg[p]["columns"] for p in ("fwd", "bwd")),
                    cfg["bwd"]["columns_copies_w"],
                    cfg["upd"].get("pointwise_shares") or (N if cfg["upd"]["pointwise_images"]
                                                           else 0),
                    f["nchw_copies_w"], f["nchw_x_rows"], cfg["bwd"]["columns_copy_block"],
                    tuple(cfg[p]["pointwise"] for p in ("fwd", "bwd")), f["pointwise_tail"],
                    f["pointwise_tail_rows"])


# ---------------------------------------------------------------- the loop nests

def _loops(g, pass_):
    if pass_ == "fwd":  # spans: one "row" of all P x Q pixels, in blocks of bs
        rows, q, bq = (1, g.P * g.Q, g.bs) if g.span[0] else (g.P, g.Q, g.bq)
        loops = [Loop("n", 0, g.N, 1), Loop("k", 0, g.Kb, 1), Loop("p", 0, rows, 1),
                 Loop("q", 0, q, bq)]
    elif pass_ == "bwd":
        rows, w, bq = (1, g.H * g.W, g.bs) if g.span[1] else (g.H, g.W, g.bq)
        per_residue = nblocks(nblocks(w, g.sw), bq)  # pixel blocks of one residue class
        loops = [Loop("n", 0, g.N, 1), Loop("c", 0, g.Cb, 1), Loop("h", 0, rows, 1),
                 Loop("u", 0, g.sw * per_residue, 1)]
    else:  # the flat nest's k and c count C blocks of its tiles (flat_parts)
        parts_c, parts_k = flat_parts(g) if g.flat else (1, 1)
        loops = [Loop("k", 0, g.Kb * parts_k, 1), Loop("c", 0, g.Cb * parts_c, 1),
                 Loop("r", 0, g.R, 1), Loop("s", 0, g.S, 1), Loop("j", 0, g.splits, 1)]
    return parse_spec(g.specs[("fwd", "bwd", "upd").index(pass_)], loops, where="config: ")


_NESTS = {"fwd": forward_nest, "bwd": backward_nest, "upd": update_nest}

_TENSORS = {"fwd": ("x", "w", "y"), "bwd": ("dyp", "wt", "dx"), "upd": ("dyt", "x", "dw")}


def vnni_passes(g, dtype, backend):
    """The passes whose B operands are kept in VNNI pairs here (AMX): the
    forward's w (depth bc), the backward's wt (bk) and the flat update's dyf
    (its chunks)."""
    if dtype != "bf16":  # takes_vnni_b's first condition, ahead of flat_layout
        return frozenset()
    depths = (("fwd", g.bc), ("bwd", g.bk)) + ((("upd", flat_layout(g).Tc),) if g.flat else ())
    return frozenset(p for p, k in depths if takes_vnni_b(k, dtype, backend))


def bias_ops(g, k, has_bias):
    """The forward's epilogue ops that add b [K] (tensor b, f32) to a summed
    tile of output-channel block k, whose columns are the channels: (bias,)
    with has_bias, else ()."""
    return (bplan.bias("b", k * g.bk),) if has_bias else ()


def plan(g, pass_, dtype="f32", vnni=False, has_bias=False):
    """vnni: the pass's B operand in VNNI pairs (vnni_passes); has_bias (the
    forward): b [K] added to each tile of y as its last call ends."""
    if has_bias and pass_ != "fwd":
        raise ValueError(f"has_bias: only the forward adds a bias, not {pass_!r}")
    form = update_form(g) if pass_ == "upd" else None
    if vnni and form in ("rows", "narrow"):
        raise ValueError("vnni: this weight update streams image rows, not VNNI pairs")

    def record():
        nest, (a, b, c) = _NESTS[pass_], _TENSORS[pass_]
        if form == "narrow":
            nest, (a, b, c) = update_narrow_nest, ("xs", "dyb", "dw")
        elif form == "flat":
            nest, (a, b, c) = update_flat_nest, ("xf", "dyf", "dw")
        tensors = {a: dtype, b: dtype, c: "f32"}
        if vnni:
            nest = functools.partial(nest, vnni=True)
        if has_bias:
            tensors["b"] = "f32"
            nest = functools.partial(nest, epilogue=lambda n, k, pixel: bias_ops(g, k, True))
        rec = bplan.Recorder(tensors, spec=g.specs[("fwd", "bwd", "upd").index(pass_)])
        nest(rec, _loops(g, pass_), g, dtype)
        return rec.finish()
    return _plans.get((g, pass_, dtype, vnni) + ((True,) if has_bias else ()), record)


def update_inputs(x, dy, g, dtype, buffer=None, vnni=False):
    """The weight update's inputs from NCHW x and dy: {"dyt", "x"}, for narrow
    layers {"xs", "dyb"}, for the flat nest {"xf", "dyf"} (dyf in VNNI pairs
    with vnni: vnni_passes); into buffer(name, shape, dtype) when given."""
    ab = dtypes.NUMPY[dtype]
    get = (lambda name, shape: buffer(name, shape, ab)) if buffer else (lambda name, shape: None)
    Cb, Kb = g.Cb, g.Kb
    form = update_form(g)
    if form == "flat":
        f = flat_layout(g)
        dyf = block_dyf(dy, g, dtype, out=get("dyf_rows" if vnni else "dyf", (g.N, Kb, f.Pt, f.Ws, g.bk)))
        if vnni:
            dyf = vnni_tiles(dyf.reshape(g.N * Kb, f.Lt, g.bk),
                             out=get("dyf", (g.N * Kb, f.Lt, g.bk)))
        return dict(xf=block_xf(x, g, dtype, out=get("xf", (g.N, Cb, g.sh, g.sw, g.bc, f.L))),
                    dyf=dyf)
    if form == "narrow":
        Ws = nblocks(g.Wp, g.sw)
        return dict(xs=block_xs(x, g, dtype, out=get("xs", (g.N, Cb, g.Hp, g.sw, g.bc, Ws))),
                    dyb=block_y(dy, g, dtype, out=get("dyb", (g.N, Kb, g.P, g.Q, g.bk))))
    return dict(dyt=block_y(dy, g, dtype, pixels_last=True,
                            out=get("dyt", (g.N, Kb, g.P, g.bk, g.Q))),
                x=block_x(x, g, dtype, out=get("x", (g.N, Cb, g.Hp, g.Wp, g.bc))))


def update_output(g, buffer=None):
    """The buffer the weight update writes: shares x weight tiles. Every tile
    of every share is written (_geometry gives each share rows, and a tile's
    first call has beta 0), so it needs no zeroing."""
    tile = (g.bc, g.bk) if c_rows(g) else (g.bk, g.bc)
    shape = (g.splits, g.Kb, g.Cb, g.R, g.S) + tile
    return buffer("dw", shape, np.float32) if buffer else aligned_empty(shape, np.float32)


# ---------------------------------------------------------------- layouts
# One parallel pass each in C (brgemm.layouts): padding, channel blocking,
# transposition and the f32 -> bf16 rounding fused. `out`: a buffer to fill.


# ---------------------------------------------------------------- functional API

def _pair(v, name, minimum):
    if type(v) is int and v >= minimum:  # the common case, decided at once
        return v, v
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        v = (int(v), int(v))
    if (not isinstance(v, (tuple, list)) or len(v) != 2
            or not all(isinstance(e, (int, np.integer)) and not isinstance(e, bool) for e in v)):
        raise TypeError(f"{name}: expected an int or a pair of ints, got {v!r}")
    if min(v) < minimum:
        raise ValueError(f"{name}: expected values >= {minimum}, got {tuple(v)}")
    return int(v[0]), int(v[1])


def _check(x, w, dtype, stride, padding, layer_owns_w=False):
    operands(dtype, x, w, names=("x", "w"), ndim=4, nonempty=True)
    stride, padding = _pair(stride, "stride", 1), _pair(padding, "padding", 0)
    (N, C, H, W), (K, C2, R, S) = x.shape, w.shape
    if C2 != C:  # the argument at fault: w, unless a layer owns it
        raise ValueError(f"x: has {C} channels, the layer takes {C2}" if layer_owns_w else
                         f"w: has {C2} input channels, x has {C}")
    if R > H + 2 * padding[0] or S > W + 2 * padding[1]:
        raise ValueError(f"x: the padded input {H + 2 * padding[0]}x{W + 2 * padding[1]} is "
                         f"smaller than w's {R}x{S} kernel")
    # the blocked copies hold the padded input (and dx) whole: refuse before allocating
    padded = N * max(C, 16) * (H + 2 * padding[0]) * (W + 2 * padding[1]) * 4
    fits(padded, "padding" if max(padding) else "x", lambda: f"the padded input {N}x{C}x"
         f"{H + 2 * padding[0]}x{W + 2 * padding[1]}")
    return (N, C, K, H, W, R, S), stride, padding
