"""Functional forms and layers of fc, conv, lstm and gemm against PyTorch or
float64 NumPy on what callers do to arrays: results fed back as inputs, views
of results held across calls, unusual layouts, dtype mixes, threads, small
odd sizes (a bug hunt's findings and what it checked)."""
import threading

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import brgemm
from primitives import conv, fc, gemm, lstm

f32, bf16 = np.float32, brgemm.bfloat16


def _t(a):
    return torch.from_numpy(np.asarray(a, np.float64))


def _r16(a):
    return np.asarray(a, f32).astype(bf16).astype(np.float64)


def _close(got, ref, mag, tol=1e-5):
    """|got - ref| within tol of the magnitude sum |a||b| of each element."""
    got = np.asarray(got, np.float64)
    assert got.shape == ref.shape
    worst = np.max(np.abs(got - ref) / (tol * (mag + 1e-30)))
    print(f"worst err/bound {worst:.3f}")
    assert worst <= 1


def _conv_refs(x, w, dy, s, p, rd=np.asarray):
    """F.conv2d's gradients (dx, dw) and their magnitudes, float64."""
    gx, gw = torch.nn.grad.conv2d_input, torch.nn.grad.conv2d_weight
    a = dict(stride=s, padding=p)
    x, w, dy = (np.asarray(rd(v), np.float64) for v in (x, w, dy))
    return (gx(x.shape, _t(w), _t(dy), **a).numpy(), gw(_t(x), w.shape, _t(dy), **a).numpy(),
            gx(x.shape, _t(abs(w)), _t(abs(dy)), **a).numpy(),
            gw(_t(abs(x)), w.shape, _t(abs(dy)), **a).numpy())


def _layouts(a):
    """a with the same values: Fortran order, negative strides, one byte off
    alignment, read-only, columns 7 elements apart."""
    raw = np.empty(a.nbytes + 1, np.uint8)
    unaligned = np.ndarray(a.shape, a.dtype, raw.data, 1)
    unaligned[...] = a
    ro = a.copy()
    ro.setflags(write=False)
    wide = np.zeros(a.shape[:-1] + (7 * a.shape[-1],), a.dtype)[..., ::7]
    wide[...] = a
    return {"fortran": np.asfortranarray(a), "negative": np.flip(np.flip(a).copy()),
            "unaligned": unaligned, "read-only": ro, "strided": wide}


# ---------------------------------------------------------------- gemm

def test_gemm_empty_reduction_is_zeros(rng):
    # K = 0: the nest made no call and C came back unwritten (NaN in check mode)
    M, N = (int(v) for v in rng.integers(1, 40, 2))
    for eager in (False, True):
        C = gemm.forward(np.ones((M, 0), f32), np.ones((0, N), f32), eager=eager)
        assert C.shape == (M, N) and C.dtype == f32 and not C.any()


def test_gemm_broadcast_past_memory_is_named():
    huge = np.broadcast_to(np.ones((1, 1), f32), (10 ** 6, 10 ** 6))
    with pytest.raises(ValueError, match="^A, B: "):
        gemm.forward(huge, np.ones((10 ** 6, 2), f32))
    with pytest.raises(ValueError, match="^A, B: "):
        gemm.forward(np.ones((2, 10 ** 6), f32), huge)


# ---------------------------------------------------------------- dtype mixes

@pytest.mark.parametrize("shape", [(2, 16, 8, 8, 16, 3, 1, 1), (2, 32, 7, 7, 32, 1, 1, 0),
                                   (1, 5, 9, 9, 7, 3, 2, 2)])
def test_conv_backward_takes_dy_of_the_other_dtype(rng, shape):
    # dtype="bf16" takes f32 or bf16 arrays; conv.backward refused a dy whose
    # dtype was not x's (fc.backward and lstm.backward take it): now the
    # gradients come back in dy's dtype, as fc.backward's
    N, C, H, W, K, R, s, p = shape
    x = rng.standard_normal((N, C, H, W)).astype(f32)
    w = rng.standard_normal((K, C, R, R)).astype(f32)
    P, Q = (H + 2 * p - R) // s + 1, (W + 2 * p - R) // s + 1
    dy = rng.standard_normal((N, K, P, Q)).astype(f32)
    rdx, rdw, mdx, mdw = _conv_refs(x, w, dy, s, p, _r16)
    for xd, dd in ((f32, bf16), (bf16, f32)):
        xs = x.astype(xd)
        dx, dw = conv.backward(dy.astype(dd), xs, w, s, p, dtype="bf16")
        assert dx.dtype == dw.dtype == np.dtype(dd)
        _close(dx, rdx, mdx, 2 ** -7)
        _close(dw, rdw, mdw, 2 ** -7)
        assert np.array_equal(xs, x.astype(xd))  # x's copy, not x, in dy's dtype
    with pytest.raises(TypeError, match="^dy: expected dtype"):
        conv.backward(dy.astype(np.float64), x, w, s, p, dtype="bf16")
    with pytest.raises(TypeError, match="^dy: expected dtype"):
        conv.backward(dy.astype(bf16), x, w, s, p)  # dtype="f32" takes f32 alone


