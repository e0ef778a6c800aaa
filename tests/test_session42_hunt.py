"""Hunting defects in primitives.nn under torch.func's transforms and in the
Recycler's pool (session 42): every case against float64 torch.nn.functional
on random shapes (seeds printed by the rng fixture), bounded by 1e-5 of the
same computation on absolute values (each element's sum of |terms|)."""
import numpy as np
import pytest
import torch
from torch.func import functional_call, grad, vmap

from nn_support import assert_close, gen, rand  # noqa: F401 (gen: a fixture)
from primitives import nn as pnn

torch.set_num_threads(1)
REL = 1e-5
F = torch.nn.functional


def _check(name, got, run, *args):
    """got against run(*args) in float64, bounded by run on |args|."""
    want = run(*(a.double() for a in args))
    mag = run(*(a.double().abs() for a in args))
    assert got.shape == want.shape, f"{name}: shape {tuple(got.shape)}, want {tuple(want.shape)}"
    assert_close(name, got, want, REL * mag + 1e-30)


def _linear(rng, gen, K=None):
    C = int(rng.integers(1, 20))
    K = int(rng.integers(1, 20)) if K is None else K
    m = pnn.Linear(C, K, bias=bool(rng.integers(2)))
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(rand(gen, *p.shape))
    print("linear", m)
    return m


def _conv(rng, gen):
    C, K, R = int(rng.integers(1, 5)), int(rng.integers(1, 6)), int(rng.integers(1, 4))
    st, pd = int(rng.integers(1, 3)), int(rng.integers(0, 2))
    m = pnn.Conv2d(C, K, R, stride=st, padding=pd, bias=bool(rng.integers(2)))
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(rand(gen, *p.shape))
    H, W = (int(v) for v in rng.integers(R, R + 5, 2))
    print("conv", m, "image", (C, H, W))
    return m, (C, H, W)


def _ref(m):
    """m's float64 functional form f(x, weight, bias)."""
    if isinstance(m, pnn.Conv2d):
        return lambda x, w, b=None: F.conv2d(x, w, b, m.stride, m.padding)
    return lambda x, w, b=None: F.linear(x, w, b)


def _wb(m):
    return [p.detach() for p in (m.weight, m.bias) if p is not None]


# ---------------------------------------------------------------- empty batches

@pytest.mark.parametrize("kind", ["linear", "conv"])
def test_empty_batch_under_vmap(rng, gen, kind):
    """vmap over a batch of size 0 (torch's own modules take it): the forward
    over inputs and over stacked parameters, and per-sample gradients, come
    back empty of the right shape, not a reshape error or an IndexError."""
    if kind == "linear":
        m = _linear(rng, gen)
        shape = (int(rng.integers(1, 4)), m.in_features)
    else:
        m, image = _conv(rng, gen)
        shape = image
    ref, wb = _ref(m), _wb(m)
    x0 = rand(gen, 0, *shape)
    # (torch's own conv2d under vmap answers [0, 0, K, P, Q] here: a member's shape instead)
    one = ref(torch.zeros(shape, dtype=torch.float64), *(p.double() for p in wb))
    assert vmap(m)(x0).shape == (0,) + one.shape
    g = vmap(grad(lambda x: m(x).pow(2).sum()))(x0)
    assert g.shape == x0.shape
    p = {k: v.detach() for k, v in m.named_parameters()}
    gp = vmap(grad(lambda p, x: functional_call(m, p, (x,)).sum()), in_dims=(None, 0))(p, x0)
    assert all(gp[k].shape == (0,) + v.shape for k, v in p.items())
    ens = {k: v.new_zeros((0,) + v.shape) for k, v in p.items()}
    x = rand(gen, *shape)
    y = vmap(lambda p: functional_call(m, p, (x,)))(ens)
    assert y.shape == (0,) + ref(x.double(), *(q.double() for q in wb)).shape


def test_linear_without_outputs_under_vmap(rng, gen):
    """Linear(C, 0) (legal in torch) under vmap: an empty [B, ..., 0], not an
    ambiguous reshape."""
    m = _linear(rng, gen, K=0)
    B = int(rng.integers(1, 5))
    x = rand(gen, B, int(rng.integers(1, 4)), m.in_features)
    _check("vmap Linear(C, 0)", vmap(m)(x), lambda x, *wb: F.linear(x, *wb), x, *_wb(m))


# ---------------------------------------------------------------- memory formats under vmap

