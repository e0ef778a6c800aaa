"""LSTM against torch.nn.LSTM in float64: y, hT, cT and all six gradients,
both dtypes, remainder sizes, K != C, the layer class, and bad input."""
import numpy as np
import pytest
import torch

import brgemm
from brgemm.loopspec import Loop, parse_spec
from primitives import lstm

SHAPES = [(1, 1, 1, 1), (3, 4, 5, 6), (5, 70, 33, 40), (2, 64, 64, 64), (4, 9, 130, 20)]


def make(rng, T, N, C, K, npdt):
    r = lambda *s, scale=1.0: (rng.standard_normal(s) * scale).astype(npdt)  # noqa: E731
    return dict(x=r(T, N, C), h0=r(N, K), c0=r(N, K), w_ih=r(4 * K, C, scale=0.3),
                w_hh=r(4 * K, K, scale=0.3), b=r(4 * K)), dict(dy=r(T, N, K), dhT=r(N, K),
                                                               dcT=r(N, K))


def reference(a, d):
    T, N, C = a["x"].shape
    K = a["h0"].shape[1]
    f64 = lambda v, grad=False: torch.tensor(np.asarray(v, np.float64), requires_grad=grad)  # noqa: E731
    m = torch.nn.LSTM(C, K).double()
    with torch.no_grad():
        m.weight_ih_l0.copy_(f64(a["w_ih"]))
        m.weight_hh_l0.copy_(f64(a["w_hh"]))
        m.bias_ih_l0.copy_(f64(a["b"]))
        m.bias_hh_l0.zero_()
    X, H0, C0 = f64(a["x"], True), f64(a["h0"], True), f64(a["c0"], True)
    Y, (HT, CT) = m(X, (H0[None], C0[None]))
    loss = (Y * f64(d["dy"])).sum() + (HT[0] * f64(d["dhT"])).sum() + (CT[0] * f64(d["dcT"])).sum()
    loss.backward()
    fwd = [t.detach().numpy() for t in (Y, HT[0], CT[0])]
    bwd = [X.grad, H0.grad, C0.grad, m.weight_ih_l0.grad, m.weight_hh_l0.grad, m.bias_ih_l0.grad]
    return fwd, [g.numpy() for g in bwd]


def check(names, got, want, rel):
    for name, g, w in zip(names, got, want):
        err = np.abs(np.asarray(g, np.float64) - w).max()
        scale = np.abs(w).max() + 1
        print(f"{name}: max abs diff {err:.3e} (scale {scale:.2e})")
        assert err <= rel * scale, name


@pytest.mark.parametrize("T,N,C,K", SHAPES)
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_forward_backward(rng, backend, T, N, C, K, dtype):
    npdt = np.float32 if dtype == "f32" else brgemm.bfloat16
    a, d = make(rng, T, N, C, K, npdt)
    cfg = {"fwd": {"bn": 16, "bc": 32, "bk": 16}}  # several blocks even on small shapes
    y, (hT, cT) = lstm.forward(**a, dtype=dtype, config=cfg, backend=backend)
    grads = lstm.backward(**d, **a, dtype=dtype, config=cfg, backend=backend)
    assert y.dtype == hT.dtype == grads[0].dtype == grads[3].dtype == npdt
    fwd, bwd = reference(a, d)
    # f32: sums over T*N and 4K terms; bf16: operands rounded to 8 bits every step
    rel = 1e-5 if dtype == "f32" else 1e-2
    check(["y", "hT", "cT"], (y, hT, cT), fwd, rel)
    check(["dx", "dh0", "dc0", "dw_ih", "dw_hh", "db"], grads, bwd, rel)


def test_layer_reuses_plans_and_matches(rng, backend):
    T, N, C, K = 6, 20, 24, 40
    layer = lstm.LSTM(C, K, rng=rng, backend=backend)
    a, d = make(rng, T, N, C, K, np.float32)
    a.update(w_ih=layer.w_ih, w_hh=layer.w_hh, b=layer.b)
    for _ in range(2):  # second pass on the same buffers and plans
        y, (hT, cT) = layer.forward(a["x"], a["h0"], a["c0"])
        dx, dh0, dc0 = layer.backward(d["dy"], d["dhT"], d["dcT"])
    fwd, bwd = reference(a, d)
    check(["y", "hT", "cT"], (y, hT, cT), fwd, 1e-5)
    check(["dx", "dh0", "dc0", "dw_ih", "dw_hh", "db"],
          (dx, dh0, dc0, layer.grad_w_ih, layer.grad_w_hh, layer.grad_b), bwd, 1e-5)


