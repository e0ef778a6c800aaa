"""primitives.nn's Linear and Conv2d under torch.func's reverse-mode transforms
and vmap (primitives.nn_transforms): grad and vjp, jacrev, per-sample
gradients (vmap of grad), vmap over inputs and over stacked parameters
(ensembles), against the same transforms of float64 torch.nn.functional on
random shapes. Every quantity here is linear in each argument, so the same
transform on the arguments' absolute values gives each element's sum of
|terms|, which bounds its f32 rounding (1e-5 of it). A grad of a grad raises,
never a silent zero; the LSTM and the fused MLP refuse the transforms by
name."""
import pytest
import torch
from torch.func import functional_call, grad, jacrev, vjp, vmap

from nn_support import assert_close, gen, rand  # noqa: F401 (gen: a fixture)
from primitives import nn as pnn

torch.set_num_threads(1)
REL = 1e-5


def _layer(rng, gen, kind):
    """(our module, its float64 functional reference f(params, x), one input's
    shape, the output's shape for it) of a random Linear or Conv2d."""
    bias = bool(rng.integers(2))
    if kind == "linear":
        C, K = (int(v) for v in rng.integers(2, 30, 2))
        m = pnn.Linear(C, K, bias=bias)
        shape = (int(rng.integers(1, 5)), C)
        ref = lambda p, x: torch.nn.functional.linear(x, p["weight"], p.get("bias"))  # noqa: E731
    else:
        C, K, R = int(rng.integers(1, 5)), int(rng.integers(1, 7)), int(rng.integers(1, 4))
        st, pd = int(rng.integers(1, 3)), int(rng.integers(0, 2))
        m = pnn.Conv2d(C, K, R, stride=st, padding=pd, bias=bias)
        H, W = (int(v) for v in rng.integers(R, R + 6, 2))
        shape = (int(rng.integers(1, 3)), C, H, W)
        ref = lambda p, x: torch.nn.functional.conv2d(  # noqa: E731
            x, p["weight"], p.get("bias"), st, pd)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(rand(gen, *p.shape))
    out = ref({k: v.double() for k, v in m.named_parameters()},
              torch.zeros(shape, dtype=torch.float64)).shape
    print(kind, m, "input", shape, "output", tuple(out))
    return m, ref, shape, tuple(out)


def _params(m, f=lambda t: t):
    return {k: f(v.detach().double()) for k, v in m.named_parameters()}


def _ours(m):
    return lambda p, x: functional_call(m, p, (x,))


def _compare(name, got, run, args):
    """got (a tensor or dict of them) against run(*args) in float64, bounded by
    run on the arguments' absolute values."""
    want, mag = run(*args), run(*(_abs(a) for a in args))
    if isinstance(got, dict):
        for k in got:
            assert_close(f"{name} {k}", got[k], want[k], REL * mag[k] + 1e-30)
    else:
        assert_close(name, got, want, REL * mag + 1e-30)


def _abs(a):
    return {k: v.abs() for k, v in a.items()} if isinstance(a, dict) else a.abs()


def _f32(a):
    return {k: v.float() for k, v in a.items()} if isinstance(a, dict) else a.float()


@pytest.mark.parametrize("kind", ["linear", "conv"])
def test_grad_and_vjp(rng, gen, kind):
    m, ref, shape, out = _layer(rng, gen, kind)
    x, c = rand(gen, *shape, dtype=torch.float64), rand(gen, *out, dtype=torch.float64)
    p = _params(m)

    def loss(f):
        return lambda p, x, c: (f(p, x) * c).sum()
    got = grad(loss(_ours(m)), argnums=(0, 1))(_f32(p), x.float(), c.float())
    _compare("grad params", got[0], lambda p, x, c: grad(loss(ref))(p, x, c), (p, x, c))
    _compare("grad x", got[1], lambda p, x, c: grad(loss(ref), argnums=1)(p, x, c), (p, x, c))
    y, fn = vjp(m, x.float())
    _compare("vjp y", y, lambda p, x: ref(p, x), (p, x))
    _compare("vjp dx", fn(c.float())[0], lambda p, x, c: vjp(lambda x: ref(p, x), x)[1](c)[0],
             (p, x, c))


