"""need_dx=False: conv.backward, fc.backward and lstm.backward leave dx out (a
network's first layer, whose input wants no gradient) and still return the
weight gradients; need_dw=False: dw left out (frozen weights; the LSTM's
db too), dx (and fc's db) still returned. Against float64 PyTorch with per-element
bounds, on random layers that take each of conv's update routes;
primitives.nn asks for them exactly where autograd wants no gradient; bad
values refused."""
import copy

import numpy as np
import pytest
import torch

import brgemm
from primitives import conv, fc, lstm, lstm_layer
from primitives import nn as pnn
from test_conv import magnitude, reference
from test_fc import check, reference as fc_reference, scales
from test_lstm import check as lstm_check, make as lstm_case, reference as lstm_reference


def _conv_case(rng, kind):
    """A random layer whose conv.backward update takes route `kind`."""
    N = int(rng.integers(1, 4))
    if kind == "pointwise":  # 1x1 on 14 x 14 and more: x and dy read in place
        C, K, H, R, st, pd = 16 * int(rng.integers(1, 4)), 16 * int(rng.integers(1, 4)), 16, 1, 1, 0
    elif kind == "columns":  # small images, many output channels: w read in place
        C, K, H, R, st, pd = 16 * int(rng.integers(1, 4)), 512, 5, 3, 1, 1
    else:  # 3x3 (or a strided 5x5) on mid-sized images
        C, K = int(rng.integers(1, 40)), int(rng.integers(1, 40))
        H, R = int(rng.integers(8, 20)), int(rng.choice([3, 5]))
        st, pd = int(rng.choice([1, 2])), int(rng.integers(0, R // 2 + 1))
    x = rng.standard_normal((N, C, H, H)).astype(np.float32)
    w = rng.standard_normal((K, C, R, R)).astype(np.float32)
    P = (H + 2 * pd - R) // st + 1
    dy = rng.standard_normal((N, K, P, P)).astype(np.float32)
    return x, w, dy, st, pd


@pytest.mark.parametrize("kind", ["pointwise", "columns", "other"])
def test_conv_backward_without_dx(rng, kind):
    for _ in range(3):
        x, w, dy, st, pd = _conv_case(rng, kind)
        print(f"x {x.shape} w {w.shape} stride {st} padding {pd}")
        dx, dw = conv.backward(dy, x, w, st, pd, need_dx=False)
        assert dx is None
        want, mag = reference(x, w, dy, st, pd)[2], magnitude(x, w, dy, st, pd)[2]
        assert dw.shape == w.shape and np.all(np.abs(dw - want) <= 1e-5 * mag + 1e-30)
        dx_all, dw_all = conv.backward(dy, x, w, st, pd)  # the same update either way
        np.testing.assert_array_equal(dw, dw_all)
        dx, none = conv.backward(dy, x, w, st, pd, need_dw=False)
        assert none is None
        want, mag = reference(x, w, dy, st, pd)[1], magnitude(x, w, dy, st, pd)[1]
        assert dx.shape == x.shape and np.all(np.abs(dx - want) <= 1e-5 * mag + 1e-30)
        assert conv.backward(dy, x, w, st, pd, need_dx=False, need_dw=False) == (None, None)


def test_conv_bf16_without_dx_or_dw(rng):
    """bf16: each flag leaves its gradient out and the other exactly as the
    whole call computes it (that one is checked against PyTorch in test_conv)."""
    for kind in ("pointwise", "other"):
        x, w, dy, st, pd = (a.astype(brgemm.bfloat16) if isinstance(a, np.ndarray) else a
                            for a in _conv_case(rng, kind))
        print(f"x {x.shape} w {w.shape} stride {st} padding {pd}")
        dx, dw = conv.backward(dy, x, w, st, pd, dtype="bf16")
        no_dx, dw2 = conv.backward(dy, x, w, st, pd, dtype="bf16", need_dx=False)
        dx2, no_dw = conv.backward(dy, x, w, st, pd, dtype="bf16", need_dw=False)
        assert no_dx is None and no_dw is None and dx2.dtype == dw2.dtype == brgemm.bfloat16
        np.testing.assert_array_equal(dx2.astype(np.float32), dx.astype(np.float32))
        np.testing.assert_array_equal(dw2.astype(np.float32), dw.astype(np.float32))


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_fc_backward_without_dx(rng, dtype):
    N, C, K = (int(rng.integers(1, 200)) for _ in range(3))
    print(f"N={N} C={C} K={K} {dtype}")
    x, w, dy = (rng.standard_normal(s).astype(np.float32) for s in ((N, C), (K, C), (N, K)))
    if dtype == "bf16":
        x, w, dy = (a.astype(brgemm.bfloat16) for a in (x, w, dy))
    dx, dw, db = fc.backward(dy, x, w, dtype=dtype, need_dx=False)
    assert dx is None and dw.dtype == x.dtype and db.dtype == x.dtype
    _, want_dx, want_dw, _ = fc_reference(x, w, np.zeros(K), dy)
    s = scales(x, w, dy)
    check("dw", dw, want_dw, dtype, s["dw"])
    check("db", db, np.asarray(dy, np.float64).sum(0), dtype, s["db"])
    dx, none, db = fc.backward(dy, x, w, dtype=dtype, need_dw=False)
    assert none is None and dx.dtype == x.dtype and db.dtype == x.dtype
    check("dx", dx, want_dx, dtype, s["dx"])
    check("db", db, np.asarray(dy, np.float64).sum(0), dtype, s["db"])


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_lstm_backward_without_dx(rng, dtype):
    T, N, C, K = (int(rng.integers(1, 5)), int(rng.integers(1, 40)), int(rng.integers(1, 70)),
                  int(rng.integers(1, 50)))
    print(f"T={T} N={N} C={C} K={K} {dtype}")
    a, d = lstm_case(rng, T, N, C, K, np.float32 if dtype == "f32" else brgemm.bfloat16)
    grads = lstm.backward(**d, **a, dtype=dtype, need_dx=False)
    assert grads[0] is None
    want = lstm_reference(a, d)[1]
    rel = 1e-5 if dtype == "f32" else 1e-2
    lstm_check(["dh0", "dc0", "dw_ih", "dw_hh", "db"], grads[1:], want[1:], rel)
    grads = lstm.backward(**d, **a, dtype=dtype, need_dw=False)
    assert grads[3:] == (None, None, None)
    lstm_check(["dx", "dh0", "dc0"], grads[:3], want[:3], rel)


def test_bad_need_dx(rng):
    x, w, dy, st, pd = _conv_case(rng, "other")
    for bad in (1, "no", None):
        for name in ("need_dx", "need_dw"):
            with pytest.raises(TypeError, match=f"^{name}"):
                conv.backward(dy, x, w, st, pd, **{name: bad})
            with pytest.raises(TypeError, match=f"^{name}"):
                fc.backward(dy.reshape(-1, 1), x.reshape(-1, 1), w.reshape(-1, 1), **{name: bad})
        a, d = lstm_case(rng, 2, 3, 4, 5, np.float32)
        for name in ("need_dx", "need_dw"):
            with pytest.raises(TypeError, match=f"^{name}"):
                lstm.backward(**d, **a, **{name: bad})


class _Recurrent(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm, self.out = torch.nn.LSTM(5, 6), torch.nn.Linear(6, 3)

    def forward(self, x):
        return self.out(self.lstm(x)[0])


def test_nn_first_layer_asks_for_no_dx(rng, monkeypatch):
    """A model's first Conv2d, Linear or LSTM, whose input wants no gradient:
    its backward asks for none, the later layers' do, and every parameter's
    gradient matches torch.nn's."""
    asked = []
    for label, owner in (("conv", conv), ("fc", fc), ("lstm", lstm_layer.LSTM)):
        real = owner.backward
        monkeypatch.setattr(owner, "backward", lambda *a, _real=real, _label=label, **k: (
            asked.append((_label, k.get("need_dx", True))), _real(*a, **k))[1])
    torch.manual_seed(int(rng.integers(1 << 30)))
    cases = [(torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                                  torch.nn.Conv2d(8, 4, 3), torch.nn.Flatten(),
                                  torch.nn.Linear(4 * 6 * 6, 5)), (4, 3, 8, 8), "conv"),
             (torch.nn.Sequential(torch.nn.Linear(12, 7), torch.nn.Tanh(),
                                  torch.nn.Linear(7, 3)), (6, 12), "fc"),
             (_Recurrent(), (4, 2, 5), "lstm")]
    for theirs, shape, first in cases:
        ours = pnn.convert(copy.deepcopy(theirs))
        x = torch.randn(shape)
        asked.clear()
        for model in (ours, theirs):
            model.zero_grad()
            model(x).square().sum().backward()
        assert asked[-1] == (first, False) and all(need for _, need in asked[:-1]), asked
        for (n, a), b in zip(ours.named_parameters(), theirs.parameters()):
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5, msg=n)


def test_nn_frozen_layer_asks_for_no_dw(rng, monkeypatch):
    """A frozen Conv2d and a frozen Linear in the middle of a model (weights
    that want no gradient, the layers before them trained): their backward
    asks for no dw but for dx, and every gradient matches torch.nn's (the
    frozen weights' None in both)."""
    asked = []
    for label, owner in (("conv", conv), ("fc", fc)):
        real = owner.backward
        monkeypatch.setattr(owner, "backward", lambda *a, _real=real, _label=label, **k: (
            asked.append((_label, k.get("need_dx", True), k.get("need_dw", True))),
            _real(*a, **k))[1])
    torch.manual_seed(int(rng.integers(1 << 30)))
    theirs = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                                 torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.Flatten(),
                                 torch.nn.Linear(8 * 6 * 6, 7), torch.nn.Tanh(),
                                 torch.nn.Linear(7, 3))
    for frozen in (theirs[2], theirs[4]):
        frozen.weight.requires_grad_(False)
    ours = pnn.convert(copy.deepcopy(theirs))
    x = torch.randn(4, 3, 6, 6)
    for model in (ours, theirs):
        model.zero_grad()
        model(x).square().sum().backward()
    # backward runs last layer first: Linear, frozen Linear, frozen Conv2d, first Conv2d
    assert asked == [("fc", True, True), ("fc", True, False), ("conv", True, False),
                     ("conv", False, True)], asked
    for (n, a), b in zip(ours.named_parameters(), theirs.parameters()):
        if b.grad is None:
            assert a.grad is None, n
        else:
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5, msg=n)


def test_nn_frozen_lstm_asks_for_no_dw(rng, monkeypatch):
    """A frozen LSTM over a trained input (its weights and biases want no
    gradient, its input does): its backward asks for dx and no weight
    gradients, and the gradients match torch.nn's (the LSTM's None in both)."""
    asked = []
    real = lstm_layer.LSTM.backward
    monkeypatch.setattr(lstm_layer.LSTM, "backward", lambda *a, **k: (
        asked.append((k.get("need_dx", True), k.get("need_dw", True))), real(*a, **k))[1])
    torch.manual_seed(int(rng.integers(1 << 30)))
    theirs = _Recurrent()
    theirs.lstm.requires_grad_(False)
    ours = pnn.convert(copy.deepcopy(theirs))
    x = torch.randn(4, 2, 5)
    grads = []
    for model in (ours, theirs):
        xg = x.clone().requires_grad_()
        model(xg).square().sum().backward()
        grads.append(xg.grad)
    assert asked == [(True, False)], asked
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-5)
    for (n, a), b in zip(ours.named_parameters(), theirs.parameters()):
        if b.grad is None:
            assert a.grad is None, n
        else:
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5, msg=n)
