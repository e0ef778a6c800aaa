"""torch.fx.symbolic_trace on primitives.nn: Linear and Conv2d trace as the
custom operators (primitives.nn_ops), so a traced model of them computes what
the model does, gradients included (against float64 torch); the LSTM and the
fused MLP, which keep state in the module, are refused by name, and trace
whole as leaf modules."""
import pytest
import torch

from primitives import nn as pnn


def _reference(model, x, f=lambda t: t):
    """model's output and input gradient (of its sum) in float64 by torch.nn's
    own layers on f(x) and f of the parameters: f = abs bounds the sums of
    |terms| that f32 rounding scales with (every ReLU then passes all)."""
    ref = torch.nn.Sequential(*(torch.nn.Conv2d(m.in_channels, m.out_channels, m.kernel_size,
                                                m.stride, m.padding)
                                if isinstance(m, pnn.Conv2d) else
                                torch.nn.Linear(m.in_features, m.out_features)
                                if isinstance(m, pnn.Linear) else m for m in model)).double()
    ref.load_state_dict({k: f(v) for k, v in model.state_dict().items()})
    xd = f(x.detach().double()).requires_grad_()
    y = ref(xd)
    y.backward(torch.ones_like(y))
    return y.detach(), xd.grad


def test_traced_linear_and_conv_match(rng):
    """A random Conv2d, ReLU, Flatten, Linear model traced by
    torch.fx.symbolic_trace: the graph calls torch.ops.brgemm.conv2d and
    .linear, and its output and input gradient match float64 torch."""
    for _ in range(3):
        C, K, H, R = (int(rng.integers(1, 9)), int(rng.integers(1, 9)), int(rng.integers(3, 9)),
                      int(rng.choice([1, 3])))
        N, out = int(rng.integers(1, 5)), int(rng.integers(1, 7))
        print(f"C={C} K={K} H={H} R={R} N={N} out={out}")
        model = torch.nn.Sequential(pnn.Conv2d(C, K, R, padding=R // 2), torch.nn.ReLU(),
                                    torch.nn.Flatten(), pnn.Linear(K * H * H, out))
        gm = torch.fx.symbolic_trace(model)
        ops = {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}
        assert {"brgemm.conv2d", "brgemm.linear"} <= ops
        x = torch.randn(N, C, H, H, requires_grad=True)
        y = gm(x)
        y.backward(torch.ones_like(y))
        (want, want_dx), (mag, mag_dx) = _reference(model, x), _reference(model, x, torch.abs)
        assert torch.all((y.double() - want).abs() <= 1e-5 * mag + 1e-30)
        assert torch.all((x.grad.double() - want_dx).abs() <= 1e-5 * mag_dx + 1e-30)


@pytest.mark.parametrize("make", [lambda: pnn.LSTM(4, 5), lambda: pnn.MLP([4, 6, 3], fused=True)])
def test_stateful_modules_refused_then_leaves(make):
    """The LSTM and the fused MLP under symbolic_trace: NotImplementedError
    naming the module and the way out; as leaf modules of a Tracer the graph
    calls them whole and gives their output."""
    m = make()
    with pytest.raises(NotImplementedError, match=f"{type(m).__name__}: torch.fx"):
        torch.fx.symbolic_trace(m)

    class Leaves(torch.fx.Tracer):
        def is_leaf_module(self, module, name):
            return isinstance(module, type(m)) or super().is_leaf_module(module, name)

    seq = torch.nn.Sequential(m)
    gm = torch.fx.GraphModule(seq, Leaves().trace(seq))
    x = torch.randn(3, 2, 4) if isinstance(m, pnn.LSTM) else torch.randn(3, 4)
    got, want = gm(x), seq(x)
    got, want = (o[0] if isinstance(o, tuple) else o for o in (got, want))
    assert torch.equal(got, want)