def test_backward_results_in_dy_dtype(rng):
    # one rule for the three functional backwards: every gradient in dy's dtype
    N, C, K = 5, 7, 6
    x, w = rng.standard_normal((N, C)).astype(f32), rng.standard_normal((K, C)).astype(f32)
    dy = rng.standard_normal((N, K)).astype(bf16)
    assert {a.dtype for a in fc.backward(dy, x, w, dtype="bf16")} == {np.dtype(bf16)}
    T, H = 3, 4
    xl = rng.standard_normal((T, N, C)).astype(f32)
    ws = [rng.standard_normal(s).astype(f32) for s in ((4 * H, C), (4 * H, H), (4 * H,))]
    for dd in (f32, bf16):
        xs = xl.astype(bf16 if dd == f32 else f32)
        dyl = rng.standard_normal((T, N, H)).astype(dd)
        got = lstm.backward(dyl, None, None, xs, None, None, *ws, dtype="bf16")
        assert {a.dtype for a in got} == {np.dtype(dd)}


def test_f32_layers_take_bf16_weights(rng):
    # weight_array takes bfloat16 weights set by hand; the f32 Conv2d and LSTM
    # failed on them with "dtype: a bfloat16 w converts to ..." (Linear ran)
    layer = conv.Conv2d(3, 4, 3, padding=1, rng=rng, bias=True)
    x = rng.standard_normal((2, 3, 6, 6)).astype(f32)
    layer.weight = layer.weight.astype(bf16)
    layer.load_weights()
    y = layer.forward(x)
    w = np.asarray(layer.weight, np.float64)
    _close(y, F.conv2d(_t(x), _t(w), _t(layer.bias), padding=1).numpy(),
           F.conv2d(_t(abs(x)), _t(abs(w)), _t(abs(layer.bias)), padding=1).numpy())
    dy = rng.standard_normal(y.shape).astype(f32)
    rdx, rdw, mdx, mdw = _conv_refs(x, w, dy, 1, 1)
    _close(layer.backward(dy), rdx, mdx)
    _close(layer.grad_weight, rdw, mdw)
    layer.step(0.1)
    assert layer.weight.dtype == bf16
    C, K = 5, 4
    m = lstm.LSTM(C, K, rng=rng)
    ref = lstm.LSTM(C, K, init=False)
    m.w_ih, m.w_hh = m.w_ih.astype(bf16), m.w_hh.astype(bf16)
    ref.set_weights(m.w_ih.astype(f32), m.w_hh.astype(f32), m.b)
    m.load_weights()
    xl = rng.standard_normal((3, 2, C)).astype(f32)
    dyl = rng.standard_normal((3, 2, K)).astype(f32)
    for a, b in zip(m.forward(xl)[:1] + m.backward(dyl), ref.forward(xl)[:1] + ref.backward(dyl)):
        assert np.allclose(a, b, rtol=1e-6, atol=1e-6)
    for name in ("grad_w_ih", "grad_w_hh", "grad_b"):
        assert np.allclose(getattr(m, name), getattr(ref, name), rtol=1e-6, atol=1e-6)


def test_step_on_read_only_weights_is_named(rng):
    # the SGD step writes the weights in place: NumPy's "output array is
    # read-only" named nothing, and an MLP had moved its first layers by then
    net = fc.MLP([4, 5, 3], rng=rng)
    x, dy = rng.standard_normal((2, 4)).astype(f32), rng.standard_normal((2, 3)).astype(f32)
    net.forward(x)
    net.backward(dy)
    net.layers[1].weight.setflags(write=False)
    before = net.layers[0].weight.copy()
    with pytest.raises(ValueError, match="^weight: a read-only array"):
        net.step(0.1)
    assert np.array_equal(net.layers[0].weight, before)
    layer = conv.Conv2d(2, 3, 1, rng=rng, bias=True)
    layer.forward(rng.standard_normal((1, 2, 3, 3)).astype(f32))
    layer.backward(np.ones((1, 3, 3, 3), f32))
    layer.bias.setflags(write=False)
    with pytest.raises(ValueError, match="^bias: a read-only array"):
        layer.step(0.1)


