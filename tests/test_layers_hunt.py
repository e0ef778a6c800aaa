"""The layer classes (fc.Linear, fc.MLP, conv.Conv2d, lstm.LSTM) driven as a
training loop drives them: weights set by hand, batch sizes that change
between calls, gradients read late, copies of a layer. References in float64."""
import copy
import pickle
import types

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from primitives import conv, fc, lstm
from test_lstm import check as lstm_check
from test_lstm import make as lstm_make
from test_lstm import reference as lstm_reference
from tolerance import Approx, assert_close, matmul

f32 = np.float32


def _t(a, grad=False):
    return torch.tensor(np.asarray(a, np.float64), requires_grad=grad)


def _close(name, got, ref, mag):
    """|got - ref| within f32 accumulation's bound (1e-5 of sum |a||b|) per element."""
    assert_close(name, got, Approx(ref, 1e-5 * (np.asarray(mag, np.float64) + 1e-30)))


def _linear_refs(x, w, b, act, dy):
    """y, dx, dW, db of act(x W^T + b) in float64, and each one's magnitude."""
    X, W = _t(x, True), _t(w, True)
    B = None if b is None else _t(b, True)
    z = F.linear(X, W, B)
    y = z if act is None else getattr(torch, act)(z)
    y.backward(_t(dy))
    ax, aw = np.abs(np.asarray(x, np.float64)), np.abs(np.asarray(w, np.float64))
    ady = np.abs(np.asarray(dy, np.float64))
    mag_y = ax @ aw.T + (0 if b is None else np.abs(np.asarray(b, np.float64)))
    return ((y.detach().numpy(), mag_y), (X.grad.numpy(), ady @ aw),
            (W.grad.numpy(), ady.T @ ax), (None if B is None else B.grad.numpy(), ady.sum(0)))


def _mlp_ref(net, x):
    """The MLP's forward on x in float64 with its f32 error bound (tolerance.Approx)."""
    h = Approx(x)
    for layer in net.layers:
        h = matmul(h, layer.weight.astype(np.float64).T)
        if layer.bias is not None:
            h = h + layer.bias
        if layer.activation not in (None, "none"):
            h = getattr(h, layer.activation)()
    return h


# ---------------------------------------------------------------- weights set by hand

@pytest.mark.parametrize("kind", ["linear", "mlp", "mlp_fused"])
def test_fc_weights_assigned_after_a_forward_are_used(rng, kind):
    """A weight (and bias) given as a new array after the layer has run: the
    next forward computes with it, as the fused MLP does, not with the blocked
    copy of the old one."""
    C, K, W, N = (int(v) for v in rng.integers(1, 40, 4))
    if kind == "linear":
        net = types.SimpleNamespace(layers=[fc.Linear(C, K, activation="relu", rng=rng)])
        call = net.layers[0].forward
    else:
        net = fc.MLP([C, W, K], activation="tanh", fused=kind == "mlp_fused", rng=rng)
        call = net.forward
    x = rng.standard_normal((N, C)).astype(f32)
    call(x)
    for layer in net.layers:
        layer.weight = rng.standard_normal(layer.weight.shape).astype(f32)
        layer.bias = rng.standard_normal(layer.bias.shape).astype(f32)
    assert_close("y", call(x), _mlp_ref(net, x))


def test_conv_weight_assigned_after_a_forward_is_used(rng):
    C, K, N = (int(v) for v in rng.integers(1, 12, 3))
    H, W = (int(v) for v in rng.integers(3, 9, 2))
    layer = conv.Conv2d(C, K, 3, padding=1, bias=True, rng=rng)
    x = rng.standard_normal((N, C, H, W)).astype(f32)
    layer.forward(x)
    layer.weight = rng.standard_normal(layer.weight.shape).astype(f32)
    layer.bias = rng.standard_normal(K).astype(f32)
    y = layer.forward(x)
    ref = F.conv2d(_t(x), _t(layer.weight), _t(layer.bias), 1, 1).numpy()
    mag = F.conv2d(_t(np.abs(x)), _t(np.abs(layer.weight)), _t(np.abs(layer.bias)), 1, 1).numpy()
    _close("y", y, ref, mag)


