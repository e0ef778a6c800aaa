"""fc.Linear and fc.MLP: layers that keep weights, activations and plans in
their blocked layouts between calls (for training loops and benchmarks).
Layouts and formulas: primitives/fc.py."""
import numpy as np

from brgemm import dtypes
from brgemm.arrays import aligned_empty
from brgemm.info import kernel_path
from brgemm.layouts import from_blocks, to_blocks, transpose_blocks
from brgemm.vnni import vnni_tiles
from primitives._args import (backend_name, block_sizes, fits, flag, learning_rate,
                             operands, positive, weight_array, writable)
from primitives.fc_plans import ACT_GRAD, ACTIVATIONS, geometry, plan, vnni_passes


def batch_fits(x, widths):
    """A ValueError naming x where its batch's activations (one f32 row of
    each width a row) cannot fit in memory: a broadcast x (strides 0) may be
    far larger than the memory it sits in, and its plans would take as long
    to record as it is large."""
    N = x.shape[0]
    fits(4 * N * sum(widths), "x", lambda: f"a batch of {N} rows of {widths} in f32")


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
        self.bias = rng.uniform(-bound, bound, K).astype(np.float32) if flag(bias, "bias") \
            else None
        self.g = None
        self._grads = False  # whether dw (or _held_dw) and db hold a backward's gradients
        self._held_dw = None  # dW as a plain array, kept where dw's blocking went (prepare)

    # what a copy (copy.deepcopy, pickle) keeps: arguments, weights, gradients;
    # its plans and buffers are made again by its first forward
    _STATE = ("backend", "C", "K", "dtype", "activation", "config", "blocks", "weight", "bias",
              "_grads", "_held_dw", "db", "_fused_dw")

    def __getstate__(self):
        state = {k: v for k, v in self.__dict__.items() if k in self._STATE}
        if self._grads and self.g is not None and self._held_dw is None:
            state["_held_dw"] = self.grad_weight  # out of this blocking's tiles
        return state

    def __setstate__(self, state):
        self.__dict__.update(state, g=None)

    # -- set-up per minibatch size --
    def prepare(self, N):
        """Geometry, plans and blocked buffers for minibatch N (done once per N)."""
        if self.g is not None and self.g.N == N:
            if self._loaded[0] is not self.weight or self._loaded[1] is not self.bias:
                self.load_weights()  # a new array set by hand: blocked afresh
            return self.g
        if self._grads and self._held_dw is None and self.g is not None:
            self._held_dw = self.grad_weight  # the last backward's, past the new blocking
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
        """Re-block weight and bias after they changed (done by step(); a new
        array assigned to either is seen by the next forward; writes into the
        arrays in place need this call)."""
        self._check_weights()
        g, ab = self.g, dtypes.NUMPY[self.dtype]
        if g is None:
            return
        self._loaded = (self.weight, self.bias)  # what the blocked copies hold
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

    def _check_weights(self):
        """weight and bias as set by hand: their shapes and dtypes, named."""
        weight_array(self.weight, "weight", (self.K, self.C))
        if self.bias is not None:
            weight_array(self.bias, "bias", (self.K,))

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
        self._grads, self._held_dw = True, None

    def backward_blocked(self, dy):
        """dy blocked like y -> dx blocked like x; fills the weight gradients."""
        dz = dy
        if self.activation in ACT_GRAD:
            dz = ACT_GRAD[self.activation](dy.astype(np.float32), self.y)
            dz = dz.astype(dtypes.NUMPY[self.dtype])
        dx = self.backward_data_blocked(dz)
        self.update_blocked(dz)
        return dx

    # -- plain arrays --
    def forward(self, x):
        """x [N, C] -> y [N, K] in x's dtype."""
        operands(self.dtype, x, names=("x",))
        self._check_weights()  # set by hand: still checked
        if x.shape[1] != self.C or x.shape[0] == 0:
            raise ValueError(f"x: expected shape (N, {self.C}) with N >= 1, got {x.shape}")
        batch_fits(x, (self.C, self.K))
        g = self.prepare(x.shape[0])
        xb = to_blocks(x.astype(dtypes.NUMPY[self.dtype], copy=False), g.bn, g.bc)
        return from_blocks(self.forward_blocked(xb), g.N, self.K, dtype=x.dtype)

    def backward(self, dy):
        """dy [N, K] -> dx [N, C]; grad_weight and grad_bias hold dW, db."""
        operands(self.dtype, dy, names=("dy",))
        if self.g is None or dy.shape != (self.g.N, self.K):
            raise ValueError(f"dy: expected the forward's output shape "
                             f"{(self.g.N, self.K) if self.g else '(call forward first)'}, "
                             f"got {dy.shape}")
        g = self.g
        dyb = to_blocks(dy.astype(dtypes.NUMPY[self.dtype], copy=False), g.bn, g.bk)
        return from_blocks(self.backward_blocked(dyb), g.N, self.C, dtype=dy.dtype)

    @property
    def grad_weight(self):
        self._check_grads()
        if getattr(self, "_fused_dw", None) is not None:  # left by a fused MLP's backward
            return self._fused_dw
        if self._held_dw is not None:
            return self._held_dw.copy()
        return from_blocks(self.dw, self.C, self.K, transpose=True, swap_grid=True)

    def _check_grads(self, name="grad_weight"):
        """A ValueError before gradients are read that no backward wrote."""
        if getattr(self, "_fused_dw", None) is None and not self._grads:
            raise ValueError(f"{name}: no gradient yet: call backward() first")

    def _check_step(self):
        """A ValueError before step() moves anything: no gradients, or weights
        it cannot write (read-only, set by hand)."""
        self._check_grads()
        self._check_weights()
        writable(self.weight, "weight")
        if self.bias is not None:
            writable(self.bias, "bias")

    @property
    def grad_bias(self):
        if self.bias is None:
            return None
        self._check_grads("grad_bias")
        return self.db

    def step(self, lr):
        """Plain SGD on the f32 weights, then re-block them."""
        lr = learning_rate(lr)
        self._check_step()
        self.weight -= lr * self.grad_weight
        if self.bias is not None:
            self.bias -= lr * self.grad_bias
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
        flag(fused, "fused")
        rng = rng or np.random.default_rng()
        self.layers = [Linear(c, k, bias, activation if i < len(sizes) - 2 else last_activation,
                              dtype, backend, config, blocks, rng)
                       for i, (c, k) in enumerate(zip(sizes[:-1], sizes[1:]))]
        self.dtype = dtype
        self.fused = None
        self._trained = False  # whether the last forward kept what backward reads
        if fused:
            from primitives import mlp
            self.fused = mlp.fused(self.layers, dtype, self.layers[0].backend, config)

    def __getstate__(self):
        """A copy (copy.deepcopy, pickle) has no training forward to go back through."""
        return {**self.__dict__, "_trained": False}

    def forward(self, x, train=True):
        """x [N, C] -> y [N, K]. train=False: an inference forward, after which
        backward needs a training forward first (the fused MLP keeps no
        activations for it; the unfused one writes over the training ones)."""
        flag(train, "train")
        self._trained = False  # until this forward has run
        if self.fused is not None:
            y = self.fused.forward(x, train)
            self._trained = train
            return y
        first, last = self.layers[0], self.layers[-1]
        operands(self.dtype, x, names=("x",))
        if x.shape[1] != first.C or x.shape[0] == 0:
            raise ValueError(f"x: expected shape (N, {first.C}) with N >= 1, got {x.shape}")
        batch_fits(x, [first.C] + [layer.K for layer in self.layers])
        N = x.shape[0]
        for layer in self.layers:
            layer.prepare(N)
        h = to_blocks(x.astype(dtypes.NUMPY[self.dtype], copy=False), first.g.bn, first.g.bc)
        for layer in self.layers:
            h = layer.forward_blocked(h)
        self._trained = train
        return from_blocks(h, N, last.K, dtype=x.dtype)

    def backward(self, dy):
        if self.fused is not None:
            return self.fused.backward(dy)
        last = self.layers[-1]
        operands(self.dtype, dy, names=("dy",))
        if not self._trained:
            raise ValueError("dy: no training forward to go back through: the last forward "
                             "ran with train=False, or none ran")
        if last.g is None or dy.shape != (last.g.N, last.K):
            raise ValueError(f"dy: expected the forward's output shape, got {dy.shape}")
        d = to_blocks(dy.astype(dtypes.NUMPY[self.dtype], copy=False), last.g.bn, last.g.bk)
        for layer in reversed(self.layers):
            d = layer.backward_blocked(d)
        first = self.layers[0]
        return from_blocks(d, first.g.N, first.C, dtype=dy.dtype)

    def step(self, lr):
        lr = learning_rate(lr)
        for layer in self.layers:  # before any layer moves
            layer._check_step()
        for layer in self.layers:
            layer.step(lr)