# ---------------------------------------------------------------- aliasing

def test_results_fed_back_and_views_held(rng):
    N = int(rng.choice([3, 17, 64, 65]))
    x = rng.standard_normal((N, N)).astype(f32)
    w = (rng.standard_normal((N, N)) / np.sqrt(N)).astype(f32)
    y, ref = x, x.astype(np.float64)
    for _ in range(3):  # y = fc.forward(y, w): the last result as the next input
        y, ref = fc.forward(y, w), ref @ w.astype(np.float64).T
    assert np.allclose(y, ref, rtol=1e-4, atol=1e-4)
    y = fc.forward(x, w)
    snap = y.copy()
    held = [y[::2], y.T, np.asarray(y), memoryview(y), torch.from_numpy(y),
            torch.from_numpy(y)[1:], y.reshape(-1), np.frombuffer(y, f32)]
    del y
    for k in range(3):  # the library recycles results nobody holds: these are held
        fc.forward(x * (k + 2), w)
    want = [snap[::2], snap.T, snap, snap, snap, snap[1:], snap.reshape(-1), snap.reshape(-1)]
    for h, s in zip(held, want):
        assert np.array_equal(np.asarray(h), s)
    dx, dw, db = fc.backward(x, x, w)  # dy is x
    x64 = x.astype(np.float64)
    _close(dx, x64 @ w, abs(x64) @ abs(w))
    _close(dw, x64.T @ x64, abs(x64).T @ abs(x64))
    half = x64[: N // 2 + 1]  # w a view of x
    _close(fc.forward(x, x[: N // 2 + 1]), x64 @ half.T, abs(x64) @ abs(half).T)


@pytest.mark.parametrize("shape", [(2, 4, 9, 9, 3, 1, 1), (1, 16, 8, 8, 3, 1, 1),
                                   (2, 64, 7, 7, 1, 1, 0)])
def test_conv_results_fed_back(rng, shape):
    N, C, H, W, R, s, p = shape
    x = rng.standard_normal((N, C, H, W)).astype(f32)
    w = (rng.standard_normal((C, C, R, R)) / np.sqrt(C * R * R)).astype(f32)
    y, ref = x, _t(x)
    for _ in range(3):
        y, ref = conv.forward(y, w, s, p), F.conv2d(ref, _t(w), stride=s, padding=p)
    assert np.allclose(y, ref.numpy(), rtol=1e-4, atol=1e-4)
    y = conv.forward(x, w, s, p)
    snap, held = y.copy(), torch.from_numpy(y)[:, ::2]
    del y
    conv.forward(2 * x, w, s, p)
    assert np.array_equal(held.numpy(), snap[:, ::2])
    rdx, rdw, mdx, mdw = _conv_refs(x, w, x, s, p)
    dx, dw = conv.backward(x, x, w, s, p)  # dy is x
    _close(dx, rdx, mdx)
    _close(dw, rdw, mdw)


def test_lstm_results_fed_back(rng):
    T, N, K = 3, int(rng.choice([1, 2, 17])), int(rng.choice([1, 4, 16]))
    x = rng.standard_normal((T, N, K)).astype(f32)
    h0 = rng.standard_normal((N, K)).astype(f32)
    w_ih, w_hh = ((rng.standard_normal((4 * K, K)) / np.sqrt(K)).astype(f32) for _ in range(2))
    b = rng.standard_normal(4 * K).astype(f32)
    m = torch.nn.LSTM(K, K).double()
    with torch.no_grad():
        for p, v in zip(m.parameters(), (w_ih, w_hh, b, np.zeros(4 * K))):
            p[...] = _t(v)
    y, (hT, cT) = lstm.forward(x, h0, h0, w_ih, w_hh, b)  # h0 is c0
    ry, (rh, rc) = m(_t(x), (_t(h0[None]), _t(h0[None])))
    for _ in range(2):  # y, hT, cT as the next call's x, h0, c0
        y, (hT, cT) = lstm.forward(y, hT, cT, w_ih, w_hh, b)
        ry, (rh, rc) = m(ry, (rh, rc))
    for a, r in ((y, ry), (hT, rh[0]), (cT, rc[0])):
        assert np.allclose(a, r.detach().numpy(), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- layouts, threads, sizes

def test_layouts_of_every_argument(rng):
    N, C, K = 17, 33, 20
    x, w = rng.standard_normal((N, C)).astype(f32), rng.standard_normal((K, C)).astype(f32)
    b, dy = rng.standard_normal(K).astype(f32), rng.standard_normal((N, K)).astype(f32)
    x64, w64, dy64 = (a.astype(np.float64) for a in (x, w, dy))
    refs = (x64 @ w64.T + b, abs(x64) @ abs(w64).T + abs(b), dy64 @ w64, abs(dy64) @ abs(w64),
            dy64.T @ x64, abs(dy64).T @ abs(x64))
    args = dict(x=x, w=w, b=b, dy=dy)
    for name in args:
        for layout, a in _layouts(args[name]).items():
            print(name, layout)
            v = dict(args, **{name: a})
            _close(fc.forward(v["x"], v["w"], v["b"]), *refs[:2])
            dx, dw, _ = fc.backward(v["dy"], v["x"], v["w"])
            _close(dx, *refs[2:4])
            _close(dw, *refs[4:])
    xc = rng.standard_normal((2, 5, 9, 9)).astype(f32)
    wc = rng.standard_normal((7, 5, 3, 3)).astype(f32)
    yref = F.conv2d(_t(xc), _t(wc), stride=2, padding=2).numpy()
    ymag = F.conv2d(_t(abs(xc)), _t(abs(wc)), stride=2, padding=2).numpy()
    dyc = rng.standard_normal(yref.shape).astype(f32)
    rdx, rdw, mdx, mdw = _conv_refs(xc, wc, dyc, 2, 2)
    args = dict(x=xc, w=wc, dy=dyc)
    for name in args:
        for layout, a in _layouts(args[name]).items():
            print("conv", name, layout)
            v = dict(args, **{name: a})
            _close(conv.forward(v["x"], v["w"], 2, 2), yref, ymag)
            dx, dw = conv.backward(v["dy"], v["x"], v["w"], 2, 2)
            _close(dx, rdx, mdx)
            _close(dw, rdw, mdw)


def test_threads_match_one_thread(rng):
    x = rng.standard_normal((65, 63)).astype(f32)
    w = rng.standard_normal((33, 63)).astype(f32)
    dy = rng.standard_normal((65, 33)).astype(f32)
    xc = rng.standard_normal((2, 16, 8, 8)).astype(f32)
    wc = rng.standard_normal((16, 16, 3, 3)).astype(f32)
    xl, wl = rng.standard_normal((3, 2, 5)).astype(f32), rng.standard_normal((16, 5)).astype(f32)
    wh, bl = rng.standard_normal((16, 4)).astype(f32), rng.standard_normal(16).astype(f32)
    jobs = [lambda: [fc.forward(x, w)], lambda: list(fc.backward(dy, x, w)),
            lambda: [fc.forward(x, w, dtype="bf16")], lambda: [conv.forward(xc, wc, 1, 1)],
            lambda: list(conv.backward(xc, xc, wc, 1, 1)),
            lambda: [lstm.forward(xl, None, None, wl, wh, bl)[0]],
            lambda: list(lstm.backward(np.ones((3, 2, 4), f32), None, None, xl, None, None,
                                       wl, wh, bl))]
    expected = [[a.copy() for a in job()] for job in jobs]
    bad = []

    def work(seed):
        order = np.random.default_rng(seed).integers(len(jobs), size=40)
        for j in order:
            for a, e in zip(jobs[j](), expected[j]):
                if not np.allclose(np.asarray(a, np.float64), np.asarray(e, np.float64),
                                   rtol=1e-5, atol=1e-5):
                    bad.append(int(j))
    threads = [threading.Thread(target=work, args=(int(rng.integers(1 << 30)),))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


def test_small_odd_sizes(rng):
    for _ in range(6):
        N, C, K = (int(v) for v in rng.choice([1, 3, 17, 63, 65], 3))
        x, w = rng.standard_normal((N, C)).astype(f32), rng.standard_normal((K, C)).astype(f32)
        x64, w64 = x.astype(np.float64), w.astype(np.float64)
        _close(fc.forward(x, w), x64 @ w64.T, abs(x64) @ abs(w64).T)
        R, s, p = (int(v) for v in (rng.choice([1, 2, 3]), rng.integers(1, 4), rng.integers(0, 5)))
        H = int(rng.integers(max(1, R - 2 * p), 12))
        xc = rng.standard_normal((1, int(rng.choice([1, 3, 17])), H, H)).astype(f32)
        wc = rng.standard_normal((int(rng.choice([1, 3, 17])), xc.shape[1], R, R)).astype(f32)
        print("conv", xc.shape, wc.shape, s, p)
        _close(conv.forward(xc, wc, s, p), F.conv2d(_t(xc), _t(wc), stride=s, padding=p).numpy(),
               F.conv2d(_t(abs(xc)), _t(abs(wc)), stride=s, padding=p).numpy())