def test_lstm_weights_assigned_after_a_forward_are_used(rng):
    T, N, C, K = (int(v) for v in rng.integers(1, 9, 4))
    a, d = lstm_make(rng, T, N, C, K, f32)
    layer = lstm.LSTM(C, K, rng=rng)
    layer.forward(a["x"], a["h0"], a["c0"])
    layer.w_ih, layer.w_hh, layer.b = a["w_ih"], a["w_hh"], a["b"]
    y, (hT, cT) = layer.forward(a["x"], a["h0"], a["c0"])
    fwd, _ = lstm_reference(a, d)
    lstm_check(["y", "hT", "cT"], (y, hT, cT), fwd, 1e-5)


# ---------------------------------------------------------------- gradients read late

def test_linear_gradients_survive_a_forward_of_another_batch(rng):
    """forward, backward, then an evaluation forward of another batch size
    before step(): the gradients are the backward's, as Conv2d's are."""
    C, K, N, M = (int(v) for v in rng.integers(1, 70, 4))
    layer = fc.Linear(C, K, activation="relu", rng=rng)
    x = rng.standard_normal((N, C)).astype(f32)
    dy = rng.standard_normal((N, K)).astype(f32)
    w0, b0 = layer.weight.copy(), layer.bias.copy()
    layer.forward(x)
    layer.backward(dy)
    layer.forward(rng.standard_normal((M + N, C)).astype(f32))  # another batch size
    _, _, (dw, mag_w), (db, mag_b) = _linear_refs(x, w0, b0, "relu", dy)
    _close("grad_weight", layer.grad_weight, dw, mag_w)
    _close("grad_bias", layer.grad_bias, db, mag_b)
    layer.step(0.5)
    _close("weight", layer.weight, w0 - 0.5 * dw, np.abs(w0) + 0.5 * mag_w)


def test_lstm_gradients_survive_a_forward_of_another_shape(rng):
    """forward, backward, then a forward of another sequence length and batch:
    grad_w_ih, grad_w_hh and grad_b are still the backward's (no error from
    the new geometry read over the old tiles)."""
    T, N, C, K = (int(v) for v in rng.integers(1, 9, 4))
    a, d = lstm_make(rng, T, N, C, K, f32)
    layer = lstm.LSTM(C, K)
    layer.w_ih, layer.w_hh, layer.b = a["w_ih"], a["w_hh"], a["b"]
    layer.forward(a["x"], a["h0"], a["c0"])
    layer.backward(**d)
    T2, N2 = T + int(rng.integers(1, 5)), N + int(rng.integers(1, 40))
    layer.forward(rng.standard_normal((T2, N2, C)).astype(f32))
    _, bwd = lstm_reference(a, d)
    lstm_check(["dw_ih", "dw_hh", "db"], (layer.grad_w_ih, layer.grad_w_hh, layer.grad_b),
               bwd[3:], 1e-5)


def test_linear_grad_bias_before_backward_is_named(rng):
    layer = fc.Linear(*(int(v) for v in rng.integers(1, 20, 2)))
    with pytest.raises(ValueError, match="^grad_bias:"):
        layer.grad_bias
    assert fc.Linear(3, 2, bias=False).grad_bias is None


@pytest.mark.parametrize("make", [lambda: fc.Linear(3, 2, bias="yes"),
                                  lambda: fc.MLP([3, 2], bias=None),
                                  lambda: lstm.LSTM(3, 2, init="no")])
def test_flags_of_the_layers_are_checked(make):
    """bias= and init= take True or False: anything else is a TypeError
    naming it, not a truth value guessed from it."""
    with pytest.raises(TypeError, match="^(bias|init):"):
        make()