@pytest.mark.parametrize("kind", ["linear", "conv"])
def test_jacrev(rng, gen, kind):
    m, ref, shape, _ = _layer(rng, gen, kind)
    x, p = rand(gen, *shape, dtype=torch.float64), _params(m)
    _compare("jacrev x", jacrev(m)(x.float()), lambda p, x: jacrev(lambda x: ref(p, x))(x),
             (p, x))
    _compare("jacrev params", jacrev(_ours(m))(_f32(p), x.float()),
             lambda p, x: jacrev(ref)(p, x), (p, x))


@pytest.mark.parametrize("kind", ["linear", "conv"])
def test_per_sample_gradients(rng, gen, kind):
    """vmap(grad): each sample's gradients, the sample unbatched (a vector for
    Linear, one [C, H, W] image for Conv2d, as the modules take them)."""
    m, ref, shape, out = _layer(rng, gen, kind)
    B = int(rng.integers(2, 6))
    xs = rand(gen, B, *shape[1:], dtype=torch.float64)
    cs = rand(gen, B, *out[1:], dtype=torch.float64)
    p = _params(m)

    def loss(f):
        return lambda p, x, c: (f(p, x) * c).sum()
    got = vmap(grad(loss(_ours(m)), argnums=(0, 1)), in_dims=(None, 0, 0))(
        _f32(p), xs.float(), cs.float())
    run = lambda i: lambda p, x, c: vmap(  # noqa: E731
        grad(loss(ref), argnums=i), in_dims=(None, 0, 0))(p, x, c)
    _compare("per-sample params", got[0], run(0), (p, xs, cs))
    _compare("per-sample x", got[1], run(1), (p, xs, cs))


@pytest.mark.parametrize("kind", ["linear", "conv"])
def test_vmap_over_inputs_and_ensembles(rng, gen, kind):
    """vmap over a batch of inputs (one call, shared weights), over stacked
    parameters (an ensemble: a call per member) and over both, with the
    batch on a dimension other than the first too."""
    m, ref, shape, _ = _layer(rng, gen, kind)
    E = int(rng.integers(2, 5))
    ps = {k: rand(gen, E, *v.shape, dtype=torch.float64) for k, v in m.named_parameters()}
    xs = rand(gen, E, *shape, dtype=torch.float64)
    x = xs[0]
    _compare("vmap x", vmap(m, in_dims=1)(xs.movedim(0, 1).float()),
             lambda p, x: vmap(lambda x: ref(p, x), in_dims=1)(x), (_params(m), xs.movedim(0, 1)))
    _compare("ensemble", vmap(_ours(m), in_dims=(0, None))(_f32(ps), x.float()),
             lambda p, x: vmap(ref, in_dims=(0, None))(p, x), (ps, x))
    _compare("ensemble, x each", vmap(_ours(m))(_f32(ps), xs.float()),
             lambda p, x: vmap(ref)(p, x), (ps, xs))


@pytest.mark.parametrize("kind", ["linear", "conv"])
def test_grad_of_grad_raises(rng, gen, kind):
    """Our gradients are not differentiable again: a nested grad (and
    hessian's forward-mode half) raises rather than returning zeros."""
    m, _, shape, _ = _layer(rng, gen, kind)
    x = rand(gen, *shape)
    inner = grad(lambda z: m(z).pow(2).sum())
    with pytest.raises(RuntimeError, match="not differentiable again"):
        grad(lambda z: inner(z).sum())(x)
    with pytest.raises(NotImplementedError, match="jvp"):
        torch.func.hessian(lambda z: m(z).pow(2).sum())(x)


def test_stateful_modules_refuse_transforms(rng, gen):
    """The LSTM and the fused MLP keep state in the module: NotImplementedError
    naming them under grad and vmap (an unfused MLP, a stack of Linears, runs)."""
    lstm, x = pnn.LSTM(4, 6), rand(gen, 3, 2, 4)
    fused, unfused, v = pnn.MLP([4, 5, 3], fused=True), pnn.MLP([4, 5, 3]), rand(gen, 2, 4)
    for m, a, name in ((lstm, x, "LSTM"), (fused, v, "MLP")):
        f = (lambda a: m(a)[0].sum()) if m is lstm else (lambda a: m(a).sum())
        with pytest.raises(NotImplementedError, match=f"{name}: torch.func"):
            grad(f)(a)
        with pytest.raises(NotImplementedError, match=f"{name}: torch.func"):
            vmap(m)(a.unsqueeze(0))
    want = unfused(v)
    assert_close("unfused MLP under vmap", vmap(unfused)(v.unsqueeze(0))[0], want.double(),
                 1e-6 * (want.abs().double() + 1))
