"""lstm.LSTM, the layer: weights blocked once (gate by gate, VNNI-packed where
the kernel path wants it), buffers and plans kept from step to step, and the
passes (forward, backward through time, weight update) over primitives.lstm_plans
and fc's hoisted plans. Layouts and formulas: primitives/lstm.py."""
import dataclasses

import numpy as np

from brgemm import dtypes
from brgemm.arrays import Buffers, Recycler, aligned_empty
from brgemm.info import kernel_path
from brgemm.layouts import column_sums, from_blocks, nblocks, to_blocks, transpose_blocks
from brgemm.vnni import vnni_tiles
from primitives import reuse as _reuse
from primitives._args import backend_name, flag, operands, positive, weight_array
from primitives._args import fits as fits_memory
from primitives import fc
from primitives.lstm_plans import (backward_plan, cell_plan, geometry, projection_t_plan,
                                    recurrent_plan)
from primitives.lstm_strips import NO_TILES, backward_data, copies_w, fits, weight_tiles
from primitives.lstm_weights import block_weights, transpose_tiles, vnni_operands


class LSTM:
    """One LSTM layer that keeps its weights blocked and saves what backward needs.

    Weights are f32 (`w_ih` [4K, C], `w_hh` [4K, K], `b` [4K]); with dtype
    "bf16" the GEMM operands are bf16 and accumulation and the cell are f32."""

    def __init__(self, C, K, dtype="f32", backend=None, config=None, rng=None, init=True):
        flag(init, "init")
        self.backend = backend_name(backend)
        self.C, self.K = positive(C, "C"), positive(K, "K")
        self.dtype, self.config = dtypes.check_name(dtype), config
        self.w_ih = self.w_hh = self.b = None  # init=False: set_weights() gives them
        if init:
            rng = rng or np.random.default_rng()
            bound = 1 / np.sqrt(K)  # torch.nn.LSTM's initialisation
            self.w_ih = rng.uniform(-bound, bound, (4 * K, C)).astype(np.float32)
            self.w_hh = rng.uniform(-bound, bound, (4 * K, K)).astype(np.float32)
            self.b = rng.uniform(-bound, bound, 4 * K).astype(np.float32)
        self.g = None
        self._grad_tiles, self._grads = None, {}
        self._results = Recycler()
        self._wbufs, self._own = Buffers(), False
        self._in_place = frozenset()  # set_weights(in_place=): see lstm_strips.reads_in_place

    def __getstate__(self):
        """What a copy (copy.deepcopy, pickle) keeps: arguments, weights and
        gradients (plain); its plans and buffers are made again by its first forward."""
        self._hold_grads()
        keep = ("backend", "C", "K", "dtype", "config", "w_ih", "w_hh", "b", "_grad_tiles",
                "_grads", "_in_place")
        return {k: self.__dict__[k] for k in keep}

    def __setstate__(self, state):
        self.__dict__.update(state, g=None, _own=False)
        self._results, self._wbufs = Recycler(), Buffers()

    def prepare(self, T, N):
        if self.g is not None and (self.g.T, self.g.N) == (T, N):
            return self.g
        self._hold_grads()
        g = self.g = geometry(T, N, self.C, self.K, self.config,
                              kernel_path(self.dtype, self.backend))
        d, ab = self.dtype, dtypes.NUMPY[self.dtype]
        self.gx, self.gh1 = g.fc_input, g.fc_step
        self.gh = g.fc_hidden(T, g.hpair * g.bk)
        v = self.vnni = vnni_operands(g, d, self.backend)
        self.plans = dict(proj=fc.plan(self.gx, "fwd", d, has_bias=True, vnni="x" in v),
                          rec=recurrent_plan(g, d, "h" in v),
                          dx=fc.plan(self.gx, "bwd", d, vnni="h" in v),
                          dwx=fc.plan(self.gx, "upd", d, vnni="upd" in v),
                          dh=fc.plan(self.gh1, "bwd", d, vnni="h" in v),
                          dwh=fc.plan(self.gh, "upd", d, vnni="upd" in v))
        tile = (g.bn, g.bk)
        self.G = aligned_empty((T * g.Nb, 4 * g.Kb) + tile, np.float32)
        self.h = aligned_empty((T + 1, g.Nb, g.Kb) + tile, np.float32)
        self.c = aligned_empty(self.h.shape, np.float32)
        self.h16 = aligned_empty(self.h.shape, ab) if d == "bf16" else None
        self._bufs = Buffers()
        self.load_weights()
        return g

    def load_weights(self, token=None):
        """Re-block w_ih, w_hh and b (after they changed: new arrays assigned
        to them are seen by the next forward, writes in place need this call); with a token
        (primitives.reuse), a copy kept from an earlier call when provably unchanged.
        Without one the copies go into this layer's own buffers, rewritten on
        each load: fresh pages would cost a fault each, several times the copy."""
        g = self.g
        if self.w_ih is not None:
            K4 = 4 * self.K
            for name, shape in (("w_ih", (K4, self.C)), ("w_hh", (K4, self.K)), ("b", (K4,))):
                weight_array(getattr(self, name), name, shape)
        if g is None or self.w_ih is None:
            return
        self._loaded = (self.w_ih, self.w_hh, self.b)  # what the blocked copies hold
        self._own = token is None  # the copies sit in self._weight_buffer's buffers
        buffer = self._weight_buffer if self._own else None
        skip = frozenset(n for n, w in (("wx", "w_ih"), ("wh", "w_hh")) if w in self._in_place)
        self._blocked = _reuse.blocked(
            token, ("lstm", g, self.dtype, self.vnni, skip), (self.w_ih, self.w_hh, self.b),
            lambda: block_weights(self.w_ih, self.w_hh, self.b, g, self.dtype, self.vnni,
                                  buffer, skip))
        self.wx, self.wh, self.bp = (self._blocked[k] for k in ("wx", "wh", "bp"))

    def _weight_buffer(self, name, shape, dtype):
        """A blocked weight copy's buffer (block_weights'), kept by prepare() too."""
        return self._wbufs.get(name, shape, dtype)

    def _transposed(self, name, of):
        """Tiles of the untransposed weights (`name`: the transpose of the tiles
        `of`), made once per set of weights (block_weights already made them where
        the tiles are packed in VNNI pairs)."""
        blocked = self._blocked
        if name not in blocked:
            buffer = self._weight_buffer if self._own else None
            w, bs = (self.w_ih, self.g.bc) if of == "wx" else (self.w_hh, self.g.bk)
            pairs = "h" in self.vnni  # both backward-data plans read them at depth bk
            plain = blocked[of] is not None and not pairs and \
                ("x" if of == "wx" else "h") not in self.vnni  # `of` not in pairs either
            blocked[name] = transpose_tiles(blocked[of], name, buffer) if plain else \
                weight_tiles(self.g, w, bs, name, buffer, self.dtype, pairs)  # from W itself
        return blocked[name]

    w_ih_tiles = property(lambda self: self._transposed("w_ih_tiles", "wx"),
                          doc="W_ih tiles [Cb][4Kb][bk][bc]")
    w_hh_tiles = property(lambda self: self._transposed("w_hh_tiles", "wh"),
                          doc="W_hh tiles [Kb][4Kb][bk][bk]")

    def set_weights(self, w_ih, w_hh, b, token=None, in_place=()):
        """Use these arrays as the weights (not copied), blocked as load_weights();
        in_place: the weights read in place, not blocked (lstm_strips.reads_in_place;
        no token)."""
        self.w_ih, self.w_hh, self.b = w_ih, w_hh, b
        self._in_place = frozenset(in_place)
        self.load_weights(token)

    def _buffer(self, name, shape, dtype=np.float32):
        """A buffer reused across calls (fresh pages cost a fault each; prepare()
        drops them), all written by each use (check mode NaN-fills each hand-out)."""
        return self._bufs.get(name, shape, dtype)

    # -- forward --
    def forward(self, x, h0=None, c0=None, backward_next=False):
        """x [T, N, C] -> y [T, N, K], (hT, cT), in x's dtype. backward_next: a backward
        follows, whose tiles of a W read in place the projection makes as it reads W."""
        T, N = _check_x(x, self.C, self.dtype)
        if self.w_ih is None:
            raise ValueError("w_ih: the layer has no weights (made with init=False): "
                             "call set_weights() first")
        g = self.prepare(T, N)
        if any(a is not b for a, b in zip(self._loaded, (self.w_ih, self.w_hh, self.b))):
            self.load_weights()  # new arrays set by hand (attributes): blocked afresh
        ab = dtypes.NUMPY[self.dtype]
        self.xb = self._steps_to_blocks(x, g.bc, g.C, "x", ab)
        _state_tiles(h0, N, self.K, "h0", self.h[0], self.dtype)
        _state_tiles(c0, N, self.K, "c0", self.c[0], self.dtype)
        if self.h16 is not None:
            self.h16[0] = self.h[0].astype(ab)
        if self.wx is None:  # the backward's tiles of the weights it does not copy itself
            tiles = self._in_place - copies_w(g, self._in_place)
            self._project_in_place(g, tiles if backward_next and fits(g, self.C, g.bc)
                                   and self.dtype == "f32" else ())
        else:
            self.plans["proj"].run(backend=self.backend, x=self.xb, w=self.wx, y=self.G,
                                   b=self.bp)
        if self.wh is None:  # T = 1: h0 W_hh^T is in G already
            cell_plan(g).run(backend=self.backend, G=self.G, c=self.c, h=self.h,
                             z=np.zeros(max(g.bn, g.bk), np.float32))
        else:
            t = dict(G=self.G, c=self.c, h=self.h, wh=self.wh)
            if self.h16 is not None:
                t["h16"] = self.h16
            self.plans["rec"].run(backend=self.backend, **t)
        y = self._steps_from_blocks(self.h[1:], self.K, "y")
        return (y.astype(x.dtype, copy=False), (self._plain_state(self.h[T], "hT", x.dtype),
                                                self._plain_state(self.c[T], "cT", x.dtype)))

    def _project_in_place(self, g, tiles):
        """G = x W_ih^T + b reading the plain W_ih (lstm_plans.projection_t_nest):
        x^T's tiles from x's, G's padding columns zeroed (the nest leaves them,
        the blocked projection writes them as zero tiles would); the backward's
        w_ih_tiles (w_hh_tiles) made on the way for "w_ih" ("w_hh") in tiles."""
        rows = g.T * g.Nb
        # bf16: x^T's and h0^T's tiles in VNNI pairs where the kernel reads them so
        pairs = self.vnni & {"x", "h"} if self.dtype == "bf16" else frozenset()
        xt = self._tiles_t(self.xb, "xt", "x" in pairs)
        if g.K % g.bk:
            self.G.reshape(rows, 4, g.Kb, g.bn, g.bk)[:, :, -1, :, g.K % g.bk:] = 0
        t = {}
        if self.wh is None:  # T = 1, W_hh read in place too: h0's products join
            t = dict(u=self.w_hh, ht=self._tiles_t(self.h16[0] if self.dtype == "bf16"
                                                   else self.h[0], "ht", "h" in pairs))
        for a, name, S, bs in (("w", "w_ih_tiles", g.C, g.bc), ("u", "w_hh_tiles", g.K, g.bk)):
            if name[:4] in tiles and (a == "w" or "u" in t):  # whole blocks (lstm_strips.fits)
                t[a + "ti"] = self._blocked[name] = self._weight_buffer(
                    name, (S // bs, 4 * g.Kb, g.bk, bs), np.float32)
        plan = projection_t_plan(g, "u" in t, tuple(a for a in "wu" if a + "ti" in t),
                                 self.dtype, pairs)
        plan.run(backend=self.backend, w=self.w_ih, xt=xt, G=self.G, b=self.bp, **t,
                 yt=self._buffer("yt", (plan.extent["yt"],)))

    def _tiles_t(self, t, name, vnni):
        """Tiles t [Rb][Sb][br][bs] transposed ([Sb][Rb][bs][br]) into this call's
        buffer `name`, then in VNNI pairs with vnni."""
        Rb, Sb, br, bs = t.shape
        out = transpose_blocks(t, out=self._buffer(name, (Sb, Rb, bs, br), t.dtype))
        return vnni_tiles(out, out=self._buffer(name + "_vnni", out.shape, t.dtype)) if vnni \
            else out

    def _steps_to_blocks(self, a, bs, S, name, dtype=None):
        """[T, N, S] -> [T*Nb][Sb][bn][bs] with each step's minibatch padded on its
        own, of `dtype` (default a's; bf16 from f32 rounds on the way)."""
        g = self.g
        dtype = a.dtype if dtype is None else np.dtype(dtype)
        out = self._buffer(name, (g.T * g.Nb, nblocks(S, bs), g.bn, bs), dtype)
        if g.N % g.bn == 0 and a.flags.c_contiguous:  # no padding between steps: one copy
            return to_blocks(a.reshape(g.T * g.N, S), g.bn, bs, out=out, dtype=dtype)
        for t in range(g.T):
            to_blocks(a[t], g.bn, bs, out=out[t * g.Nb:(t + 1) * g.Nb], dtype=dtype)
        return out

    def _plain_state(self, tiles, name, dtype):
        """A state's tiles [Nb][Kb][bn][bk] -> [N, K] of `dtype`, a result array."""
        g = self.g
        return from_blocks(tiles, g.N, self.K, dtype=dtype,
                           out=self._results.empty(name, (g.N, self.K), dtype))

    def _steps_from_blocks(self, tiles, S, name):
        """[T*Nb][Sb][bn][bs] -> [T, N, S], a result array (see Recycler)."""
        g = self.g
        tiles = tiles.reshape((g.T * g.Nb,) + tiles.shape[-3:])
        rows = g.T * g.Nb * g.bn
        plain = from_blocks(tiles, rows, S, out=self._results.empty(name, (rows, S), tiles.dtype))
        plain = plain.reshape(g.T, g.Nb * g.bn, S)
        return plain if g.N == g.Nb * g.bn else np.ascontiguousarray(plain[:, :g.N])

    # -- backward --
    def backward(self, dy, dhT=None, dcT=None, plain_grads=False, *, need_dx=True,
                 need_dw=True):
        """Gradients after forward(): returns dx, dh0, dc0 and sets grad_w_ih,
        grad_w_hh, grad_b (all f32 for the weights, the input's dtype else).
        plain_grads: the weight gradients will be read (the functional form
        returns them): written as plain arrays by the update plans where they
        can be, instead of tiles converted when read. need_dx=False: dx (dG
        W_ih over all steps) is not computed, None in its place; need_dw=False:
        nor the weights' and bias's gradients (frozen weights: grad_w_ih,
        grad_w_hh and grad_b are None)."""
        need_dx, need_dw = flag(need_dx, "need_dx"), flag(need_dw, "need_dw")
        g = self.g
        if g is None:
            raise ValueError("dy: call forward first")
        if not isinstance(dy, np.ndarray) or dy.shape != (g.T, g.N, self.K):
            raise ValueError(f"dy: expected shape {(g.T, g.N, self.K)}, got "
                             f"{getattr(dy, 'shape', type(dy).__name__)}")
        ab, out_dtype = dtypes.NUMPY[self.dtype], operands(self.dtype, dy, names=("dy",), ndim=3)
        # the last backward's gradients let go of first: a plain one still held
        # here would keep its recycled array (self._results) from being reused,
        # and each call would fault in fresh pages for dW_ih and dW_hh
        self._grad_tiles, self._grads = None, {}
        dyb = self._steps_to_blocks(dy.astype(np.float32, copy=False), g.bk, self.K, "dy")
        dyb = dyb.reshape((g.T, g.Nb, g.Kb, g.bn, g.bk))
        state = (g.Nb, g.Kb, g.bn, g.bk)
        dh = _state_tiles(dhT, g.N, self.K, "dhT", self._buffer("dhr", state), self.dtype)
        dc = _state_tiles(dcT, g.N, self.K, "dcT", self._buffer("dc", state), self.dtype)
        # the whole recurrence as one plan, the cell's derivatives fused; with
        # bf16, dG16 holds dG rounded for the GEMMs that read it
        dG = self._buffer("dG", self.G.shape)
        # T = 1, W_hh read in place (f32; bf16 reads w_hh_tiles, made from W_hh)
        wh_plain = "w_hh" in self._in_place and "w_hh_tiles" not in self._blocked and \
            self.dtype == "f32"
        t = dict(dy=dyb, G=self.G, c=self.c, dc=dc, dG=dG, dhr=dh,
                 wht=NO_TILES if wh_plain else self.w_hh_tiles)
        if self.dtype == "bf16":
            t["dG16"] = self._buffer("dG16", self.G.shape, ab)
        backward_plan(g, self.dtype, "h" in self.vnni).run(backend=self.backend, **t)
        dG_in = t.get("dG16", dG)
        dh = self._buffer("dh0", state)
        if wh_plain:
            self._backward_data(dG_in[:g.Nb], "w_hh", dh)
        else:
            self.plans["dh"].run(backend=self.backend, dy=dG_in[:g.Nb], wt=self.w_hh_tiles, dx=dh)
        if not need_dw:
            pass  # _grad_tiles stays None: no gradients of this backward
        elif plain_grads and self._plain_updates():
            self._weight_grads_plain(dG_in, g, dG)
        else:
            self._weight_grads(dG_in, g, dG)
        dx = None if not need_dx else self._steps_from_blocks(
            self._dx(dG_in, g), self.C, "dx").astype(out_dtype, copy=False)
        return (dx, self._plain_state(dh, "dh0", out_dtype),
                self._plain_state(dc, "dc0", out_dtype))

    def _dx(self, dG, g):
        dxb = self._buffer("dx", (g.T * g.Nb, g.Cb, g.bn, g.bc))
        if "w_ih" in self._in_place and "w_ih_tiles" not in self._blocked and \
                self.dtype == "f32":  # (bf16 reads w_ih_tiles, made from W_ih)
            return self._backward_data(dG, "w_ih", dxb)
        self.plans["dx"].run(backend=self.backend, dy=dG, wt=self.w_ih_tiles, dx=dxb)
        return dxb

    def _backward_data(self, dG, name, out):
        """out = dG @ W for a weight read in place whose tiles the forward did
        not make (lstm_strips.backward_data: copying them where copies_w says)."""
        g = self.g
        w, bs, fg = (self.w_ih, g.bc, self.gx) if name == "w_ih" else (self.w_hh, g.bk, self.gh1)
        return backward_data(g, dG, w, bs, out, self._buffer, self.backend,
                             fg if name in copies_w(g, self._in_place) else None)

    def _plain_updates(self):
        """The update plans that write dW_ih and dW_hh as plain [4K, *] arrays
        (fc's plain update), where they apply: every gate's rows whole blocks
        (K a multiple of bk, so the padded gates are the plain rows) and no
        VNNI packing of the streamed tiles. None where they do not. Rows in
        tiles of two hidden blocks (dG^T), dW_hh's columns paired where Kb is
        even (h_prev): on bk-row kernels they ran 7-13% behind (RESULTS.md)."""
        g = self.g
        if g.K % g.bk or "upd" in self.vnni:
            return None
        plans = self.__dict__.setdefault("_plain_plans", {})
        if g not in plans:
            plans.clear()
            rows = 2 * g.bk
            plans[g] = tuple(fc.plan(dataclasses.replace(geom, bk=rows), "upd", self.dtype,
                                     plain=True)
                             for geom in (self.gx, g.fc_hidden(g.T, g.hpair * g.bk)))
        return plans[g]

    def _retile(self, tiles, br, bs, name):
        """The matrix `tiles` [Rb][Sb][tr][ts] hold (padding included) in tiles of
        br x bs in buffer `name`, through a plain copy in a scratch buffer: two
        parallel copies."""
        Rb, Sb, tr, ts = tiles.shape
        plain = from_blocks(tiles, Rb * tr, Sb * ts,
                            out=self._buffer(name + "_plain", (Rb * tr, Sb * ts), tiles.dtype))
        return to_blocks(plain, br, bs, out=self._buffer(
            name, (nblocks(Rb * tr, br), nblocks(Sb * ts, bs), br, bs), tiles.dtype))

    def _weight_grads_plain(self, dG, g, dG32):
        """dW_ih = dG^T x and dW_hh = dG^T h_prev straight into plain arrays
        (see _plain_updates); db (f32) summed as dG^T's tiles are made from dG's,
        else as _weight_grads leaves it."""
        upd_x, upd_h = self._plain_updates()
        rows = g.T * g.Nb
        # db: dG's column sums (padding rows zero), in the pass that makes dG^T's tiles
        db = self._results.empty("grad_b", (4 * self.K,), np.float32) if dG is dG32 else None
        dGt = transpose_blocks(dG, pair=2, sums=db, out=self._buffer(
            "dGt", (2 * g.Kb, rows, 2 * g.bk, g.bn), dG.dtype))  # 4 Kb tiles across: even
        f32 = np.dtype(np.float32)
        dw_ih = self._results.empty("grad_w_ih", (4 * self.K, self.C), np.float32)
        upd_x.run(backend=self.backend, dyt=dGt, x=self.xb, dw=dw_ih)
        hprev = (self.h16 if self.h16 is not None else self.h)[:g.T]
        hprev = hprev.reshape((rows, g.Kb, g.bn, g.bk))
        if g.hpair > 1:
            hprev = self._retile(hprev, g.bn, g.hpair * g.bk, "hpair")
        dw_hh = self._results.empty("grad_w_hh", (4 * self.K, self.K), np.float32)
        upd_h.run(backend=self.backend, dyt=dGt, x=hprev, dw=dw_hh)
        self._grads = {("w_ih", f32): dw_ih, ("w_hh", f32): dw_hh}
        self._grad_tiles = dict(b=dG32) if db is None else {}
        self._grads.update({} if db is None else {("b", f32): db})

    def _weight_grads(self, dG, g, dG32):
        dwx = self._buffer("dwx", (4 * g.Kb, g.Cb, g.bc, g.bk))
        xt = transpose_blocks(self.xb, out=self._buffer("xt", (g.Cb, g.T * g.Nb, g.bc, g.bn),
                                                         self.xb.dtype))
        if "upd" in self.vnni:  # both updates stream dG as B: VNNI pairs, once per call
            dG = vnni_tiles(dG, out=self._buffer("dG_vnni", dG.shape, dG.dtype))
        self.plans["dwx"].run(backend=self.backend, xt=xt, dy=dG, dw=dwx)
        hprev = (self.h16 if self.h16 is not None else self.h)[:g.T]
        hprev = hprev.reshape((g.T * g.Nb, g.Kb, g.bn, g.bk))
        hb, pair, rows = g.Kb // g.hpair, g.hpair, g.T * g.Nb
        # [Kb/pair][rows][pair * bk][bn]: h_prev^T's tiles, pairs of them stacked
        ht = transpose_blocks(hprev, pair=pair, out=self._buffer(
            "ht", (hb, rows, pair * g.bk, g.bn), hprev.dtype))
        dwh = self._buffer("dwh", (4 * g.Kb, hb, pair * g.bk, g.bk))
        self.plans["dwh"].run(backend=self.backend, xt=ht, dy=dG, dw=dwh)
        self._grad_tiles = dict(w_ih=dwx, w_hh=dwh, b=dG32)
        self._grads = {}

    # The weight gradients stay in the update plans' tiles until read (as
    # fc.Linear's grad_weight): a training step that applies them blocked
    # never pays the conversion (two full passes over the weights).
    grad_w_ih = property(lambda self: self._grad("w_ih"), doc="dL/dw_ih [4K, C], f32")
    grad_w_hh = property(lambda self: self._grad("w_hh"), doc="dL/dw_hh [4K, K], f32")
    grad_b = property(lambda self: self._grad("b"), doc="dL/db [4K], f32")

    def _grad(self, name, dtype=np.float32):
        """One gradient of the last backward() as a plain array (None before
        one), in f32 or rounded to bf16 (dtype) on the way."""
        dtype = np.dtype(dtype)
        if (name, dtype) not in self._grads:
            if self._grad_tiles is None:
                return None
            self._grads[(name, dtype)] = self._plain_grad(name, np.dtype(dtype))
        return self._grads[(name, dtype)]

    def _hold_grads(self):
        """The last backward's gradients as plain f32 arrays, read from their
        tiles while the geometry that wrote them is still this layer's."""
        if self._grad_tiles:
            for name in ("w_ih", "w_hh", "b"):
                self._grad(name)
            self._grad_tiles = {}  # (non-empty _grads: all plain now)

    def _plain_grad(self, name, dtype):
        if name not in self._grad_tiles:  # written plain in f32 (_weight_grads_plain)
            return self._grads[(name, np.dtype(np.float32))].astype(dtype)
        g, tiles, K = self.g, self._grad_tiles[name], self.K
        if name == "b":  # rows of tiles summed first, in parallel: [4Kb][bn][bk]
            per_tile = column_sums(tiles.reshape(tiles.shape[0], -1))
            sums = per_tile.reshape(4, g.Kb, g.bn, g.bk).sum(axis=2).reshape(4, g.Kp)[:, :K]
            return np.ascontiguousarray(sums.reshape(-1)).astype(dtype)
        cols = self.C if name == "w_ih" else K
        # no fresh pages; each gate's rows written below
        out = self._results.empty("grad_" + name, (4 * K, cols), dtype)
        for q in range(4):  # each gate's tiles (W^T per gate) straight into its rows
            from_blocks(tiles[q * g.Kb:(q + 1) * g.Kb], cols, K, transpose=True, swap_grid=True,
                        dtype=dtype, out=out[q * K:(q + 1) * K])
        return out


# ---------------------------------------------------------------- the layer's argument checks

def _check_x(x, C, dtype):
    operands(dtype, x, names=("x",), ndim=None)
    if x.ndim != 3 or x.shape[2] != C or 0 in x.shape:
        raise ValueError(f"x: expected shape (T, N, {C}) with T, N >= 1, got {x.shape}")
    # a broadcast x (strides 0) may be far larger than the memory it sits in
    fits_memory(4 * x.size, "x", lambda: f"x's copy, {x.shape} in f32")
    return x.shape[:2]


def _state_tiles(s, N, K, name, out, dtype):
    """A state s [N, K] (None: zeros) as f32 tiles in `out` [Nb][Kb][bn][bk]."""
    if s is None:
        out.fill(0)
        return out
    operands(dtype, s, names=(name,), ndim=None)
    if s.shape != (N, K):
        raise ValueError(f"{name}: expected shape ({N}, {K}), got {s.shape}")
    return to_blocks(s.astype(np.float32, copy=False), out.shape[2], out.shape[3], out=out)
