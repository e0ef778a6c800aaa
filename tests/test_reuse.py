"""reuse= (blocked weights kept across functional calls) and lstm.Saved: a kept
copy is used only while provably unchanged (torch version counters) or
promised so (reuse.Key); results always match the plain call."""
import numpy as np
import pytest
import torch

from primitives import conv, fc, lstm, reuse


def close(a, b, scale):
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-5 * scale)


def test_fc_key_reuses_until_the_version_changes(rng):
    N, C, K = (int(v) for v in rng.integers(1, 70, 3))
    x, w = (rng.standard_normal(s).astype(np.float32) for s in ((N, C), (K, C)))
    key = reuse.Key("fc-test", 0)
    y0 = fc.forward(x, w, reuse=key).copy()
    close(y0, x @ w.T, C)
    w *= 2  # changed in place, same key: the caller broke the promise, the copy is kept
    close(fc.forward(x, w, reuse=key), y0, C)
    close(fc.forward(x, w, reuse=reuse.Key("fc-test", 1)), x @ w.T, C)  # bumped: rebuilt
    w2 = w.copy()  # another array under the same key and version: rebuilt
    close(fc.forward(x, w2, reuse=reuse.Key("fc-test", 1)), x @ w2.T, C)
    dy = rng.standard_normal((N, K)).astype(np.float32)
    dx, dw, db = fc.backward(dy, x, w, reuse=reuse.Key("fc-test", 1))
    close(dx, dy @ w, K)
    close(dw, dy.T @ x, N)
    close(db, dy.sum(0), N)


def test_torch_versions(rng):
    C, K, N = 24, 40, 8
    t = torch.from_numpy(rng.standard_normal((K, C)).astype(np.float32))
    x = rng.standard_normal((N, C)).astype(np.float32)
    close(fc.forward(x, t.numpy(), reuse=reuse.tensors(t)), x @ t.numpy().T, C)
    with torch.no_grad():
        t.mul_(3)  # bumps t._version: the kept copy is stale and not used
    for _ in range(2):  # (the call after a change runs without a copy; the next keeps one)
        close(fc.forward(x, t.numpy(), reuse=reuse.tensors(t)), x @ t.numpy().T, C)
    before = reuse.nbytes()
    u = t.clone()  # same contents, another tensor: kept apart
    close(fc.forward(x, u.numpy(), reuse=reuse.tensors(u)), x @ u.numpy().T, C)
    assert reuse.nbytes() > before
    del u
    fc.forward(x, t.numpy(), reuse=reuse.tensors(t))  # a dead tensor's copy is dropped
    assert reuse.nbytes() <= before



@pytest.mark.parametrize("make", [
    lambda p: torch.optim.Adam(p, lr=0.1, fused=True),
    lambda p: torch.optim.SGD(p, lr=0.5, fused=True),
    lambda p: torch.optim.Adam(p, lr=0.1)], ids=["adam fused", "sgd fused", "adam"])
def test_torch_optimizer_steps_make_copies_stale(rng, make):
    """A fused step writes the weights without bumping their version
    counters: any torch.optim step counts as a change."""
    N, C, K = (int(v) for v in rng.integers(8, 70, 3))
    w = torch.nn.Parameter(torch.from_numpy(rng.standard_normal((K, C)).astype(np.float32)))
    x = rng.standard_normal((N, C)).astype(np.float32)
    opt = make([w])
    for step in range(3):
        for _ in range(2):  # the second call finds the copy the first kept
            close(fc.forward(x, w.detach().numpy(), reuse=reuse.tensors(w)),
                  x @ w.detach().numpy().T, C)
        w.grad = torch.from_numpy(rng.standard_normal((K, C)).astype(np.float32))
        opt.step()

def test_conv_key(rng):
    x = rng.standard_normal((2, 5, 9, 8)).astype(np.float32)
    w = rng.standard_normal((7, 5, 3, 3)).astype(np.float32)
    dy = rng.standard_normal((2, 7, 9, 8)).astype(np.float32)
    tx, tw = torch.from_numpy(x).requires_grad_(), torch.from_numpy(w).requires_grad_()
    ty = torch.nn.functional.conv2d(tx, tw, padding=1)
    ty.backward(torch.from_numpy(dy))
    for version in (0, 0, 1):
        key = reuse.Key("conv-test", version)
        close(conv.forward(x, w, 1, 1, reuse=key), ty.detach().numpy(), 45)
        dx, dw = conv.backward(dy, x, w, 1, 1, reuse=key)
        close(dx, tx.grad.numpy(), 63)
        close(dw, tw.grad.numpy(), 144)


def test_conv_pointwise_key(rng):
    """A 1x1 layer's backward-data keeps its w^T tiles under the key (the
    forward reads w in place): rebuilt when the version moves, after w
    changed in place."""
    x = rng.standard_normal((2, 32, 16, 16)).astype(np.float32)
    w0 = rng.standard_normal((48, 32, 1, 1)).astype(np.float32)
    w = w0.copy()
    dy = rng.standard_normal((2, 48, 16, 16)).astype(np.float32)
    g = conv.geometry(2, 32, 48, 16, 16, 1, 1, (1, 1), (0, 0))
    assert conv.pointwise(g, "f32", "cpu")  # the path under test
    for version in (0, 0, 1, 1):
        w[...] = w0 * (-0.5 if version else 1.0)  # changed in place: the version moves
        tx, tw = torch.from_numpy(x).requires_grad_(), torch.from_numpy(w.copy()).requires_grad_()
        torch.nn.functional.conv2d(tx, tw).backward(torch.from_numpy(dy))
        key = reuse.Key("conv-pointwise-test", version)
        close(conv.forward(x, w, reuse=key), torch.nn.functional.conv2d(tx, tw).detach().numpy(), 32)
        dx, dw = conv.backward(dy, x, w, reuse=key)
        close(dx, tx.grad.numpy(), 48)
        close(dw, tw.grad.numpy(), 512)


