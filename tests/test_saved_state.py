"""What a backward reads of its forward is the library's own: a caller who
changes the array a training forward returned (y -= target, done in place)
before calling backward gets the gradients it would have got otherwise."""
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


@pytest.mark.parametrize("case", list(CASES))
def test_changing_y_before_backward_changes_no_gradient(rng, case):
    layer = CASES[case](rng)
    x = _input(rng, layer)
    runs = []
    for change in (False, True):
        y = layer.forward(x)
        y = y[0] if isinstance(layer, lstm.LSTM) else y
        dy = np.random.default_rng(7).standard_normal(y.shape).astype(np.float32)
        if change:
            y -= 3.0  # what a loss computed in place does
            y *= -2.0
        dx = layer.backward(dy) if not isinstance(layer, lstm.LSTM) else layer.backward(dy)[0]
        runs.append([dx.copy()] + _grads(layer))
    for name, a, b in zip(["dx"] + [f"grad {i}" for i in range(len(runs[0]) - 1)], *runs):
        np.testing.assert_array_equal(b, a, err_msg=f"{case}: {name}")
