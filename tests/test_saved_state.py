"""What a backward reads of its forward is the library's own: a caller who
changes the array a training forward returned (y -= target, done in place),
or the input it passed, before calling backward gets the gradients it would
have got otherwise."""
import numpy as np
import pytest

from primitives import conv, fc, lstm


def _mlp(rng, fused, last):
    sizes = [int(rng.integers(4, 40)), int(rng.integers(8, 48)), int(rng.integers(1, 20))]
    return fc.MLP(sizes, activation="relu", last_activation=last, fused=fused,
                  rng=np.random.default_rng(int(rng.integers(2**31))))


CASES = {
    "mlp fused, sigmoid last": lambda rng: _mlp(rng, True, "sigmoid"),
    "mlp fused, tanh last": lambda rng: _mlp(rng, True, "tanh"),
    "mlp unfused, sigmoid last": lambda rng: _mlp(rng, False, "sigmoid"),
    "fc.Linear, relu": lambda rng: fc.Linear(int(rng.integers(4, 40)), int(rng.integers(1, 30)),
                                             activation="relu"),
    "conv.Conv2d": lambda rng: conv.Conv2d(int(rng.integers(1, 8)), int(rng.integers(1, 8)), 3,
                                           padding=1),
    "lstm.LSTM": lambda rng: lstm.LSTM(int(rng.integers(2, 12)), int(rng.integers(2, 12))),
}


def _input(rng, layer):
    if isinstance(layer, conv.Conv2d):
        return rng.standard_normal((2, layer.C, 6, 5)).astype(np.float32)
    if isinstance(layer, lstm.LSTM):
        return rng.standard_normal((3, 4, layer.C)).astype(np.float32)
    C = layer.layers[0].C if isinstance(layer, fc.MLP) else layer.C
    return rng.standard_normal((int(rng.integers(1, 50)), C)).astype(np.float32)


def _grads(layer):
    if isinstance(layer, fc.MLP):
        return [a.copy() for lay in layer.layers for a in (lay.grad_weight, lay.grad_bias)]
    if isinstance(layer, lstm.LSTM):
        return [layer.grad_w_ih.copy(), layer.grad_w_hh.copy(), layer.grad_b.copy()]
    return [layer.grad_weight.copy()]


@pytest.mark.parametrize("change", ["y", "x"])
@pytest.mark.parametrize("case", list(CASES))
def test_changing_y_or_x_before_backward_changes_no_gradient(rng, case, change):
    layer = CASES[case](rng)
    x0 = _input(rng, layer)
    runs = []
    for changed in (False, True):
        x = x0.copy()
        y = layer.forward(x)
        y = y[0] if isinstance(layer, lstm.LSTM) else y
        dy = np.random.default_rng(7).standard_normal(y.shape).astype(np.float32)
        if changed:  # what a loss computed in place does, or a batch buffer refilled
            (y if change == "y" else x)[...] *= -2.0
        dx = layer.backward(dy) if not isinstance(layer, lstm.LSTM) else layer.backward(dy)[0]
        runs.append([dx.copy()] + _grads(layer))
    for name, a, b in zip(["dx"] + [f"grad {i}" for i in range(len(runs[0]) - 1)], *runs):
        np.testing.assert_array_equal(b, a, err_msg=f"{case}: {name}")


@pytest.mark.parametrize("fused", [False, True])
def test_backward_after_an_inference_forward_is_refused(rng, fused):
    """An inference forward (train=False) after a training one leaves nothing
    a backward may use: a named error, never gradients of the wrong forward."""
    net = _mlp(rng, fused, "sigmoid")
    x = _input(rng, net)
    y = net.forward(x)
    net.forward(x[::-1].copy(), train=False)
    with pytest.raises(ValueError, match="^dy: "):
        net.backward(np.ones_like(y))
    net.forward(x)
    net.backward(np.ones_like(y))  # a training forward again: fine


@pytest.mark.parametrize("case", ["fc.Linear", "conv.Conv2d", "mlp unfused", "mlp fused"])
def test_step_checks_its_lr_and_needs_a_backward(rng, case):
    layer = {"fc.Linear": CASES["fc.Linear, relu"], "conv.Conv2d": CASES["conv.Conv2d"],
             "mlp unfused": CASES["mlp unfused, sigmoid last"],
             "mlp fused": CASES["mlp fused, sigmoid last"]}[case](rng)
    x = _input(rng, layer)
    layers = layer.layers if hasattr(layer, "layers") else [layer]
    weights = lambda: [lay.weight.copy() for lay in layers]  # noqa: E731
    before = weights()
    for made in ("nothing", "a forward"):  # no backward yet: no gradient to step with
        with pytest.raises(ValueError, match="^grad_weight: no gradient"):
            layer.step(0.1)
        y = layer.forward(x)
    layer.backward(np.ones_like(y))
    for lr, exc in ((None, TypeError), ("0.1", TypeError), (True, TypeError),
                    (float("inf"), ValueError), (float("nan"), ValueError), (1e39, ValueError)):
        with pytest.raises(exc, match="^lr: "):
            layer.step(lr)
    for a, b in zip(weights(), before):  # nothing moved
        np.testing.assert_array_equal(a, b)
    layer.step(np.float32(0.5))
    assert any((a != b).any() for a, b in zip(weights(), before))


def test_layer_calls_name_what_is_missing_or_wrong(rng):
    with pytest.raises(ValueError, match="^w_ih: the layer has no weights"):
        lstm.LSTM(3, 4, init=False).forward(rng.standard_normal((2, 2, 3)).astype(np.float32))
    layer = conv.Conv2d(2, 3, 3, padding=1)
    y = layer.forward(rng.standard_normal((1, 2, 4, 4)).astype(np.float32))
    with pytest.raises(TypeError, match="^dy: "):
        layer.backward(y.astype(np.float64))