def test_layer_gradients_follow_the_last_backward(rng):
    """Gradients are converted from tiles when read: None before any backward,
    and a read after a second backward gives that backward's, not a stale copy."""
    T, N, C, K = 3, 8, 12, 16
    layer = lstm.LSTM(C, K, rng=rng)
    assert layer.grad_w_ih is None and layer.grad_w_hh is None and layer.grad_b is None
    a, d = make(rng, T, N, C, K, np.float32)
    a.update(w_ih=layer.w_ih, w_hh=layer.w_hh, b=layer.b)
    layer.forward(a["x"], a["h0"], a["c0"])
    layer.backward(d["dy"], d["dhT"], d["dcT"])
    first = layer.grad_w_ih.copy()
    d2 = {k: v * 2 for k, v in d.items()}  # gradients are linear in the incoming ones
    layer.backward(d2["dy"], d2["dhT"], d2["dcT"])
    np.testing.assert_allclose(layer.grad_w_ih, 2 * first, rtol=1e-5, atol=1e-6)
    _, bwd = reference(a, d2)
    check(["dw_ih", "dw_hh", "db"], (layer.grad_w_ih, layer.grad_w_hh, layer.grad_b), bwd[3:],
          1e-5)


def test_functional_calls_rewrite_their_weight_copies(rng):
    """The functional form keeps its blocked weights in buffers of its own:
    a second call with other weights of the same shapes must use them, and
    leave the arrays the first call returned as they were. K a multiple of
    the hidden block (plain weight gradients) and not (tiles converted)."""
    cfg = {"fwd": {"bn": 16, "bc": 32, "bk": 16}}
    for T, N, C, K in ((3, 20, 24, 32), (2, 9, 17, 20)):
        calls = [make(rng, T, N, C, K, np.float32) for _ in range(2)]
        results = []
        for a, d in calls:
            y, (hT, cT) = lstm.forward(**a, config=cfg)
            results.append(((y, hT, cT), lstm.backward(**d, **a, config=cfg)))
        for (a, d), (fwd, grads) in zip(calls, results):
            want_fwd, want_bwd = reference(a, d)
            check(["y", "hT", "cT"], fwd, want_fwd, 1e-5)
            check(["dx", "dh0", "dc0", "dw_ih", "dw_hh", "db"], grads, want_bwd, 1e-5)


def test_functional_gradients_reuse_their_arrays(rng):
    """Once the caller lets go of a backward's results, the next backward
    writes into the same arrays (no fresh pages for dW_ih and dW_hh on every
    call), and its results are right. Random sizes, hidden size whole blocks
    (the weight gradients written plain; an odd and an even count of them)
    and not (converted from tiles)."""
    cfg = {"fwd": {"bn": 16, "bc": 32, "bk": 16}}
    for K in (16 * int(rng.choice([1, 3])), 16 * int(rng.choice([2, 4])), int(rng.integers(1, 40))):
        T, N, C = int(rng.integers(1, 4)), int(rng.integers(1, 40)), int(rng.integers(1, 70))
        print(f"T={T} N={N} C={C} K={K}")
        addresses, saved = [], lstm.Saved()
        for _ in range(3):
            a, d = make(rng, T, N, C, K, np.float32)
            lstm.forward(**a, config=cfg, saved=saved)
            grads = lstm.backward(**d, **a, config=cfg, saved=saved)
            check(["dx", "dh0", "dc0", "dw_ih", "dw_hh", "db"], grads, reference(a, d)[1], 1e-5)
            addresses.append([g.__array_interface__["data"][0] for g in grads[3:5]])
            del grads
        assert addresses[1] == addresses[2], (K % 16, addresses)


