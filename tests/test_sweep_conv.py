"""Randomized sweep: convolution forward (y), backward-data (dx) and weight
update (dw) against PyTorch in float64, per-element tolerances from the data
(tests/tolerance.py), functional forms and the Conv2d layer, both dtypes,
every backend. Shapes as real networks have them and as they break code: odd
sizes from 1 up, per-axis strides 1-4 and paddings 0-3, taps 1x1 to 7x7 with
1xS and Rx1, layer-sized channels (32-512) on 7, 14 and 28 maps, batch 1-8,
N*P below and above the thread count; random block sizes, loop orders and
call sizes; some cases at 1, 2 or 3 threads. Seeds: tests/sweep_support.py."""
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import brgemm
from primitives import conv
from sweep_support import cases, log_uniform, omp_threads, threads_for
from tolerance import assert_close, linear, round_bf16

THREADS = os.cpu_count() or 1
TAPS = [(1, 1), (3, 3), (1, 3), (3, 1), (1, 7), (7, 1), (5, 5), (7, 7), (2, 2), (1, 5)]
CHANNELS = (32, 48, 64, 96, 128, 192, 256, 384, 512)
SPECS = {"fwd": ("NKpq", "KNpq", "NKPq", "nKPq", "Knpq"), "bwd": ("NChu", "CNhu", "NCHu", "nCHu"),
         "upd": ("KCRSJ", "CKRSJ")}


def out_size(H, R, s, p):
    return (H + 2 * p - R) // s + 1


