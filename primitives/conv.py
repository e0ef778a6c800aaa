"""2-D convolution as loop nests around the batch-reduce kernel (F.conv2d: no
bias, dilation 1, groups 1).

    x [N,C,H,W], w [K,C,R,S] -> y [N,K,P,Q],  P = (H + 2ph - R) // sh + 1

Blocked layouts (channels in blocks of bc / bk, innermost; zero-padded):
    x, dx  [N][Cb][Hp][Wp][bc]   Hp = H + 2ph, Wp = W + 2pw (padding kept physically)
    y      [N][Kb][P][Q][bk]     w [Kb][Cb][R][S][bc][bk]    wt [Cb][Kb][R][S][bk][bc]
    dyp    [N][Kb][Pp][Qp][bk]   dy with a zero border for the backward-data pass
    dyt    [N][Kb][P][bk][Q]     dy with pixels innermost, for the weight update
    dw     [J][Kb][Cb][R][S][bk][bc]  J shares of the weight gradient, summed after
Forward (the seed paper's nest): a row segment of bq output pixels of one
output-channel block = sum over input-channel blocks, r and s of a bq x bc
strip of x (rows sw*bc apart: the stride is a row stride) times a bc x bk tap.
Backward-data: a transposed convolution, written per residue class of the
padded input pixels modulo the stride, so each call reads contiguous dy
pixels and only the taps that reach them. Weight update: a tap's bk x bc tile
= sum over images, rows and pixel blocks of dy^T (bk x bq) times x (bq x bc).

Each pass's loop nest has a file of its own (conv_forward.py, conv_backward.py,
conv_update.py); this module holds the geometry, the plans, the layouts, the
functional forms, the layer and the tuner's search space.
"""
# Over 450 lines: the nests live in conv_forward/conv_backward/conv_update; what
# stays (geometry, layouts, plans, functional forms, Conv2d, search) shares the
# geometry and the plan cache. Conv2d is next to move out.
import dataclasses
import functools

import numpy as np

from brgemm import dtypes
from brgemm import plan as bplan
from brgemm.arrays import Recycler, Scratch, aligned_empty
from brgemm.info import kernel_path
from brgemm.layouts import (blocks_to_image, image_to_blocks, nblocks, pick_block, to_blocks,
                            taps_from_blocks, taps_to_blocks)
from brgemm.loopspec import Loop, parse_spec
from brgemm.vnni import takes_vnni_b, vnni_tiles
from primitives import reuse as _reuse
from primitives._args import backend_name, fits, positive
from primitives._config import geometry as cached_geometry
from primitives._config import settings
from primitives.conv_backward import backward_nest
from primitives.conv_forward import forward_nest, pointwise_nest
from primitives.conv_update import narrow, update_narrow_nest, update_nest

SHAPE = ("N", "C", "K", "H", "W", "R", "S", "sh", "sw", "ph", "pw")  # a shape key's dimensions
SCHEMA = {"fwd": {"spec": str, "bc": int, "bk": int, "bq": int, "call_kb": int},
          "bwd": {"spec": str, "call_kb": int}, "upd": {"spec": str, "tiles": int, "call_kb": int}}
_plans = bplan.PlanCache(maxsize=64)