class TestBadInput:
    T, N, C, K = 2, 3, 4, 5

    def args(self, **over):
        r = np.ones
        a = dict(x=r((2, 3, 4), np.float32), h0=r((3, 5), np.float32), c0=r((3, 5), np.float32),
                 w_ih=r((20, 4), np.float32), w_hh=r((20, 5), np.float32), b=r(20, np.float32))
        a.update(over)
        return a

    def test_shapes(self):
        with pytest.raises(ValueError, match="^w_ih: expected shape"):
            lstm.forward(**self.args(w_ih=np.ones((19, 4), np.float32)))
        with pytest.raises(ValueError, match="^w_hh: expected shape"):
            lstm.forward(**self.args(w_hh=np.ones((20, 4), np.float32)))
        with pytest.raises(ValueError, match="^b: expected shape"):
            lstm.forward(**self.args(b=np.ones(16, np.float32)))
        with pytest.raises(ValueError, match=r"^x: expected shape \(T, N, 4\)"):
            lstm.forward(**self.args(x=np.ones((2, 3, 5), np.float32)))
        with pytest.raises(ValueError, match=r"^h0: expected shape \(3, 5\)"):
            lstm.forward(**self.args(h0=np.ones((4, 5), np.float32)))
        with pytest.raises(ValueError, match=r"^c0: expected shape"):
            lstm.forward(**self.args(c0=np.ones((3, 6), np.float32)))

    def test_types(self):
        with pytest.raises(TypeError, match="^x: expected dtype"):
            lstm.forward(**self.args(x=np.ones((2, 3, 4))))
        with pytest.raises(TypeError, match="^w_hh: expected a numpy.ndarray"):
            lstm.forward(**self.args(w_hh=[[1.0]]))
        with pytest.raises(ValueError, match="^dtype"):
            lstm.forward(**self.args(), dtype="f16")
        for name in ("h0", "c0"):  # states take the dtypes x takes, nothing converted silently
            for bad in (np.ones((3, 5)), np.ones((3, 5), np.int32),
                        np.ones((3, 5), brgemm.bfloat16)):
                with pytest.raises(TypeError, match=f"^{name}: expected dtype"):
                    lstm.forward(**self.args(**{name: bad}))
            with pytest.raises(TypeError, match=f"^{name}: expected a numpy.ndarray"):
                lstm.forward(**self.args(**{name: [[0.0] * 5] * 3}))

    def test_backward(self):
        with pytest.raises(ValueError, match=r"^dy: expected shape \(2, 3, 5\)"):
            lstm.backward(np.ones((3, 3, 5), np.float32), None, None, **self.args())
        for bad in (np.ones((2, 3, 5)), np.ones((2, 3, 5), object)):  # dy's dtype: the results'
            with pytest.raises(TypeError, match="^dy: expected dtype"):
                lstm.backward(bad, None, None, **self.args())
        for name in ("dhT", "dcT"):
            with pytest.raises(TypeError, match=f"^{name}: expected dtype"):
                lstm.backward(np.ones((2, 3, 5), np.float32), **{"dhT": None, "dcT": None,
                              name: np.ones((3, 5))}, **self.args())
        with pytest.raises(ValueError, match="^dy: call forward first"):
            lstm.LSTM(4, 5).backward(np.ones((2, 3, 5), np.float32))


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_fused_recurrence_eager_matches_replay(rng, dtype):
    """The BPTT nest run eagerly (NumPy epilogue) and replayed (C epilogue) agree;
    with bf16, the dG16 copies the next step's GEMM reads too."""
    T, N, C, K = 3, 20, 8, 24
    layer = lstm.LSTM(C, K, dtype=dtype, rng=rng, config={"fwd": {"bn": 16, "bc": 16, "bk": 16}})
    a, d = make(rng, T, N, C, K, np.float32)
    layer.forward(a["x"], a["h0"], a["c0"])
    g = layer.g
    dyb = layer._steps_to_blocks(d["dy"], g.bk, K, "dy")
    start = lambda v: to_tiles(v, g)  # noqa: E731
    outs = []
    for run in ("replay", "eager"):
        t = dict(dy=dyb, G=layer.G, c=layer.c, dc=start(d["dcT"]), dG=np.zeros_like(layer.G),
                 dhr=start(d["dhT"]), wht=layer.w_hh_tiles)
        if dtype == "bf16":
            t["dG16"] = np.zeros(layer.G.shape, brgemm.bfloat16)
        if run == "replay":
            lstm.backward_plan(g, dtype).run(**t)
        else:
            loops = parse_spec(g.spec, [Loop("t", 0, g.T, 1), Loop("n", 0, g.Nb, 1),
                                             Loop("k", 0, g.Kb, 1)])
            lstm.backward_nest(brgemm.plan.Eager(**t), loops, g, dtype)
        outs.append((t["dG"], t["dc"], t.get("dG16")))
    (dG, dc, _), (dG_ref, dc_ref, _) = outs
    last = slice((T - 1) * g.Nb, None)  # the last step's dG: no rounded input yet
    np.testing.assert_allclose(dG[last], dG_ref[last], rtol=1e-5, atol=1e-6)
    # earlier steps read dG16: where the C and NumPy cells differ in dG's last
    # bits, the bf16 rounding of an element can land one bf16 step apart (2^-8)
    tight = dtype == "f32"
    for got, want in ((dG, dG_ref), (dc, dc_ref)):
        np.testing.assert_allclose(got, want, rtol=1e-5 if tight else 2**-7,
                                   atol=1e-6 if tight else 2**-8 * np.abs(want).max())
    if dtype == "bf16":  # the copies are dG rounded: within one bf16 step of each other
        np.testing.assert_allclose(outs[0][2].astype(np.float32), outs[0][0], rtol=2**-8, atol=1e-6)
        np.testing.assert_allclose(outs[0][2].astype(np.float32), outs[1][2].astype(np.float32),
                                   rtol=2**-7, atol=2**-8 * np.abs(dG_ref).max())


def to_tiles(v, g):
    from brgemm.layouts import to_blocks
    return to_blocks(v.astype(np.float32), g.bn, g.bk)
