"""primitives.nn's Linear and Conv2d run their primitive without the autograd
Function where no autograd can see the call (nn_tensors._untracked: grad mode
off or nothing requiring grad, no forward-mode AD, no torch.func transform):
the same results as the tracked call, against float64, and forward-mode AD
(dual tensors, torch.func.jvp) still refused, never zero tangents; likewise
the custom operators that traced calls take (primitives.nn_ops)."""
import numpy as np
import pytest
import torch
import torch.autograd.forward_ad as fwAD

from primitives import nn as pnn


def _modules(rng):
    C, K = int(rng.integers(1, 40)), int(rng.integers(1, 40))
    N, H, W = int(rng.integers(1, 5)), int(rng.integers(3, 12)), int(rng.integers(3, 12))
    R = int(rng.integers(1, 4))
    print(f"Linear({C}, {K}) on {N} x {C}; Conv2d({C}, {K}, {R}) on {N} x {C} x {H} x {W}")
    return ((pnn.Linear(C, K), torch.randn(N, C, dtype=torch.float32)),
            (pnn.Conv2d(C, K, R, padding=R // 2), torch.randn(N, C, H, W)))


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode", "nothing requires grad"])
def test_untracked_calls_match_tracked_ones(rng, mode):
    """Random layers: the untracked call (grad mode off, or neither input nor
    parameters requiring grad) gives the tracked call's values exactly, no
    graph, and matches float64 within f32 rounding of sum |x| |w|."""
    for _ in range(3):
        for m, x in _modules(rng):
            tracked = m(x.clone().requires_grad_())
            if mode == "nothing requires grad":
                for p in m.parameters():
                    p.requires_grad_(False)
                y = m(x)
            else:
                with getattr(torch, mode)():
                    y = m(x)
            assert y.grad_fn is None and torch.equal(y, tracked.detach())
            ref, mag = (_reference(m, x, f) for f in (lambda t: t, torch.abs))
            assert torch.all((y.double() - ref).abs() <= 1e-5 * mag + 1e-30)


def _reference(m, x, f):
    """m's output in float64 on f(x) and f of its parameters (f = abs: the
    sum of |terms| per output, what f32 rounding scales with)."""
    x, w, b = (f(t.detach().double()) for t in (x, m.weight, m.bias))
    if isinstance(m, pnn.Linear):
        return torch.nn.functional.linear(x, w, b)
    return torch.nn.functional.conv2d(x, w, b, padding=m.padding)


def test_forward_mode_ad_still_refused():
    """A dual tensor (forward-mode AD) and torch.func.jvp reach the autograd
    Function, whose missing jvp raises, in grad mode and under no_grad
    alike: no silently zero tangent (vmap and the reverse-mode transforms
    run: tests/test_nn_func.py)."""
    m, x, t = pnn.Linear(8, 4), torch.randn(5, 8), torch.randn(5, 8)
    c, xc = pnn.Conv2d(3, 4, 3), torch.randn(2, 3, 6, 6)
    for grad in (True, False):
        with torch.set_grad_enabled(grad):
            with fwAD.dual_level():
                with pytest.raises(NotImplementedError, match="jvp"):
                    m(fwAD.make_dual(x, t))
                with pytest.raises(NotImplementedError, match="jvp"):
                    c(fwAD.make_dual(xc, torch.randn_like(xc)))
            for f, a in ((m, x), (c, xc)):
                with pytest.raises(NotImplementedError, match="jvp"):
                    torch.func.jvp(f, (a,), (torch.randn_like(a),))


def test_custom_operators_refuse_forward_mode_ad():
    """torch.ops.brgemm.linear and .conv2d (what compiled models call) under
    torch.func.jvp, jacfwd or a dual tensor: NotImplementedError naming the
    operator, not torch's dropped (zero) tangents; outside a dual level they
    run, vmap (torch's per-sample fallback) included."""
    x, w, b = torch.randn(5, 8), torch.randn(4, 8), torch.randn(4)
    xc, wc = torch.randn(2, 3, 6, 6), torch.randn(4, 3, 3, 3)
    lin = lambda a: torch.ops.brgemm.linear(a, w, b)  # noqa: E731
    conv = lambda a: torch.ops.brgemm.conv2d(a, wc, None, [1, 1], [1, 1])  # noqa: E731
    for f, a in ((lin, x), (conv, xc)):
        with pytest.raises(NotImplementedError, match="brgemm.*forward-mode AD"):
            torch.func.jvp(f, (a,), (torch.randn_like(a),))
        with pytest.raises(NotImplementedError, match="forward-mode AD"):
            torch.func.jacfwd(f)(a)
        with fwAD.dual_level():
            with pytest.raises(NotImplementedError, match="forward-mode AD"):
                f(fwAD.make_dual(a, torch.randn_like(a)))
    assert torch.allclose(lin(x), torch.nn.functional.linear(x, w, b), atol=1e-5)
    assert torch.allclose(torch.func.vmap(lin)(x.unsqueeze(1)).squeeze(1), lin(x), atol=1e-6)
    assert torch.allclose(conv(xc), torch.nn.functional.conv2d(xc, wc, padding=1), atol=1e-4)