@dataclasses.dataclass(frozen=True)
class Geometry:
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

    P = property(lambda g: (g.H + 2 * g.ph - g.R) // g.sh + 1)
    Q = property(lambda g: (g.W + 2 * g.pw - g.S) // g.sw + 1)
    Hp = property(lambda g: g.H + 2 * g.ph)
    Wp = property(lambda g: g.W + 2 * g.pw)
    Cb = property(lambda g: nblocks(g.C, g.bc))
    Kb = property(lambda g: nblocks(g.K, g.bk))
    # dy's zero border for backward-data: output rows/pixels a tap can reach from outside
    bp = property(lambda g: -(-(g.R - 1) // g.sh))
    bw = property(lambda g: -(-(g.S - 1) // g.sw))
    Pp = property(lambda g: g.P + 2 * g.bp)
    # a residue class of padded input pixels reaches dy pixels up to (Wp - 1) / sw
    Qp = property(lambda g: max(g.Q, nblocks(g.Wp, g.sw)) + 2 * g.bw)


def geometry(N, C, K, H, W, R, S, stride, padding, config=None, path=None):
    """path: the kernel path (brgemm.info.kernel_path), whose config tables apply."""
    # a stride past the last tap position leaves one output row (column) whatever
    # its size: the smallest such stride computes the same, and the backward
    # nests and layouts that step through residue classes of the stride stay small
    stride = (min(stride[0], H + 2 * padding[0] - R + 1), min(stride[1], W + 2 * padding[1] - S + 1))
    padding = tuple(padding)
    return cached_geometry("conv", (N, C, K, H, W, R, S, stride, padding, path), config,
                           lambda: _geometry(N, C, K, H, W, R, S, stride, padding, config, path))


def _geometry(N, C, K, H, W, R, S, stride, padding, config, path=None):
    shape = dict(N=N, C=C, K=K, H=H, W=W, R=R, S=S, sh=stride[0], sw=stride[1], ph=padding[0],
                 pw=padding[1])
    cfg = {p: settings("conv", p, shape, SCHEMA[p], config, path) for p in SCHEMA}
    f = cfg["fwd"]
    Q = (W + 2 * padding[1] - S) // stride[1] + 1
    P_ = (H + 2 * padding[0] - R) // stride[0] + 1
    bc, bk = pick_block(C, f["bc"], 16), pick_block(K, f["bk"], 16)
    # enough weight-update tasks: split its reduction until there are `tiles` of them
    tiles = nblocks(C, bc) * nblocks(K, bk) * R * S
    splits = max(1, min(N * P_, -(-cfg["upd"]["tiles"] // tiles)))
    # rows per share rounded up can leave the last shares with no rows, and an
    # empty share would leave its slice of the reduction buffer unwritten:
    # keep only as many shares as the rounded-up share size needs
    splits = -(-N * P_ // -(-N * P_ // splits))
    return Geometry(N, C, K, H, W, R, S, *stride, *padding, bc, bk, pick_block(Q, f["bq"]),
                    tuple(cfg[p]["spec"] for p in SCHEMA), splits,
                    tuple(cfg[p]["call_kb"] for p in SCHEMA))


# ---------------------------------------------------------------- the loop nests

def _loops(g, pass_):
    if pass_ == "fwd":
        loops = [Loop("n", 0, g.N, 1), Loop("k", 0, g.Kb, 1), Loop("p", 0, g.P, 1),
                 Loop("q", 0, g.Q, g.bq)]
    elif pass_ == "bwd":
        per_residue = nblocks(nblocks(g.W, g.sw), g.bq)  # pixel blocks of one residue class
        loops = [Loop("n", 0, g.N, 1), Loop("c", 0, g.Cb, 1), Loop("h", 0, g.H, 1),
                 Loop("u", 0, g.sw * per_residue, 1)]
    else:
        loops = [Loop("k", 0, g.Kb, 1), Loop("c", 0, g.Cb, 1), Loop("r", 0, g.R, 1),
                 Loop("s", 0, g.S, 1), Loop("j", 0, g.splits, 1)]
    return parse_spec(g.specs[("fwd", "bwd", "upd").index(pass_)], loops, where="config: ")


_NESTS = {"fwd": forward_nest, "bwd": backward_nest, "upd": update_nest}
_TENSORS = {"fwd": ("x", "w", "y"), "bwd": ("dyp", "wt", "dx"), "upd": ("dyt", "x", "dw")}


def vnni_passes(g, dtype, backend):
    """The passes whose weight tiles are kept in VNNI pairs here (AMX): the
    forward's w (depth bc) and the backward's wt (bk)."""
    return frozenset(p for p, k in (("fwd", g.bc), ("bwd", g.bk)) if takes_vnni_b(k, dtype, backend))


def plan(g, pass_, dtype="f32", vnni=False):
    """vnni: the forward's or backward's weight tiles in VNNI pairs (vnni_passes)."""
    if vnni and pass_ == "upd":
        raise ValueError("vnni: the weight update streams images, not weight tiles")

    def record():
        nest, (a, b, c) = _NESTS[pass_], _TENSORS[pass_]
        if pass_ == "upd" and narrow(g):
            nest, (a, b, c) = update_narrow_nest, ("xs", "dyb", "dw")
        rec = bplan.Recorder({a: dtype, b: dtype, c: "f32"},
                             spec=g.specs[("fwd", "bwd", "upd").index(pass_)])
        if vnni:
            nest = functools.partial(nest, vnni=True)
        nest(rec, _loops(g, pass_), g, dtype)
        return rec.finish()
    return _plans.get((g, pass_, dtype, vnni), record)


def pointwise(g, dtype, backend):
    """The pixel block of the functional forward's pointwise plan, or None where
    it does not apply. A 1x1 layer with stride 1 and no padding is a GEMM per
    image on NCHW arrays as they are (pointwise_nest): it reads w in place and
    writes y in place, where the blocked plan needs both copied. f32 on the
    CPU backend, C a multiple of bc (x's tiles hold whole images), and images
    of at least 512 pixels: on 14 x 14 and 7 x 7 images the kernel's short,
    ragged pixel rows cost about what the copies save."""
    HW = g.H * g.W
    if ((g.R, g.S, g.sh, g.sw, g.ph, g.pw) != (1, 1, 1, 1, 0, 0) or g.C % g.bc
            or dtype != "f32" or backend != "cpu" or HW < 512):
        return None
    return pick_block(HW, 128, 16)


def pointwise_plan(g, dtype, bp):
    def record():
        loops = parse_spec("NKP", [Loop("n", 0, g.N, 1), Loop("k", 0, g.Kb, 1),
                                   Loop("p", 0, nblocks(g.H * g.W, bp), 1)])
        rec = bplan.Recorder({"w": dtype, "xt": dtype, "y": "f32"}, spec="NKP")
        pointwise_nest(rec, loops, g, dtype, bp)
        return rec.finish()
    return _plans.get((g, "pointwise", dtype, bp), record)


def update_inputs(x, dy, g, dtype, buffer=None):
    """The weight update's inputs from NCHW x and dy: {"dyt", "x"} or, for
    narrow layers, {"xs", "dyb"}; into buffer(name, shape, dtype) when given."""
    ab = dtypes.NUMPY[dtype]
    get = (lambda name, shape: buffer(name, shape, ab)) if buffer else (lambda name, shape: None)
    Cb, Kb = g.Cb, g.Kb
    if narrow(g):
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
    tile = (g.bc, g.bk) if narrow(g) else (g.bk, g.bc)
    shape = (g.splits, g.Kb, g.Cb, g.R, g.S) + tile
    return buffer("dw", shape, np.float32) if buffer else aligned_empty(shape, np.float32)


# ---------------------------------------------------------------- layouts
# One parallel pass each in C (brgemm.layouts): padding, channel blocking,
# transposition and the f32 -> bf16 rounding fused. `out`: a buffer to fill.

def block_x(x, g, dtype, out=None):
    """[N, C, H, W] -> [N][Cb][Hp][Wp][bc], zero-padded channels and border."""
    return image_to_blocks(x, g.bc, g.Hp, g.Wp, g.ph, g.pw, dtype=dtypes.NUMPY[dtype], out=out)


def unblock_x(t, g, dtype, out=None):
    """[N][Cb][Hp][Wp][bc] -> [N, C, H, W] (padding dropped)."""
    return blocks_to_image(t, g.C, g.H, g.W, g.ph, g.pw, dtype=dtype, out=out)


def block_y(y, g, dtype, bordered=False, pixels_last=False, out=None):
    """[N, K, P, Q] -> [N][Kb][P][Q][bk]; bordered: [N][Kb][Pp][Qp][bk] with dy at
    (bp, bw) in a zero border (backward-data); pixels_last: [N][Kb][P][bk][Q]."""
    dt = dtypes.NUMPY[dtype]
    if pixels_last:
        out = out if out is None else out.reshape(g.N, g.Kb, g.P, 1, g.bk, g.Q)
        t = image_to_blocks(y, g.bk, g.P, g.Q, pixels_last=True, dtype=dt, out=out)
        return t.reshape(g.N, g.Kb, g.P, g.bk, g.Q)
    if bordered:
        return image_to_blocks(y, g.bk, g.Pp, g.Qp, g.bp, g.bw, dtype=dt, out=out)
    return image_to_blocks(y, g.bk, g.P, g.Q, dtype=dt, out=out)


def unblock_y(t, g, dtype, out=None):
    return blocks_to_image(t, g.K, g.P, g.Q, dtype=dtype, out=out)


def block_w(w, g, dtype, transposed=False, out=None):
    """[K, C, R, S] -> w [Kb][Cb][R][S][bc][bk], or wt [Cb][Kb][R][S][bk][bc]."""
    if out is not None:
        out = out.reshape(out.shape[:2] + (g.R * g.S,) + out.shape[4:])
    t = taps_to_blocks(w, g.bk, g.bc, transposed, dtype=dtypes.NUMPY[dtype], out=out)
    return t.reshape(t.shape[:2] + (g.R, g.S) + t.shape[3:])


def layer_weights(w, g, dtype, vnni=frozenset()):
    """w and wt as the layer keeps them: blocked, and in VNNI pairs for the
    passes in `vnni` (vnni_passes: AMX reads them so, repacked per change)."""
    wb, wt = block_w(w, g, dtype), block_w(w, g, dtype, transposed=True)
    return (vnni_tiles(wb) if "fwd" in vnni else wb, vnni_tiles(wt) if "bwd" in vnni else wt)


def unblock_dw(t, g, dtype, out=None):
    """The update's output (shares summed) [J][Kb][Cb][R][S][bk][bc], or
    [..][bc][bk] for narrow layers, -> [K, C, R, S]."""
    t = t.reshape(t.shape[:3] + (g.R * g.S,) + t.shape[5:])
    return taps_from_blocks(t, g.K, g.C, (g.R, g.S), c_rows=narrow(g), dtype=dtype, out=out)


def block_xs(x, g, dtype, out=None):
    """[N, C, H, W] -> xs [N][Cb][Hp][sw][bc][ceil(Wp/sw)]: padded x with pixels
    innermost, split by phase modulo the stride (update_narrow_nest reads it)."""
    Ws = nblocks(g.Wp, g.sw)
    return image_to_blocks(x, g.bc, g.Hp, Ws * g.sw, g.ph, g.pw, pixels_last=True, phases=g.sw,
                           dtype=dtypes.NUMPY[dtype], out=out)


# ---------------------------------------------------------------- functional API

def _pair(v, name, minimum):
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        v = (int(v), int(v))
    if (not isinstance(v, (tuple, list)) or len(v) != 2
            or not all(isinstance(e, (int, np.integer)) and not isinstance(e, bool) for e in v)):
        raise TypeError(f"{name}: expected an int or a pair of ints, got {v!r}")
    if min(v) < minimum:
        raise ValueError(f"{name}: expected values >= {minimum}, got {tuple(v)}")
    return int(v[0]), int(v[1])


def _check(x, w, dtype, stride, padding):
    dtypes.check_name(dtype)
    allowed = (dtypes.float32,) if dtype == "f32" else (dtypes.float32, dtypes.bfloat16)
    for a, name in ((x, "x"), (w, "w")):
        if not isinstance(a, np.ndarray):
            raise TypeError(f"{name}: expected a numpy.ndarray, got {type(a).__name__}")
        if a.dtype not in allowed:
            raise TypeError(f"{name}: expected dtype {' or '.join(map(str, allowed))} for "
                            f"dtype={dtype!r}, got {a.dtype}")
        if a.ndim != 4 or 0 in a.shape:
            raise ValueError(f"{name}: expected 4 non-empty dimensions, got shape {a.shape}")
    stride, padding = _pair(stride, "stride", 1), _pair(padding, "padding", 0)
    (N, C, H, W), (K, C2, R, S) = x.shape, w.shape
    if C2 != C:
        raise ValueError(f"w: has {C2} input channels, x has {C}")
    if R > H + 2 * padding[0] or S > W + 2 * padding[1]:
        raise ValueError(f"x: the padded input {H + 2 * padding[0]}x{W + 2 * padding[1]} is "
                         f"smaller than w's {R}x{S} kernel")
    # the blocked copies hold the padded input (and dx) whole: refuse before allocating
    padded = N * max(C, 16) * (H + 2 * padding[0]) * (W + 2 * padding[1]) * 4
    fits(padded, "padding" if max(padding) else "x", f"the padded input {N}x{C}x"
         f"{H + 2 * padding[0]}x{W + 2 * padding[1]}")
    return (N, C, K, H, W, R, S), stride, padding


_scratch = Scratch()  # blocked copies of one call's operands
_results = Recycler()  # the arrays the functional forms return


def _weights(w, g, dtype, transposed, token, vnni=False):
    """w blocked for the forward (or, transposed, backward-data), in VNNI pairs
    with vnni, kept under `token` while provably unchanged (primitives.reuse)."""
    shape = (g.Cb, g.Kb, g.R, g.S, g.bk, g.bc) if transposed else \
        (g.Kb, g.Cb, g.R, g.S, g.bc, g.bk)

    def blocked():
        t = block_w(w, g, dtype, transposed,
                    out=None if token else _scratch.get("w", shape, dtypes.NUMPY[dtype]))
        if not vnni:
            return t
        return vnni_tiles(t, out=None if token else _scratch.get("w_vnni", shape, t.dtype))
    return _reuse.blocked(token, ("conv", "wt" if transposed else "w", g, dtype, vnni), (w,),
                          blocked)


def forward(x, w, stride=1, padding=0, dtype="f32", backend=None, config=None, reuse=None):
    """F.conv2d(x, w, stride=stride, padding=padding): x [N,C,H,W], w [K,C,R,S] -> [N,K,P,Q].
    reuse: keep w's blocked copy across calls (primitives.reuse)."""
    dims, stride, padding = _check(x, w, dtype, stride, padding)
    token = _reuse.check(reuse)
    backend = backend_name(backend)
    g = geometry(*dims, stride, padding, config, kernel_path(dtype, backend))
    ab = dtypes.NUMPY[dtype]
    bp = pointwise(g, dtype, backend)
    if bp and x.dtype == np.float32 and w.dtype == np.float32:
        HW = g.H * g.W
        xt = to_blocks(x.reshape(g.N * g.C, HW), g.bc, bp, swap_grid=True,
                       out=_scratch.get("xt", (nblocks(HW, bp), g.N * g.Cb, g.bc, bp), ab))
        y = _results.empty("y", (g.N, g.K, g.P, g.Q), np.float32)
        pointwise_plan(g, dtype, bp).run(backend=backend, w=np.ascontiguousarray(w), xt=xt, y=y)
        return y
    y = _scratch.get("y", (g.N, g.Kb, g.P, g.Q, g.bk), np.float32)  # all written: beta 0 first
    vnni = "fwd" in vnni_passes(g, dtype, backend)
    plan(g, "fwd", dtype, vnni).run(
        backend=backend, x=block_x(x, g, dtype, out=_scratch.get("x", (g.N, g.Cb, g.Hp, g.Wp, g.bc), ab)),
        w=_weights(w, g, dtype, False, token, vnni), y=y)
    return unblock_y(y, g, x.dtype, out=_results.empty("y", (g.N, g.K, g.P, g.Q), x.dtype))


def backward(dy, x, w, stride=1, padding=0, dtype="f32", backend=None, config=None, reuse=None):
    """Gradients of F.conv2d: dx [N,C,H,W], dw [K,C,R,S]. reuse: keep w's
    blocked copy across calls (primitives.reuse)."""
    dims, stride, padding = _check(x, w, dtype, stride, padding)
    token = _reuse.check(reuse)
    backend = backend_name(backend)
    g = geometry(*dims, stride, padding, config, kernel_path(dtype, backend))
    if not isinstance(dy, np.ndarray) or dy.shape != (g.N, g.K, g.P, g.Q):
        raise ValueError(f"dy: expected shape {(g.N, g.K, g.P, g.Q)}, got "
                         f"{getattr(dy, 'shape', type(dy).__name__)}")
    if dy.dtype != x.dtype:
        raise TypeError(f"dy: expected dtype {x.dtype} like x, got {dy.dtype}")
    ab = dtypes.NUMPY[dtype]
    # the plan writes dx's interior (every residue class, a call even where no
    # tap reaches); the border stays unwritten and unblock_x never reads it
    dx = _scratch.get("dx", (g.N, g.Cb, g.Hp, g.Wp, g.bc), np.float32)
    vnni = "bwd" in vnni_passes(g, dtype, backend)
    plan(g, "bwd", dtype, vnni).run(
        backend=backend, dx=dx, wt=_weights(w, g, dtype, True, token, vnni),
        dyp=block_y(dy, g, dtype, bordered=True,
                    out=_scratch.get("dyp", (g.N, g.Kb, g.Pp, g.Qp, g.bk), ab)))
    dw = update_output(g, _scratch.get)
    plan(g, "upd", dtype).run(backend=backend, dw=dw,
                              **update_inputs(x, dy, g, dtype, _scratch.get))
    return (unblock_x(dx, g, x.dtype, out=_results.empty("dx", (g.N, g.C, g.H, g.W), x.dtype)),
            unblock_dw(dw, g, x.dtype, out=_results.empty("dw", w.shape, x.dtype)))


# ---------------------------------------------------------------- the layer

class Conv2d:
    """A convolution layer that keeps its weights blocked (w for forward, wt
    for backward-data) and its plans per input size. forward/backward take and
    return NCHW arrays; the *_blocked methods work on the blocked layouts (x,
    y, dx as in the module docstring), which is what a network chains and what
    the benchmarks time. Weights are f32 ([K, C, R, S]); with dtype "bf16" the
    blocked copies and activations are bf16."""

    def __init__(self, C, K, kernel_size, stride=1, padding=0, dtype="f32", backend=None,
                 config=None, rng=None):
        self.backend = backend_name(backend)
        self.C, self.K = positive(C, "C"), positive(K, "K")
        self.R, self.S = _pair(kernel_size, "kernel_size", 1)
        self.stride, self.padding = _pair(stride, "stride", 1), _pair(padding, "padding", 0)
        self.dtype, self.config = dtypes.check_name(dtype), config
        rng = rng or np.random.default_rng()
        bound = 1 / np.sqrt(C * self.R * self.S)  # torch.nn.Conv2d's initialisation
        self.weight = rng.uniform(-bound, bound, (K, C, self.R, self.S)).astype(np.float32)
        self.g = None

    def prepare(self, N, H, W):
        """Geometry, plans and blocked weights for inputs of N x C x H x W."""
        if self.g is not None and (self.g.N, self.g.H, self.g.W) == (N, H, W):
            return self.g
        if self.R > H + 2 * self.padding[0] or self.S > W + 2 * self.padding[1]:
            raise ValueError(f"x: {H}x{W} (padded {H + 2 * self.padding[0]}x"
                             f"{W + 2 * self.padding[1]}) is smaller than the {self.R}x{self.S} kernel")
        g = self.g = geometry(N, self.C, self.K, H, W, self.R, self.S, self.stride, self.padding,
                              self.config, kernel_path(self.dtype, self.backend))
        self.vnni = vnni_passes(g, self.dtype, self.backend)
        self.plans = {p: plan(g, p, self.dtype, p in self.vnni) for p in ("fwd", "bwd", "upd")}
        self.load_weights()
        return g

    def load_weights(self):
        """Re-block the weights after they changed (step() does)."""
        if self.g is not None:
            self.w, self.wt = layer_weights(self.weight, self.g, self.dtype, self.vnni)

    def forward_blocked(self, x):
        g = self.g
        self.x = x
        self.y = aligned_empty((g.N, g.Kb, g.P, g.Q, g.bk), np.float32)
        self.plans["fwd"].run(backend=self.backend, x=x, w=self.w, y=self.y)
        return self.y

    def backward_blocked(self, dyp, update_inputs):
        """dy bordered for backward-data (block_y) and the update's inputs
        (update_inputs()) -> dx blocked like x (interior only); sets grad_weight."""
        g = self.g
        dx = aligned_empty((g.N, g.Cb, g.Hp, g.Wp, g.bc), np.float32)
        self.plans["bwd"].run(backend=self.backend, dyp=dyp, wt=self.wt, dx=dx)
        dw = update_output(g)
        self.plans["upd"].run(backend=self.backend, dw=dw, **update_inputs)
        self.grad_weight = unblock_dw(dw, g, np.float32)
        return dx

    def forward(self, x):
        """x [N, C, H, W] -> y [N, K, P, Q] in x's dtype."""
        _check(x, self.weight, self.dtype, self.stride, self.padding)  # f32 weights fit either dtype
        g = self.prepare(x.shape[0], x.shape[2], x.shape[3])
        self.x_nchw = x  # the update re-blocks it (narrow layers need another layout)
        return unblock_y(self.forward_blocked(block_x(x, g, self.dtype)), g, x.dtype)

    def backward(self, dy):
        """dy [N, K, P, Q] -> dx [N, C, H, W]; grad_weight holds dW [K, C, R, S]."""
        g = self.g
        if g is None or not isinstance(dy, np.ndarray) or dy.shape != (g.N, g.K, g.P, g.Q):
            raise ValueError(f"dy: expected the forward's output shape "
                             f"{(g.N, g.K, g.P, g.Q) if g else '(call forward first)'}, got "
                             f"{getattr(dy, 'shape', type(dy).__name__)}")
        dx = self.backward_blocked(block_y(dy, g, self.dtype, bordered=True),
                                   update_inputs(self.x_nchw, dy, g, self.dtype))
        return unblock_x(dx, g, dy.dtype)

    def step(self, lr):
        """Plain SGD on the f32 weights, then re-block them."""
        self.weight -= np.float32(lr) * self.grad_weight
        self.load_weights()


# ---------------------------------------------------------------- tuning

def search(pass_, shape, threads=None):
    """Configs the tuner may try for one pass of this layer (brgemm.tuning.Search).
    shape: N, C, K, H, W, R, S, sh, sw, ph, pw. fwd also tunes the blocking, which
    all three passes share; bwd and upd tune their loop order (upd: its tiles), and
    each pass the bytes its kernel calls read (call_kb)."""
    import itertools

    from brgemm.tuning import Search, best_time
    if pass_ not in SCHEMA:
        raise ValueError(f"pass: expected fwd, bwd or upd, got {pass_!r}")
    s = shape
    for name in ("N", "C", "K", "H", "W", "R", "S", "sh", "sw", "ph", "pw"):
        if s[name] < (0 if name in ("ph", "pw") else 1):
            raise ValueError(f"shape: {name} = {s[name]} is out of range")
    dims = (s["N"], s["C"], s["K"], s["H"], s["W"], s["R"], s["S"])
    stride, padding = (s["sh"], s["sw"]), (s["ph"], s["pw"])
    if s["R"] > s["H"] + 2 * s["ph"] or s["S"] > s["W"] + 2 * s["pw"]:
        raise ValueError(f"shape: the {s['R']}x{s['S']} kernel is larger than the padded "
                         f"{s['H'] + 2 * s['ph']}x{s['W'] + 2 * s['pw']} input")
    fits(4 * 4 * s["N"] * max(s["C"], s["K"], 16) * (s["H"] + 2 * s["ph"]) * (s["W"] + 2 * s["pw"])
         + 4 * s["K"] * s["C"] * s["R"] * s["S"], "shape", "this layer's tensors and their copies")
    Q = (s["W"] + 2 * s["pw"] - s["S"]) // s["sw"] + 1
    if pass_ == "fwd":
        cands = [dict(spec=sp, bc=bc, bk=bk, bq=bq, call_kb=kb)
                 for sp, bc, bk, bq, kb in itertools.product(
                     ("NKpq", "KNpq", "NKPq", "nKPq"), (32, 64), (32, 64), (7, 14, 28, 56), (32, 128))
                 if bq <= max(Q, 7)]
    elif pass_ == "bwd":
        cands = [dict(spec=sp, call_kb=kb) for sp, kb in itertools.product(
            ("NChu", "CNhu", "NCHu", "nCHu"), (16, 32, 64, 128))]
    else:
        cands = [dict(spec=sp, tiles=t, call_kb=kb)
                 for sp, t, kb in itertools.product(("KCRSJ", "CKRSJ"), (4, 8, 16, 32),
                                                    (32, 64, 128, 256))]
    rng = np.random.default_rng()
    x = rng.standard_normal((s["N"], s["C"], s["H"], s["W"])).astype(np.float32)
    w = rng.standard_normal((s["K"], s["C"], s["R"], s["S"])).astype(np.float32)

    def cost(cfg):
        # a model of the obvious: wide channel blocks and long pixel rows per call run
        # best; deeper structure is left to the timings
        full = {**settings("conv", "fwd", shape, SCHEMA["fwd"]), **cfg} if pass_ == "fwd" else \
            settings("conv", "fwd", shape, SCHEMA["fwd"])
        return 1.0 / (min(full["bk"], 64) * min(full["bc"], 64) * min(full["bq"], Q))

    def time(cfg, threads_):
        # the other passes as configured (BRGEMM_CONFIG included): bwd and upd are
        # tuned on the blocking that a tuned fwd chose
        others = {p: settings("conv", p, shape, SCHEMA[p]) for p in SCHEMA if p != pass_}
        g = geometry(*dims, stride, padding, config={**others, pass_: cfg})
        dy = rng.standard_normal((g.N, g.K, g.P, g.Q)).astype(np.float32)
        t = {"fwd": dict(x=block_x(x, g, "f32"), w=block_w(w, g, "f32"),
                         y=aligned_empty((g.N, g.Kb, g.P, g.Q, g.bk), np.float32)),
             "bwd": dict(dyp=block_y(dy, g, "f32", bordered=True),
                         wt=block_w(w, g, "f32", transposed=True),
                         dx=aligned_empty((g.N, g.Cb, g.Hp, g.Wp, g.bc), np.float32)),
             "upd": dict(dw=update_output(g), **update_inputs(x, dy, g, "f32"))}[pass_]
        p = plan(g, pass_, "f32")
        return best_time(lambda: p.run(threads=threads_, **t))

    return Search("conv", pass_, dict(shape), settings("conv", pass_, shape, SCHEMA[pass_]),
                  cands, cost, time)