def _training_then_inference(step, steps=4):
    """step(t, check) runs one call pattern on weights t (a torch tensor) and
    returns the weights' gradient; check compares with the reference. While t
    changes between calls (a training loop: SGD steps) no copy is kept past
    the first; once it stops changing, the next call keeps one again."""
    reuse.clear()
    sizes = []
    for i in range(steps):
        dw = step()
        sizes.append(reuse.nbytes())
        step.weights.sub_(torch.from_numpy(dw) * 1e-3)  # in place: bumps the version
    assert sizes[0] > 0 and sizes[1:] == [0] * (steps - 1), sizes
    step(), step()  # unchanged weights from here on
    assert reuse.nbytes() > 0


def test_changing_weights_keep_no_copies(rng):
    """Weights that change between calls (reuse.tensors of a parameter SGD
    updates) are not copied into fresh memory call after call: the calls run
    as without reuse=, and stay right."""
    N, C, K = (int(v) for v in rng.integers(8, 80, 3))
    x, dy = (rng.standard_normal(s).astype(np.float32) for s in ((N, C), (N, K)))
    t = torch.from_numpy(rng.standard_normal((K, C)).astype(np.float32))

    def fc_step():
        w = t.numpy()
        close(fc.forward(x, w, reuse=reuse.tensors(t)), x @ w.T, C)
        dx, dw, _ = fc.backward(dy, x, w, reuse=reuse.tensors(t))
        close(dx, dy @ w, K)
        return dw.copy()
    fc_step.weights = t
    _training_then_inference(fc_step)

    Ni, Ci, Ki, H, W = 2, *(int(v) for v in rng.integers(3, 20, 2)), *(int(v) for v in rng.integers(5, 12, 2))
    xi = rng.standard_normal((Ni, Ci, H, W)).astype(np.float32)
    dyi = rng.standard_normal((Ni, Ki, H, W)).astype(np.float32)
    tc = torch.from_numpy(rng.standard_normal((Ki, Ci, 3, 3)).astype(np.float32))

    def conv_step():
        tx, tw = torch.from_numpy(xi).requires_grad_(), tc.clone().requires_grad_()
        ty = torch.nn.functional.conv2d(tx, tw, padding=1)
        ty.backward(torch.from_numpy(dyi))
        close(conv.forward(xi, tc.numpy(), 1, 1, reuse=reuse.tensors(tc)), ty.detach().numpy(),
              9 * Ci)
        dx, dw = conv.backward(dyi, xi, tc.numpy(), 1, 1, reuse=reuse.tensors(tc))
        close(dx, tx.grad.numpy(), 9 * Ki)
        close(dw, tw.grad.numpy(), Ni * H * W)
        return dw.copy()
    conv_step.weights = tc
    _training_then_inference(conv_step)


def lstm_data(rng, T, N, C, K):
    r = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    return dict(x=r(T, N, C), h0=r(N, K), c0=r(N, K), w_ih=r(4 * K, C) / 4, w_hh=r(4 * K, K) / 4,
                b=r(4 * K)), dict(dy=r(T, N, K), dhT=r(N, K), dcT=r(N, K))


def test_lstm_saved_and_reuse(rng):
    T, N, C, K = 3, 5, 7, 6
    a, d = lstm_data(rng, T, N, C, K)
    plain_y = lstm.forward(**a)[0].copy()
    plain = [g.copy() for g in lstm.backward(**d, **a)]
    saved, key = lstm.Saved(), reuse.Key("lstm-test", 0)
    close(lstm.forward(**a, reuse=key, saved=saved)[0], plain_y, C + K)
    for got, ref in zip(lstm.backward(**d, **a, reuse=key, saved=saved), plain):
        close(got, ref, T * N * (C + K))
    # other arrays than the saved forward's: the backward runs the forward itself
    b, _ = lstm_data(rng, T, N, C, K)
    lstm.forward(**a, saved=saved)
    fresh = lstm.backward(**d, **b)
    for got, ref in zip(lstm.backward(**d, **b, saved=saved), fresh):
        close(got, ref, T * N * (C + K))


def test_bad_arguments(rng):
    x = np.ones((2, 3), np.float32)
    with pytest.raises(TypeError, match="^reuse"):
        fc.forward(x, x, reuse="w1")
    with pytest.raises(TypeError, match="^reuse"):
        reuse.tensors(x)
    with pytest.raises(TypeError, match="^reuse"):
        conv.forward(np.ones((1, 1, 3, 3), np.float32), np.ones((1, 1, 1, 1), np.float32), reuse=1)
    a, _ = lstm_data(rng, 2, 2, 3, 4)
    with pytest.raises(TypeError, match="^saved"):
        lstm.forward(**a, saved={})
    with pytest.raises(TypeError, match="^reuse"):
        lstm.forward(**a, reuse=object())
    for name, version in (([1], 0), ("w", {"v": 1})):  # Key's arguments must be hashable
        with pytest.raises(TypeError, match="^reuse: Key's (name|version)"):
            reuse.Key(name, version)
