"""conv.Conv2d: a convolution layer that keeps its weights, activations and
plans in the blocked layouts between calls. Layouts and formulas:
primitives/conv.py."""
import numpy as np

from brgemm import dtypes
from brgemm.arrays import aligned_empty
from brgemm.info import kernel_path
from brgemm.layouts import column_sums
from primitives._args import (backend_name, bias_vector, flag, learning_rate, operands,
                             positive, weight_array, widened, writable)
from primitives.conv_layouts import (block_x, block_y, layer_weights, unblock_dw, unblock_x,
                                     unblock_y)
from primitives.conv_plans import (_check, _pair, geometry, plan, update_inputs, update_output,
                                   vnni_passes)


class Conv2d:
    """A convolution layer that keeps its weights blocked (w for forward, wt
    for backward-data) and its plans per input size. forward/backward take and
    return NCHW arrays; the *_blocked methods work on the blocked layouts (x,
    y, dx as in the module docstring), which is what a network chains and what
    the benchmarks time. Weights are f32 ([K, C, R, S]); with dtype "bf16" the
    blocked copies and activations are bf16. bias=True adds a bias [K] (f32,
    `bias`; its gradient `grad_bias`), which the forward's plan adds to each
    tile of y in its epilogue; off by default (the benchmarks' layers have
    none)."""

    def __init__(self, C, K, kernel_size, stride=1, padding=0, dtype="f32", backend=None,
                 config=None, rng=None, bias=False):
        self.backend = backend_name(backend)
        self.C, self.K = positive(C, "C"), positive(K, "K")
        self.R, self.S = _pair(kernel_size, "kernel_size", 1)
        self.stride, self.padding = _pair(stride, "stride", 1), _pair(padding, "padding", 0)
        self.dtype, self.config = dtypes.check_name(dtype), config
        rng = rng or np.random.default_rng()
        bound = 1 / np.sqrt(C * self.R * self.S)  # torch.nn.Conv2d's initialisation
        self.weight = rng.uniform(-bound, bound, (K, C, self.R, self.S)).astype(np.float32)
        self.bias = rng.uniform(-bound, bound, K).astype(np.float32) if flag(bias, "bias") \
            else None
        self.g = None
        self.grad_weight = self.grad_bias = None  # a backward's gradients

    def __getstate__(self):
        """What a copy (copy.deepcopy, pickle) keeps: arguments, weights and
        gradients; its plans and buffers are made again by its first forward."""
        keep = ("backend", "C", "K", "R", "S", "stride", "padding", "dtype", "config", "weight",
                "bias", "grad_weight", "grad_bias")
        return {k: self.__dict__[k] for k in keep}

    def __setstate__(self, state):
        self.__dict__.update(state, g=None)

    def prepare(self, N, H, W):
        """Geometry, plans and blocked weights for inputs of N x C x H x W."""
        if self.g is not None and (self.g.N, self.g.H, self.g.W) == (N, H, W):
            if self._loaded is not self.weight:
                self.load_weights()  # a new array set by hand: blocked afresh
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
        """Re-block the weights after they changed (step() does; a new array
        assigned to weight is seen by the next forward; writes into it in
        place need this call)."""
        self._check_weights()
        if self.g is not None:
            self._loaded = self.weight  # what the blocked copies hold
            self.w, self.wt = layer_weights(self._weight(), self.g, self.dtype, self.vnni)

    def _weight(self):
        """weight as the blocked copies read it (widened: bf16 set by hand on an f32 layer)."""
        return widened(self.weight, dtypes.NUMPY[self.dtype])

    def _check_weights(self):
        """weight and bias as set by hand: their shapes and dtypes, named."""
        weight_array(self.weight, "weight", (self.K, self.C, self.R, self.S))
        if self.bias is not None:
            weight_array(self.bias, "bias", (self.K,))

    def forward_blocked(self, x):
        g = self.g
        self.x = x
        self.y = aligned_empty((g.N, g.Kb, g.P, g.Q, g.bk), np.float32)
        if self.bias is None:
            self.plans["fwd"].run(backend=self.backend, x=x, w=self.w, y=self.y)
            return self.y
        b = np.zeros(g.Kb * g.bk, np.float32)  # the last block's padding channels add 0
        b[:g.K] = bias_vector(self.bias, g.K, "f32", "bias")
        plan(g, "fwd", self.dtype, "fwd" in self.vnni, has_bias=True).run(
            backend=self.backend, x=x, w=self.w, y=self.y, b=b)
        return self.y

    def backward_blocked(self, dyp, update_inputs):
        """dy bordered for backward-data (block_y) and the update's inputs
        (update_inputs()) -> dx blocked like x (interior only); sets grad_weight
        (and grad_bias: dy summed over images and pixels, its border zeros)."""
        g = self.g
        if self.bias is not None:  # NumPy's reduction runs on one thread: where there are a
            # few images, they are summed first in parallel (twice as fast at N = 16 here)
            sums = column_sums(dyp.reshape(g.N, -1)).reshape(dyp.shape[1:]).sum(axis=(1, 2)) \
                if g.N >= 4 else dyp.sum(axis=(0, 2, 3), dtype=np.float32)
            self.grad_bias = sums.reshape(-1)[:g.K]
        dx = aligned_empty((g.N, g.Cb, g.Hp, g.Wp, g.bc), np.float32)
        self.plans["bwd"].run(backend=self.backend, dyp=dyp, wt=self.wt, dx=dx)
        dw = update_output(g)
        self.plans["upd"].run(backend=self.backend, dw=dw, **update_inputs)
        self.grad_weight = unblock_dw(dw, g, np.float32)
        return dx

    def forward(self, x):
        """x [N, C, H, W] -> y [N, K, P, Q] in x's dtype."""
        self._check_weights()  # f32 weights fit either dtype
        _check(x, self._weight(), self.dtype, self.stride, self.padding, layer_owns_w=True)
        g = self.prepare(x.shape[0], x.shape[2], x.shape[3])
        # the update re-blocks it (narrow layers need another layout): a copy, as the
        # caller may change x (a batch buffer refilled) before backward
        self.x_nchw = x.copy()
        return unblock_y(self.forward_blocked(block_x(x, g, self.dtype)), g, x.dtype)

    def backward(self, dy):
        """dy [N, K, P, Q] -> dx [N, C, H, W]; grad_weight holds dW [K, C, R, S]."""
        operands(self.dtype, dy, names=("dy",), ndim=None)
        g = self.g
        if g is None or not isinstance(dy, np.ndarray) or dy.shape != (g.N, g.K, g.P, g.Q):
            raise ValueError(f"dy: expected the forward's output shape "
                             f"{(g.N, g.K, g.P, g.Q) if g else '(call forward first)'}, got "
                             f"{getattr(dy, 'shape', type(dy).__name__)}")
        dx = self.backward_blocked(block_y(dy, g, self.dtype, bordered=True),
                                   update_inputs(self.x_nchw, dy, g, self.dtype,
                                                 vnni="upd" in self.vnni))
        return unblock_x(dx, g, dy.dtype)

    def step(self, lr):
        """Plain SGD on the f32 weights (and bias), then re-block them."""
        lr = learning_rate(lr)
        if self.grad_weight is None:
            raise ValueError("grad_weight: no gradient yet: call backward() first")
        self._check_weights()
        writable(self.weight, "weight")
        if self.bias is not None:
            writable(self.bias, "bias")
        self.weight -= lr * self.grad_weight
        if self.bias is not None:
            self.bias -= lr * self.grad_bias
        self.load_weights()