# ---------------------------------------------------------------- copies of a layer

def _copy_cases(rng, kind):
    """(layer, x, dy, forward, backward, gradients, weights) for one kind of layer."""
    C, K, N = (int(v) for v in rng.integers(1, 24, 3))
    if kind == "lstm":
        layer, x = lstm.LSTM(C, K, rng=rng), rng.standard_normal((3, N, C)).astype(f32)
        dy = rng.standard_normal((3, N, K)).astype(f32)
        return (layer, x, dy, lambda m, x: m.forward(x)[0], lambda m, dy: m.backward(dy)[0],
                lambda m: (m.grad_w_ih, m.grad_w_hh, m.grad_b), lambda m: (m.w_ih, m.w_hh, m.b))
    if kind == "conv":
        layer = conv.Conv2d(C, K, 3, padding=1, bias=True, rng=rng)
        x, dy = (rng.standard_normal((N, c, 5, 4)).astype(f32) for c in (C, K))
    else:
        layer = {"linear": lambda: fc.Linear(C, K, activation="tanh", rng=rng),
                 "mlp": lambda: fc.MLP([C, 7, K], rng=rng),
                 "mlp_fused": lambda: fc.MLP([C, 7, K], fused=True, rng=rng)}[kind]()
        x, dy = (rng.standard_normal((N, c)).astype(f32) for c in (C, K))
    return (layer, x, dy, lambda m, x: m.forward(x), lambda m, dy: m.backward(dy),
            lambda m: [g for p in getattr(m, "layers", [m]) for g in (p.grad_weight, p.grad_bias)],
            lambda m: [w for p in getattr(m, "layers", [m]) for w in (p.weight, p.bias)])


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
@pytest.mark.parametrize("kind", ["linear", "mlp", "mlp_fused", "conv", "lstm"])
def test_layers_copy_and_pickle(rng, kind, how):
    """copy.deepcopy or pickle of a layer that has run (a snapshot of a model
    in training): the copy has the weights and gradients, computes what the
    layer computes, and owns its arrays."""
    layer, x, dy, forward, backward, grads, weights = _copy_cases(rng, kind)
    forward(layer, x)
    backward(layer, dy)
    twin = copy.deepcopy(layer) if how == "deepcopy" else pickle.loads(pickle.dumps(layer))
    for a, b in zip(grads(layer), grads(twin)):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(weights(layer), weights(twin)):
        np.testing.assert_array_equal(a, b)
        assert not np.shares_memory(a, b)
    y = forward(twin, x)
    np.testing.assert_array_equal(y, forward(layer, x))  # the same plans on the same data
    np.testing.assert_array_equal(backward(twin, dy), backward(layer, dy))
    if kind == "linear":  # the copy against float64 too
        (ry, mag), (rdx, mag_dx), (rdw, mag_w), _ = _linear_refs(x, twin.weight, twin.bias,
                                                                 "tanh", dy)
        _close("y", y, ry, mag)
        _close("grad_weight", twin.grad_weight, rdw, mag_w)


@pytest.mark.parametrize("kind", ["linear", "mlp", "mlp_fused"])
def test_broadcast_batch_past_memory_is_named(rng, kind):
    """A broadcast x (strides 0) whose batch cannot fit in memory: a ValueError
    naming x before any plan for it is recorded (not a hang recording one)."""
    C, K = (int(v) for v in rng.integers(100, 1000, 2))
    layer = {"linear": lambda: fc.Linear(C, K), "mlp": lambda: fc.MLP([C, K]),
             "mlp_fused": lambda: fc.MLP([C, K], fused=True)}[kind]()
    N = 2 ** 50 // C  # petabytes of f32
    with pytest.raises(ValueError, match="^x:"):
        layer.forward(np.broadcast_to(f32(1), (N, C)))
