"""What the primitives.nn tests share: a seeded torch generator, random
tensors, and element-wise comparisons with float64 torch."""
import pytest
import torch
from torch import nn


@pytest.fixture
def gen(rng):
    """A torch generator seeded from the printed seed (conftest's rng)."""
    return torch.Generator().manual_seed(int(rng.integers(2**31)))


def rand(gen, *shape, dtype=torch.float32, scale=1.0):
    return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale).to(dtype)


def f64(t, grad=False):
    return t.detach().to(torch.float64).requires_grad_(grad)


def assert_close(name, got, want, bound):
    """|got - want| <= bound per element (bound: a tensor or a number)."""
    err = (got.detach().to(torch.float64) - want.detach()).abs()
    bound = torch.as_tensor(bound, dtype=torch.float64).expand_as(err)
    worst = (err / (bound + 1e-300)).max().item() if err.numel() else 0.0
    print(f"{name}: max abs diff {err.max().item() if err.numel() else 0:.3e}, "
          f"worst err/bound {worst:.3f}")
    assert bool((err <= bound).all()), f"{name}: err/bound {worst:.3f}"


def bilinear_check(fn, inputs, ours, dy, rel, names):
    """Compare ours = (y, grads of the inputs) with fn in float64; the bound of
    each element is rel times its sum of |products|: fn run on |inputs| (fn is
    linear in each argument, so its gradients there are the magnitudes too)."""
    ref_in = [f64(t, True) for t in inputs]
    y = fn(*ref_in)
    y.backward(f64(dy))
    abs_in = [f64(t, True).abs().detach().requires_grad_() for t in inputs]
    ya = fn(*abs_in)
    ya.backward(f64(dy).abs())
    assert_close("y", ours[0], y, rel * (ya.detach() + 1e-30))
    for name, got, r, a in zip(names, ours[1:], ref_in, abs_in):
        if got is not None:
            assert_close(name, got, r.grad, rel * (a.grad + 1e-30))


def ctor_args(m):
    """The positional constructor arguments that remake torch module m."""
    if isinstance(m, nn.Linear):
        return (m.in_features, m.out_features)
    if isinstance(m, nn.Conv2d):
        return (m.in_channels, m.out_channels, m.kernel_size, m.stride, m.padding, 1, 1,
                m.bias is not None)
    return (m.input_size, m.hidden_size, 1, m.bias, m.batch_first)
