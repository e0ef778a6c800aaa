"""Randomized sweep: fully connected layers against float64 NumPy, per-element
tolerances from the data (tests/tolerance.py): fc.forward (y) and
fc.backward (dx, dw, db), the Linear layer (with bias and activations) and
MLP stacks, both dtypes, every backend. Sizes from 1 up (odd, layer-sized,
N below and above the thread count), random block sizes, loop orders, chunks
and groups, some cases at 1, 2 or 3 threads. Seeds: tests/sweep_support.py."""
import numpy as np
import pytest

import brgemm
from primitives import fc
from sweep_support import cases, log_uniform, omp_threads, threads_for
from tolerance import Approx, assert_close, matmul, round_bf16

SPECS = {"fwd": ("NKc", "KNc", "Nkc", "Knc", "nKc", "kNc", "c|KNc"),
         "bwd": ("NCk", "CNk", "Nck", "Cnk", "nCk", "cNk", "k|NCk"),
         "upd": ("KCn", "CKn", "Kcn", "Ckn", "kCn", "cKn", "n|KCn")}
ACTIVATIONS = (None, "relu", "sigmoid", "tanh")


def draw_sizes(rng):
    """N, C, K: odd small sizes, layer-sized features, or a minibatch of 1."""
    kind = rng.choice(["odd", "layer", "one"], p=[0.45, 0.4, 0.15])
    if kind == "odd":
        N, C, K = (log_uniform(rng, 1, 200) for _ in range(3))
    elif kind == "layer":
        N = log_uniform(rng, 1, 300)
        C, K = (int(rng.choice([32, 64, 128, 256, 512, 768, 1024])) if rng.random() < 0.6
                else int(rng.integers(32, 1025)) for _ in range(2))
    else:
        N, C, K = 1, log_uniform(rng, 1, 1024), log_uniform(rng, 1, 1024)
    cap = 3e7
    while 2 * N * C * K > cap:
        N, C, K = max(1, N // 2), max(1, C * 3 // 4), max(1, K * 3 // 4)
    return N, C, K


def draw_config(rng):
    if rng.random() < 0.4:
        return None
    pick = lambda *v: v[rng.integers(len(v))]  # noqa: E731
    cfg = {"fwd": {"bn": pick(1, 8, 16, 32, 64, 128), "bc": pick(16, 32, 64, 128),
                   "bk": pick(16, 32, 64, 128)}}
    for p in ("fwd", "bwd", "upd"):
        chunk = pick(1, 2, 3, 1024)  # a group (spec "x|..x") is a multiple of the chunk
        cfg.setdefault(p, {}).update(spec=pick(*SPECS[p]), chunk=chunk,
                                     group=chunk * pick(1, 2, 4, 8))
    return cfg


def make(rng, dtype, *shape):
    a = rng.standard_normal(shape).astype(np.float32)
    return round_bf16(a) if dtype == "bf16" else a.astype(np.float64)


def in_dtype_for(rng, dtype):
    """bf16: arrays in bf16 (results come back rounded) or in f32 (rounded inside)."""
    return brgemm.bfloat16 if dtype == "bf16" and rng.random() < 0.7 else np.float32


def describe(**kw):
    return " ".join(f"{k}={v}" for k, v in kw.items())


# ---------------------------------------------------------------- functional

def run_functional(rng, backend, dtype, context):
    N, C, K = draw_sizes(rng)
    config, threads, in_dtype = draw_config(rng), threads_for(rng), in_dtype_for(rng, dtype)
    bias = rng.random() < 0.7
    x, w, dy = make(rng, dtype, N, C), make(rng, dtype, K, C), make(rng, dtype, N, K)
    b = rng.standard_normal(K).astype(np.float32).astype(np.float64) if bias else None
    if b is not None and np.dtype(in_dtype) == brgemm.bfloat16:
        b = round_bf16(b)
    context = describe(N=N, C=C, K=K, bias=bias, config=config, threads=threads,
                       backend=backend, dtype=dtype, input=np.dtype(in_dtype).name) + ". " + context
    print(context)
    cast = lambda a: a.astype(in_dtype)  # noqa: E731
    with omp_threads(threads):
        y = fc.forward(cast(x), cast(w), None if b is None else cast(b), dtype=dtype,
                       backend=backend, config=config)
        dx, dw, db = fc.backward(cast(dy), cast(x), cast(w), dtype=dtype, backend=backend,
                                 config=config)
    rounded = np.dtype(in_dtype) == brgemm.bfloat16
    assert y.dtype == dx.dtype == dw.dtype == db.dtype == in_dtype, context
    ref_y = matmul(x, w.T) + (b if b is not None else 0.0)
    assert_close("y", y, ref_y, rounded, context)
    assert_close("dx", dx, matmul(dy, w), rounded, context)
    assert_close("dw", dw, matmul(dy.T, x), rounded, context)
    assert_close("db", db, Approx(dy).sum(0), rounded, context)


# ---------------------------------------------------------------- layers


def activate(z, activation):
    return {None: lambda: z, "relu": z.relu, "sigmoid": z.sigmoid, "tanh": z.tanh}[activation]()


def activation_grad(dy, y, activation):
    """dL/dz from dL/dy and y = act(z), as Linear computes it (f32 NumPy)."""
    if activation is None:
        return dy
    if activation == "relu":
        value = dy.v * (y.v > 0)
        # where y may be 0 on one side and not on the other, the mask may differ
        unsure = (y.e > 0) & (y.v <= y.e)
        return Approx(value, np.where(unsure, np.abs(dy.v) + dy.e, dy.e * (y.v > 0)))
    if activation == "sigmoid":
        return dy * y * (1 - y)
    return dy * (1 - y * y)


class LinearRef:
    """One fc.Linear in float64 with error bounds: what its forward and backward
    compute, with the bf16 roundings of its activations and gradients."""

    def __init__(self, w, b, activation, dtype, act_from_bf16=False):
        """act_from_bf16: act' from y rounded to bf16 (what the fused bf16 MLP keeps
        of a hidden layer's output)."""
        self.w, self.b, self.activation, self.dtype = w, b, activation, dtype
        self.act_from_bf16 = act_from_bf16

    def forward(self, x):
        self.x = x
        z = matmul(x, self.w.T)
        if self.b is not None:
            z = z + self.b
        self.y = activate(z, self.activation)
        return self.y.bf16() if self.dtype == "bf16" else self.y   # y16: the next input

    def backward(self, dy):
        dz = activation_grad(dy, self.y.bf16() if self.act_from_bf16 else self.y, self.activation)
        if self.dtype == "bf16":
            dz = dz.bf16()
        self.dw = matmul(dz.T, self.x)
        self.db = dz.sum(0) if self.b is not None else None
        dx = matmul(dz, self.w)
        return dx.bf16() if self.dtype == "bf16" else dx


def run_layers(rng, backend, dtype, context, stack):
    N, C, K = draw_sizes(rng)
    config, threads, in_dtype = draw_config(rng), threads_for(rng), in_dtype_for(rng, dtype)
    bias = rng.random() < 0.7
    if stack:  # an MLP: 2-4 layers, one feature block size for all
        sizes = [C] + [log_uniform(rng, 1, 300) for _ in range(int(rng.integers(1, 4)))] + [K]
        while 2 * N * sum(a * b for a, b in zip(sizes, sizes[1:])) > 3e7:
            N = max(1, N // 2) if N > 1 else N
            sizes = [max(1, s * 3 // 4) for s in sizes]
        feat = [16, 32, 64][rng.integers(3)]
        blocks = ([1, 8, 16, 32, 64][rng.integers(5)], feat, feat)
        acts = [ACTIVATIONS[rng.integers(4)] for _ in range(2)]
        fused = backend == "cpu" and rng.random() < 0.5   # the fused MLP runs on the CPU
    else:
        sizes, blocks, acts, fused = [C, K], None, [ACTIVATIONS[rng.integers(4)]], False
    weights = [make(rng, dtype, k, c) for c, k in zip(sizes, sizes[1:])]
    biases = [rng.standard_normal(k).astype(np.float32).astype(np.float64) if bias else None
              for k in sizes[1:]]
    x, dy = make(rng, dtype, N, sizes[0]), make(rng, dtype, N, sizes[-1])
    context = describe(N=N, sizes=sizes, bias=bias, activations=acts, blocks=blocks, fused=fused,
                       config=config, threads=threads, backend=backend, dtype=dtype,
                       input=np.dtype(in_dtype).name) + ". " + context
    print(context)
    with omp_threads(threads):
        if stack:
            model = fc.MLP(sizes, activation=acts[0], last_activation=acts[1], bias=bias,
                           dtype=dtype, backend=backend, config=config, blocks=blocks,
                           fused=fused)
            layers = model.layers
        else:
            model = fc.Linear(C, K, bias=bias, activation=acts[0], dtype=dtype,
                              backend=backend, config=config)
            layers = [model]
        for layer, w, b in zip(layers, weights, biases):
            layer.weight = w.astype(np.float32)
            if bias:
                layer.bias = b.astype(np.float32)
            layer.load_weights()
        if rng.random() < 0.3:  # a first pass on other data: the second reuses buffers
            model.forward(make(rng, dtype, N, sizes[0]).astype(in_dtype))
            model.backward(make(rng, dtype, N, sizes[-1]).astype(in_dtype))
        y = model.forward(x.astype(in_dtype))
        dx = model.backward(dy.astype(in_dtype))
    refs = [LinearRef(w, b, layer.activation, dtype,
                      act_from_bf16=fused and dtype == "bf16" and i < len(layers) - 1)
            for i, (layer, w, b) in enumerate(zip(layers, weights, biases))]
    h = Approx(x)
    for ref in refs:
        h = ref.forward(h)
    d = Approx(dy)
    for ref in reversed(refs):
        d = ref.backward(d)
    assert y.dtype == dx.dtype == in_dtype, context
    rounded = np.dtype(in_dtype) == brgemm.bfloat16
    if dtype == "bf16":  # a bf16 layer's y and dx are bf16 values, fused or not, any in_dtype
        for name, r in (("y", y), ("dx", dx)):
            as_bf16 = r.astype(brgemm.bfloat16).astype(r.dtype)
            assert np.array_equal(as_bf16, r, equal_nan=True), f"{name}: not bf16 values. {context}"
    # bf16: y and dx are the rounded activations themselves (h and d above)
    assert_close("y", y, h if dtype == "bf16" else refs[-1].y, rounded and dtype != "bf16",
                 context)
    assert_close("dx", dx, d, False, context)
    for i, (layer, ref) in enumerate(zip(layers, refs)):
        assert_close(f"layer {i} grad_weight", layer.grad_weight, ref.dw, False, context)
        if bias:
            assert_close(f"layer {i} grad_bias", layer.grad_bias, ref.db, False, context)


# CI cases per backend (the SYCL CPU device is slow) and each test's share of a
# BRGEMM_SWEEP=N run (per primitive the cpu shares add up to 1; sycl a little extra)
CI = {"cpu": {"functional": 40, "linear": 30, "mlp": 12},
      "sycl": {"functional": 4, "linear": 4, "mlp": 2},
      "cuda": {"functional": 8, "linear": 8, "mlp": 4}}
SHARE = {"cpu": {"functional": 0.2, "linear": 0.2, "mlp": 0.1},
         "sycl": {"functional": 0.01, "linear": 0.01, "mlp": 0.005},
         "cuda": {"functional": 0.05, "linear": 0.05, "mlp": 0.02}}


@pytest.mark.parametrize("form", ["functional", "linear", "mlp"])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_sweep_fc(backend, dtype, form):
    for _, rng, context in cases(CI[backend][form] // 2, SHARE[backend][form]):
        if form == "functional":
            run_functional(rng, backend, dtype, context)
        else:
            run_layers(rng, backend, dtype, context, stack=form == "mlp")