def test_conv_channels_last_and_strided_under_vmap(rng, gen):
    """Conv2d under vmap on channels-last images, channels-last weights, and a
    batch on an inner dimension (a non-contiguous member): torch's own conv2d
    takes them all; ours raised torch's NYI on querying the memory format."""
    m, image = _conv(rng, gen)
    ref, wb = _ref(m), _wb(m)
    B, N = (int(v) for v in rng.integers(1, 4, 2))
    xs = rand(gen, B, N, *image)
    cl = xs.contiguous(memory_format=torch.channels_last_3d)  # each member channels-last
    run = lambda x, *wb: vmap(lambda x: ref(x, *wb))(x)  # noqa: E731
    _check("vmap, channels-last members", vmap(m)(cl), run, xs, *wb)
    inner = xs.movedim(0, 2)  # [N, C, B, H, W]: the batch inside each member
    _check("vmap in_dims=2", vmap(m, in_dims=2)(inner), run, xs, *wb)
    m.to(memory_format=torch.channels_last)
    _check("vmap, channels-last weight", vmap(m)(xs), run, xs, *wb)
    g = vmap(grad(lambda x: m(x).pow(2).sum()))(cl)
    want = vmap(grad(lambda x: ref(x, *(p.double() for p in wb)).pow(2).sum()))(xs.double())
    mag = vmap(grad(lambda x: ref(x, *(p.double().abs() for p in wb)).pow(2).sum()))(
        xs.double().abs())
    assert_close("vmap(grad), channels-last", g, want, 10 * REL * mag + 1e-30)


# ---------------------------------------------------------------- vjp's function, called later

@pytest.mark.parametrize("kind", ["linear", "conv"])
def test_vjp_function_after_vjp_returned(rng, gen, kind):
    """vjp's function called after vjp returned: right gradients (also under a
    vmap of its own: a Jacobian's rows), and with a cotangent that requires
    grad, a backward through it raises as a grad of a grad does (the
    cotangent's derivative was silently dropped: c.grad lacked W's part)."""
    if kind == "linear":
        m = _linear(rng, gen)
        x = rand(gen, int(rng.integers(1, 4)), m.in_features)
    else:
        m, image = _conv(rng, gen)
        x = rand(gen, int(rng.integers(1, 3)), *image)
    ref, wb = _ref(m), _wb(m)
    y, fn = torch.func.vjp(m, x)
    B = int(rng.integers(1, 4))
    cs = rand(gen, B, *y.shape)
    want = lambda c, x, *wb: vmap(  # noqa: E731
        lambda c: torch.func.vjp(lambda x: ref(x, *wb), x)[1](c)[0])(c)
    _check("vjp fn after, c[0]", fn(cs[0])[0], lambda *a: want(*a)[0], cs[:1], x, *wb)
    _check("vmap(vjp fn) after", vmap(fn)(cs)[0], want, cs, x, *wb)
    c = cs[0].clone().requires_grad_()
    with pytest.raises(RuntimeError, match="not differentiable again"):
        (fn(c)[0].sum() + c.sum()).backward()


def test_conv_wrong_member_shape_under_vmap(rng, gen):
    """A member of the wrong rank under vmap: the ValueError names the member's
    shape, not that of the batch folded into one (an (B*H, W) nobody passed)."""
    m, (C, H, W) = _conv(rng, gen)
    B = int(rng.integers(1, 4))
    with pytest.raises(ValueError, match=rf"got \({H}, {W}\)"):
        vmap(m)(rand(gen, B, H, W))


# ---------------------------------------------------------------- the Recycler

def _values(h):
    """A copy of h's values (a NumPy array or a torch tensor)."""
    return h.numpy().copy() if isinstance(h, torch.Tensor) else h.copy()


def test_recycler_across_threads_views_and_dtypes(rng):
    """Threads each with their own pool, results kept through torch views and
    handed between threads, one name under two dtypes: no array still
    reachable is handed out again (its contents would change under the
    holder), and in check mode a hand-out comes NaN-filled."""
    from brgemm import arrays
    pool = arrays.Recycler()
    shape = tuple(int(v) for v in rng.integers(1, 9, 2))
    kept, errors = [], []

    def work(seed):
        r = np.random.default_rng(seed)
        mine = []
        for i in range(40):
            dtype = (np.float32, np.float64)[int(r.integers(2))]
            a = pool.empty("y", shape, dtype)
            if arrays.CHECK and not np.isnan(a).all():
                errors.append("not NaN-filled")
            a[:] = r.standard_normal(shape)
            held = torch.from_numpy(a)[1:] if i % 2 else a.reshape(-1)[::2]
            mine.append((held, _values(held)))
            if i % 5 == 0:
                kept.append(mine.pop(0))  # handed to the main thread
            if len(mine) > 3:
                mine.pop(0)
            for h, want in mine:
                if not np.array_equal(_values(h), want):
                    errors.append("a held result was overwritten")
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(3) as ex:  # (each worker thread: a pool of its own)
        list(ex.map(work, rng.integers(1 << 30, size=3).tolist()))
    assert not errors, errors[:3]
    for h, want in kept:
        np.testing.assert_array_equal(_values(h), want)