def draw_shape(rng):
    """N, C, K, H, W, R, S, stride, padding of one case."""
    kind = rng.choice(["odd", "layer", "few"], p=[0.45, 0.35, 0.2])
    N = log_uniform(rng, 1, 8)
    stride = [int(v) for v in rng.integers(1, 5, 2)]
    padding = [int(v) for v in rng.integers(0, 4, 2)]
    if kind == "odd":
        C, K = log_uniform(rng, 1, 48), log_uniform(rng, 1, 48)
        H, W = log_uniform(rng, 1, 21), log_uniform(rng, 1, 21)
        R, S = (int(v) for v in rng.integers(1, 8, 2))
    elif kind == "layer":
        C, K = (int(rng.choice(CHANNELS)) if rng.random() < 0.7 else int(rng.integers(32, 513))
                for _ in range(2))
        H = W = int(rng.choice([7, 14, 28]))
        R, S = TAPS[rng.integers(len(TAPS))]
        if rng.random() < 0.8:
            stride = [int(rng.choice([1, 1, 2]))] * 2
        if rng.random() < 0.7:
            padding = [(R - 1) // 2, (S - 1) // 2]
    else:  # one output row in all: N * P below any thread count
        N, C, K = 1, log_uniform(rng, 1, 300), log_uniform(rng, 1, 300)
        R, S = (int(v) for v in rng.integers(1, 8, 2))
        H = R - 2 * padding[0] + int(rng.integers(0, stride[0]))
        if H < 1:
            padding[0], H = 0, R + int(rng.integers(0, stride[0]))
        W = log_uniform(rng, 1, 21)
    R, S = min(R, H + 2 * padding[0]), min(S, W + 2 * padding[1])
    # keep a case's work bounded: batch first, then channels, then the map
    cap = 2e7
    while True:
        P, Q = out_size(H, R, stride[0], padding[0]), out_size(W, S, stride[1], padding[1])
        if 2 * N * C * K * P * Q * R * S <= cap:
            return N, C, K, H, W, R, S, tuple(stride), tuple(padding)
        if N > 1:
            N = max(1, N // 2)
        elif max(C, K) > 32:
            C, K = (max(v // 2, 1) if v == max(C, K) else v for v in (C, K))
        else:
            H, W = max(1, H // 2), max(1, W // 2)
            R, S = min(R, H + 2 * padding[0]), min(S, W + 2 * padding[1])


def draw_config(rng):
    """The default config half the time, else random blocks, orders and call sizes."""
    if rng.random() < 0.5:
        return None
    pick = lambda *v: v[rng.integers(len(v))]  # noqa: E731
    return {"fwd": {"spec": pick(*SPECS["fwd"]), "bc": pick(8, 16, 32, 64),
                    "bk": pick(16, 32, 64), "bq": log_uniform(rng, 1, 32),
                    "call_kb": pick(1, 8, 32, 128),
                    "pointwise_rows": pick(False, True),  # 1x1: x in place or on line rows
                    "nchw_copies_w": pick(False, True),  # x in place: w's copy or w as given
                    "nchw_x": pick(False, True),  # x as the transposed A, or
                    "nchw_x_rows": pick(False, True),  # its rows copied by the plan, or blocked
                    "pointwise": pick(False, True)},  # 1x1: the pointwise plans or the others
            "bwd": {"spec": pick(*SPECS["bwd"]), "call_kb": pick(1, 8, 32, 128),
                    "columns_copies_w": pick(False, True),  # conv.columns' backward-data:
                    "columns_copy_block": pick(16, 64, 128),  # w in place or its tiles copied
                    "pointwise": pick(False, True)},  # 1x1 backward-data: likewise
            "upd": {"spec": pick(*SPECS["upd"]), "tiles": pick(1, 4, 16, 64),
                    "call_kb": pick(1, 8, 64, 256)}}


def reference(x, w, dy, stride, padding, b=None):
    """y, dx, dw as Approx (value, bound) from float64 convolutions of the
    values and of their magnitudes; y with the bias b if given."""
    X, Wt, DY = (torch.from_numpy(np.asarray(a, np.float64)) for a in (x, w, dy))
    B = None if b is None else torch.from_numpy(np.asarray(b, np.float64))
    aX, aW, aDY = X.abs(), Wt.abs(), DY.abs()
    kw = dict(stride=stride, padding=padding)
    y = linear(F.conv2d(X, Wt, B, **kw).numpy(),
               F.conv2d(aX, aW, None if B is None else B.abs(), **kw).numpy())
    dx = linear(torch.nn.grad.conv2d_input(X.shape, Wt, DY, **kw).numpy(),
                torch.nn.grad.conv2d_input(X.shape, aW, aDY, **kw).numpy())
    dw = linear(torch.nn.grad.conv2d_weight(X, Wt.shape, DY, **kw).numpy(),
                torch.nn.grad.conv2d_weight(aX, Wt.shape, aDY, **kw).numpy())
    return y, dx, dw


def run_case(rng, backend, dtype, form, context):
    N, C, K, H, W, R, S, stride, padding = shape = draw_shape(rng)
    config, threads = draw_config(rng), threads_for(rng)
    # bf16: arrays in bf16 (results come back rounded) or in f32 (rounded inside)
    in_dtype = brgemm.bfloat16 if dtype == "bf16" and rng.random() < 0.7 else np.float32
    exact = round_bf16 if dtype == "bf16" else (lambda a: np.asarray(a, np.float64))
    P, Q = out_size(H, R, stride[0], padding[0]), out_size(W, S, stride[1], padding[1])
    make = lambda *s: exact(rng.standard_normal(s).astype(np.float32))  # noqa: E731
    x, w, dy = make(N, C, H, W), make(K, C, R, S), make(N, K, P, Q)
    b = make(K) if rng.random() < 0.5 else None  # conv.forward's b=, the layer's bias
    context = (f"shape N,C,K,H,W,R,S={shape[:7]} stride={stride} padding={padding} "
               f"config={config} threads={threads} {form} {backend} {dtype} "
               f"in={np.dtype(in_dtype).name} bias={b is not None}. {context}")
    print(context)
    with omp_threads(threads):
        if form == "functional":
            y = conv.forward(x.astype(in_dtype), w.astype(in_dtype), stride, padding,
                             dtype=dtype, backend=backend, config=config,
                             b=None if b is None else b.astype(in_dtype))
            dx, dw = conv.backward(dy.astype(in_dtype), x.astype(in_dtype), w.astype(in_dtype),
                                   stride, padding, dtype=dtype, backend=backend, config=config)
        else:
            layer = conv.Conv2d(C, K, (R, S), stride, padding, dtype=dtype, backend=backend,
                                config=config, bias=b is not None)
            layer.weight = w.astype(np.float32)
            layer.bias = None if b is None else b.astype(np.float32)
            if rng.random() < 0.3:  # a first pass on other data: the second reuses buffers
                layer.forward(make(N, C, H, W).astype(in_dtype))
                layer.backward(make(N, K, P, Q).astype(in_dtype))
            y = layer.forward(x.astype(in_dtype))
            dx = layer.backward(dy.astype(in_dtype))
            dw = layer.grad_weight
    rounded = np.dtype(in_dtype) == brgemm.bfloat16
    assert y.dtype == dx.dtype == in_dtype, context
    want = reference(x, w, dy, stride, padding, b)
    for name, got, ref in zip(("y", "dx", "dw"), (y, dx, dw), want):
        assert_close(name, got, ref, rounded and (name != "dw" or form == "functional"), context)


# CI cases per backend (the SYCL CPU device is slow) and each test's share of a
# BRGEMM_SWEEP=N run (per primitive: the shares of one backend add up to 1)
CI = {"cpu": 60, "sycl": 6, "cuda": 8}
SHARE = {"cpu": 0.25, "sycl": 0.02, "cuda": 0.05}


@pytest.mark.parametrize("form", ["functional", "layer"])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_sweep_conv(backend, dtype, form):
    for _, rng, context in cases(CI[backend] // 2, SHARE[backend]):
        run_case(rng, backend, dtype, form, context)
