"""conv.forward's bias (b=): every forward path adds b [K] to each tile of y
in its plan's epilogue, before the tile is stored (conv_plans.bias_ops,
pointwise_nest's and conv.columns' bias rows), f32 and bf16. Against
PyTorch's F.conv2d with bias in float64, per-element bounds from the data, on
random layers whose sizes and configs steer the route to the path under
test (asserted); the other backends' pass after the call; bad b; and the
layer conv.Conv2d(bias=True): its forward plan's bias, grad_bias, step()."""
import numpy as np
import pytest
import torch

import brgemm
from primitives import conv
from tolerance import bf16_step, round_bf16

F32_PATHS = ("pointwise", "nchw_x", "nchw_w", "nchw_r", "nchw", "blocked", "columns")
BF16_PATHS = ("pairs", "nchw", "blocked", "columns")


def _layer(rng, path, dtype):
    """(x, w, stride, padding, config) of a random layer the route sends down `path`."""
    bc, bk = int(rng.choice([16, 32])), int(rng.choice([16, 32]))
    N = int(rng.integers(1, 4))
    fwd = {"bc": bc, "bk": bk, "nchw_x": path in ("nchw_x", "nchw_w"),
           "nchw_copies_w": path == "nchw_w", "nchw_x_rows": path == "nchw_r",
           "pointwise_pairs": path == "pairs", "call_kb": int(rng.choice([4, 32, 1024]))}
    R = S = 1 if path in ("pointwise", "pairs") else int(rng.choice([3, 5]))
    st, pd = 1, (R - 1) // 2
    if path in ("pointwise", "pairs"):
        H, W = int(rng.integers(14, 24)), 16
        C, K, pd = bc * int(rng.integers(1, 4)), int(rng.integers(1, 70)), 0
    elif path == "columns":  # small images, many output channels (columns' rule)
        H = W = int(rng.integers(R, 6))
        C, K = int(rng.integers(3, 40)), 2 * N * H * W + int(rng.integers(0, 40))
    else:
        H, W = int(rng.integers(R, 12)), int(rng.integers(R, 30))
        C, K = bc * int(rng.integers(1, 3)), bk * int(rng.integers(1, 3))
        if path == "nchw":
            st = int(rng.choice([1, 2]))
        if path == "blocked":  # a ragged channel block: no NCHW stores
            K += 2 * int(rng.integers(0, bk // 2)) + 1  # odd: no block of 16 divides it
        if path in ("nchw_x", "nchw_w", "nchw_r"):  # taps keeping all pixels: pad <= (R - 1) / 2
            pd = int(rng.integers(0, pd + 1))
        while 2 * N * ((H + 2 * pd - R) // st + 1) * ((W + 2 * pd - S) // st + 1) <= K:
            W += 8  # more pixels than columns' rule takes
    ab = brgemm.bfloat16 if dtype == "bf16" else np.float32
    x = rng.standard_normal((N, C, H, W)).astype(ab)
    w = rng.standard_normal((K, C, R, S)).astype(ab)
    return x, w, st, pd, {"fwd": fwd}


def _reference(x, w, b, st, pd):
    """(float64 F.conv2d with b, its sum of |terms| per output)."""
    t = [torch.from_numpy(np.asarray(a, np.float64)) for a in (x, w, b)]
    y = torch.nn.functional.conv2d(*t, stride=st, padding=pd)
    mag = torch.nn.functional.conv2d(*(a.abs() for a in t), stride=st, padding=pd)
    return y.numpy(), mag.numpy()


@pytest.mark.parametrize("dtype,path", [("f32", p) for p in F32_PATHS] +
                         [("bf16", p) for p in BF16_PATHS])
def test_forward_adds_bias(rng, dtype, path):
    for _ in range(3):
        x, w, st, pd, cfg = _layer(rng, path, dtype)
        (N, C, H, W), (K, _, R, S) = x.shape, w.shape
        b = (4 * rng.standard_normal(K)).astype(np.float32)
        print(f"{path} {dtype}: N={N} C={C} K={K} H={H} W={W} R={R} stride={st} pad={pd} {cfg}")
        route = conv._route("fwd", (N, C, K, H, W, R, S), (st, st), (pd, pd), cfg, dtype, "cpu",
                            None, x, w, has_bias=True)
        assert route[1] == path and "b" in route[2].tensors  # the path, its plan reads b
        y = conv.forward(x, w, st, pd, dtype=dtype, config=cfg, b=b)
        want, mag = _reference(x, w, b, st, pd)
        assert y.dtype == x.dtype and y.shape == want.shape
        got = np.asarray(y, np.float64)
        if dtype == "f32":
            assert np.all(np.abs(got - want) <= 1e-5 * mag + 1e-30)
        else:  # f32 sums, then the result rounded once to bf16
            bound = 1e-5 * mag + bf16_step(np.abs(want) + 1e-5 * mag)
            assert np.all(np.abs(got - want) <= bound)
            assert np.array_equal(got, round_bf16(got))
        # without b: the same path's plan without the bias ops, y less b
        y0 = np.asarray(conv.forward(x, w, st, pd, dtype=dtype, config=cfg), np.float64)
        want0 = want - b.reshape(1, -1, 1, 1)
        tol = 1e-5 * mag + (0 if dtype == "f32" else bf16_step(np.abs(want0) + 1e-5 * mag))
        assert np.all(np.abs(y0 - want0) <= tol + 1e-30)


def test_bias_on_other_backends(backend, rng):
    """Where plans replay elsewhere, b is added in a pass after the call."""
    x = rng.standard_normal((2, 16, 6, 7)).astype(np.float32)
    w = rng.standard_normal((24, 16, 3, 3)).astype(np.float32)
    b = rng.standard_normal(24).astype(np.float32)
    y = conv.forward(x, w, 1, 1, backend=backend, b=b)
    want, mag = _reference(x, w, b, 1, 1)
    assert np.all(np.abs(y - want) <= 1e-5 * mag + 1e-30)


def test_bad_bias(rng):
    x = rng.standard_normal((1, 16, 5, 5)).astype(np.float32)
    w = rng.standard_normal((8, 16, 3, 3)).astype(np.float32)
    with pytest.raises(ValueError, match="b: expected shape \\(8,\\)"):
        conv.forward(x, w, b=np.zeros(7, np.float32))
    with pytest.raises(ValueError, match="^b: expected shape \\(8,\\), got \\(8, 1\\)"):
        conv.forward(x, w, b=np.zeros((8, 1), np.float32))
    with pytest.raises(TypeError, match="^b: expected dtype"):
        conv.forward(x, w, b=np.zeros(8, np.int32))
    with pytest.raises(TypeError, match="^b: expected dtype"):  # bf16 only with dtype="bf16"
        conv.forward(x, w, b=np.zeros(8, brgemm.bfloat16))
    with pytest.raises(TypeError, match="^b: expected a numpy.ndarray"):
        conv.forward(x, w, b=[0.0] * 8)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_layer_bias(rng, dtype, backend):
    """conv.Conv2d(bias=True): y with the bias (its forward plan's epilogue),
    grad_bias = dy summed over images and pixels, step() moves the bias; a
    ragged last channel block; against float64 autograd."""
    for _ in range(3):
        R = int(rng.choice([1, 3]))
        N, C, K = int(rng.integers(1, 7)), int(rng.integers(1, 40)), int(rng.integers(1, 70))
        H, W, st, pd = int(rng.integers(R, 12)), int(rng.integers(R, 12)), int(rng.choice([1, 2])), \
            int(rng.integers(0, R))
        print(f"layer {dtype} {backend}: N={N} C={C} K={K} H={H} W={W} R={R} stride={st} pad={pd}")
        layer = conv.Conv2d(C, K, R, st, pd, dtype=dtype, backend=backend, rng=rng, bias=True)
        ab = brgemm.bfloat16 if dtype == "bf16" else np.float32
        x = rng.standard_normal((N, C, H, W)).astype(ab)
        w, b = layer.weight.astype(ab).astype(np.float64), layer.bias.astype(np.float64)
        y = layer.forward(x)
        dy = rng.standard_normal(y.shape).astype(ab)
        dx = layer.backward(dy)
        X, Wt, B = (torch.tensor(np.asarray(a, np.float64), requires_grad=True) for a in (x, w, b))
        Y = torch.nn.functional.conv2d(X, Wt, B, stride=st, padding=pd)
        Y.backward(torch.tensor(np.asarray(dy, np.float64)))
        ady = torch.tensor(np.abs(np.asarray(dy, np.float64)))  # sums of |terms| per element
        mags = (torch.nn.functional.conv2d(X.abs(), Wt.abs(), B.abs(), stride=st, padding=pd),
                torch.nn.grad.conv2d_input(X.shape, Wt.abs(), ady, stride=st, padding=pd),
                torch.nn.grad.conv2d_weight(X.abs(), Wt.shape, ady, stride=st, padding=pd),
                ady.sum((0, 2, 3)))
        for name, got, want, mag in zip(("y", "dx", "dw", "db"),
                                        (y, dx, layer.grad_weight, layer.grad_bias),
                                        (Y, X.grad, Wt.grad, B.grad), mags):
            want, mag = want.detach().numpy(), mag.detach().numpy()
            got = np.asarray(got, np.float64)
            bound = 1e-5 * mag + 1e-30
            if dtype == "bf16":  # bf16 operands exact; y and dx come back rounded once
                bound = bound + (bf16_step(np.abs(want) + bound) if name in ("y", "dx") else 0)
            assert got.shape == want.shape and np.all(np.abs(got - want) <= bound), name
        before = layer.bias.copy()
        layer.step(0.5)
        np.testing.assert_array_equal(layer.bias, before - np.float32(0.5) * layer.grad_bias)


def test_layer_bad_bias(rng):
    layer = conv.Conv2d(8, 12, 3, padding=1, bias=True, rng=rng)
    assert conv.Conv2d(8, 12, 3, rng=rng).bias is None  # off by default
    layer.bias = np.zeros(11, np.float32)
    with pytest.raises(ValueError, match="^bias: expected shape \\(12,\\)"):
        layer.forward(rng.standard_normal((1, 8, 5, 5)).astype(np.float32))
    with pytest.raises(TypeError, match="^bias: expected"):
        conv.Conv2d(8, 12, 3, bias="yes")
