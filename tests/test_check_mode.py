"""Check mode (BRGEMM_CHECK=1, on for the whole suite: see conftest.py) fills
every buffer the library allocates or hands out again with NaN, so a region
a plan fails to write shows up in the results. Here a bug is planted -- a
share of the convolution's split weight update with no rows, the bug that
issue 13 found -- and check mode must expose it, where the same run with the
mode off and zeroed memory (fresh pages from the OS are zero) hides it."""
import dataclasses

import numpy as np
import torch

import brgemm
import brgemm.arrays
from primitives import conv, fc
from primitives._config import clear as forget_derived


def test_suite_runs_in_check_mode():
    assert brgemm.arrays.CHECK
    for dtype in (np.float32, brgemm.bfloat16, np.float64):
        assert np.isnan(brgemm.aligned_empty((3, 5), dtype).astype(np.float64)).all()


def _plant_empty_share(monkeypatch, request):
    real = conv.geometry

    def planted(*args, **kwargs):
        g = real(*args, **kwargs)
        # one row per share and one share more than rows: the last one has none
        return dataclasses.replace(g, splits=g.N * g.P + 1)
    monkeypatch.setattr(conv, "geometry", planted)
    # a functional call decides its geometry and plans once per call signature
    # (primitives._config.cached): forget them now, and the planted ones after
    forget_derived()
    request.addfinalizer(forget_derived)


def test_check_mode_exposes_an_unwritten_share(rng, monkeypatch, request):
    # a 1x1 layer of stride 2: the row nest's shares (at stride 1 the update is
    # conv.pointwise_update's, which splits its reduction its own way)
    x = rng.standard_normal((2, 16, 5, 5)).astype(np.float32)
    w = rng.standard_normal((8, 16, 1, 1)).astype(np.float32)
    dy = rng.standard_normal((2, 8, 3, 3)).astype(np.float32)
    want = torch.nn.grad.conv2d_weight(torch.tensor(x, dtype=torch.float64), w.shape,
                                       torch.tensor(dy, dtype=torch.float64), stride=2).numpy()
    mag = torch.nn.grad.conv2d_weight(torch.tensor(np.abs(x), dtype=torch.float64), w.shape,
                                      torch.tensor(np.abs(dy), dtype=torch.float64),
                                      stride=2).numpy()
    _, dw = conv.backward(dy, x, w, 2)
    assert np.all(np.abs(dw - want) <= 1e-5 * mag)          # the real geometry is right

    _plant_empty_share(monkeypatch, request)
    _, dw = conv.backward(dy, x, w, 2)
    assert np.isnan(dw).all()   # every weight sums in the empty share's NaN slice

    # the same bug with check mode off, on memory that happens to be zero: invisible
    monkeypatch.setattr(brgemm.arrays, "CHECK", False)

    class Zeroed:
        def get(self, name, shape, dtype):
            return np.zeros(shape, dtype)
    monkeypatch.setattr(conv, "_scratch", Zeroed())
    _, dw = conv.backward(dy, x, w, 2)
    assert np.all(np.abs(dw - want) <= 1e-5 * mag)


def test_pools_hand_out_nan_every_time():
    """A reused buffer must be written anew by each user: in check mode a
    second hand-out is NaN again, not what the first user left there."""
    a = fc._buffer("check-mode-test", (4, 4), np.float32)
    a[...] = 1.0
    b = fc._buffer("check-mode-test", (4, 4), np.float32)
    assert b is a and np.isnan(b).all()
    pool = brgemm.arrays.Recycler()
    r = pool.empty("y", (3, 3), np.float32)
    r[...] = 1.0
    address = r.ctypes.data
    del r
    r = pool.empty("y", (3, 3), np.float32)
    assert r.ctypes.data == address and np.isnan(r).all()
