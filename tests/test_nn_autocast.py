"""primitives.nn's modules under torch.autocast on the CPU, as torch.nn's: with
bfloat16 our primitives compute in bf16 on the cast arguments and return bf16
(gradients reach float32 parameters in float32), checked against float64 on
the bf16-rounded operands; with another autocast dtype (float16) torch's own
functions run, exactly as torch.nn's modules would. Random shapes; outside
autocast nothing changes (test_nn.py)."""
import pytest
import torch
from torch import nn

from nn_support import assert_close, bilinear_check, f64, gen, rand  # noqa: F401
# (gen: a fixture, found by name)
from primitives import nn as pnn
from test_nn import lstm_reference

torch.set_num_threads(1)

BF16_STEP = 2.0 ** -7  # one bf16 rounding step, relative to the value's leading bit


def rounded(t):
    """t's values rounded to bf16 (what autocast hands the op), as float32."""
    return t.detach().bfloat16().float()


def linear_or_conv(rng, gen, kind):
    """(our module, its torch twin with the same parameters, x, the float64
    function of (x, w, b) that the module computes)."""
    if kind == "linear":
        C, K, N = (int(v) for v in rng.integers(1, 40, 3))
        ours, theirs = pnn.Linear(C, K), nn.Linear(C, K)
        x = rand(gen, N, C)
        fn = nn.functional.linear
    else:
        N, C, K = (int(v) for v in rng.integers(1, 9, 3))
        R, stride, pad = int(rng.integers(1, 4)), int(rng.integers(1, 3)), int(rng.integers(0, 2))
        H, W = (int(v) for v in rng.integers(R, 12, 2))
        ours, theirs = (pnn.Conv2d(C, K, R, stride=stride, padding=pad),
                        nn.Conv2d(C, K, R, stride=stride, padding=pad))
        x = rand(gen, N, C, H, W)
        fn = lambda x_, w_, b_: nn.functional.conv2d(x_, w_, b_, stride=stride,  # noqa: E731
                                                     padding=pad)
        print(f"N={N} C={C} K={K} H={H} W={W} R={R} stride={stride} pad={pad}")
    theirs.load_state_dict(ours.state_dict())
    return ours, theirs, x, fn


@pytest.mark.parametrize("kind", ["linear", "conv"])
def test_linear_and_conv_compute_in_bf16_under_autocast(rng, gen, kind):
    ours, theirs, x, fn = linear_or_conv(rng, gen, kind)
    x.requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = ours(x)
        want_dtype = theirs(x).dtype
    assert y.dtype == want_dtype == torch.bfloat16
    dy = rand(gen, *y.shape, dtype=torch.bfloat16)
    y.backward(dy)
    assert x.grad.dtype == ours.weight.grad.dtype == ours.bias.grad.dtype == torch.float32
    # each result rounded to bf16 once, from f32 sums of the rounded operands
    bilinear_check(fn, [rounded(x), rounded(ours.weight), rounded(ours.bias)],
                   (y, x.grad, ours.weight.grad, ours.bias.grad), dy, BF16_STEP,
                   ["dx", "dweight", "dbias"])


@pytest.mark.parametrize("kind", ["linear", "conv", "lstm"])
def test_other_autocast_dtypes_run_torchs_own(rng, gen, kind):
    """float16 autocast: our module answers exactly as torch.nn's (which is
    what runs), errors included (torch's CPU LSTM has no float16 kernel)."""
    if kind == "lstm":
        C, K = (int(v) for v in rng.integers(1, 20, 2))
        ours, theirs, x = pnn.LSTM(C, K), nn.LSTM(C, K), rand(gen, 3, 2, C)
        theirs.load_state_dict(ours.state_dict())
    else:
        ours, theirs, x, _ = linear_or_conv(rng, gen, kind)
    results = []
    for m in (theirs, ours):
        try:
            with torch.autocast("cpu", dtype=torch.float16):
                out = m(x)
            results.append(out[0] if kind == "lstm" else out)
        except RuntimeError as e:
            results.append(type(e))
    if isinstance(results[0], torch.Tensor):
        assert results[0].dtype == results[1].dtype == torch.float16
        assert torch.equal(results[0], results[1])
    else:
        assert results[0] is results[1]


def test_lstm_computes_in_bf16_under_autocast(rng, gen):
    T, N, C, K = (int(v) for v in rng.integers(1, 30, 4))
    print(f"T={T} N={N} C={C} K={K}")
    m = pnn.LSTM(C, K)
    x = rand(gen, T, N, C).requires_grad_()
    hx = tuple(rand(gen, 1, N, K).requires_grad_() for _ in range(2))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y, (h, c) = m(x, hx)
        want = nn.LSTM(C, K)(x, hx)
    assert y.dtype == h.dtype == c.dtype == want[0].dtype == torch.bfloat16
    w = [rand(gen, *t.shape, dtype=torch.bfloat16) for t in (y, h, c)]
    sum((o * wi).sum() for o, wi in zip((y, h, c), w)).backward()
    assert all(p.grad.dtype == torch.float32 for p in m.parameters())
    # the reference on the rounded operands, in float64
    ref = pnn.LSTM(C, K)
    with torch.no_grad():
        for p, q in zip(ref.parameters(), m.parameters()):
            p.copy_(rounded(q))
    outs, grads = lstm_reference(ref, rounded(x).requires_grad_(),
                                 tuple(rounded(s).requires_grad_() for s in hx), w)
    ours = [x.grad, hx[0].grad, hx[1].grad] + [p.grad for p in m.parameters()]
    names = ["y", "h_n", "c_n", "dx", "dh0", "dc0"] + [n for n, _ in m.named_parameters()]
    # operands rounded to 8 bits every step, as test_nn's bf16 LSTM
    for name, got, r in zip(names, [y, h, c] + ours, list(outs) + grads):
        assert_close(name, got, r, 1e-2 * (r.abs() + r.abs().max() + 1))


@pytest.mark.parametrize("fused", [False, True])
def test_mlp_computes_in_bf16_under_autocast(rng, gen, fused):
    sizes = [int(v) for v in rng.integers(1, 40, 3)]
    print(f"sizes={sizes} fused={fused}")
    m = pnn.MLP(sizes, activation="relu", fused=fused)
    x = rand(gen, int(rng.integers(1, 30)), sizes[0]).requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = m(x)
    assert y.dtype == torch.bfloat16
    dy = rand(gen, *y.shape, dtype=torch.bfloat16)
    y.backward(dy)
    assert x.grad.dtype == torch.float32
    assert all(p.grad.dtype == torch.float32 for p in m.parameters())
    # float64 on the rounded operands: two layers, each rounded to bf16 (the
    # hidden layer's output too), so a few steps of the largest terms
    X = f64(rounded(x), True)
    params = [f64(rounded(p), True) for p in m.parameters()]
    r = nn.functional.linear(torch.relu(nn.functional.linear(X, *params[:2])), *params[2:])
    r.backward(f64(dy))
    for name, got, want in zip(["y", "dx"] + [n for n, _ in m.named_parameters()],
                               [y, x.grad] + [p.grad for p in m.parameters()],
                               [r, X.grad] + [p.grad for p in params]):
        assert_close(name, got, want, 4 * BF16_STEP * (want.abs() + want.abs().max() + 1))
