"""conv's `pointwise` config key (fwd: the forward, bwd: backward-data): 1x1
layers taken off the pointwise plans onto the other layers' routes, one pass
at a time, against float64."""
import dataclasses

import numpy as np
import pytest

import brgemm
from primitives import conv
from tests.test_conv import magnitude, reference


def test_pointwise_key_turns_the_routes_off(rng):
    """The config's `pointwise` (fwd: the forward, bwd: backward-data) takes
    a 1x1 layer off the pointwise plans onto the other layers' routes, one
    pass at a time; conv.pointwise says so, the routes follow, and every
    result still matches float64. Random sizes and settings."""
    for it in range(4):
        N, H, W = int(rng.integers(1, 3)), int(rng.integers(14, 24)), int(rng.integers(14, 24))
        if 16 * -(-H * W // 16) - H * W > H * W // 16:  # too many empty lanes: not pointwise
            H += 1
        C, K = 16 * int(rng.integers(1, 4)), 16 * int(rng.integers(1, 4))
        fwd_on, bwd_on = bool(it % 2), bool(it // 2)
        cfg = {"fwd": {"bc": 16, "bk": 16, "pointwise": fwd_on, "columns": bool(rng.integers(2))},
               "bwd": {"pointwise": bwd_on}}
        print(f"N={N} C={C} K={K} H={H} W={W} {cfg}")
        g = conv.geometry(N, C, K, H, W, 1, 1, (1, 1), (0, 0), config=cfg)
        gt = dataclasses.replace(g, C=g.K, K=g.C, bc=g.bk, bk=g.bc)
        assert g.pointwise == (fwd_on, bwd_on)
        assert bool(conv.pointwise(g, "f32", "cpu")) == fwd_on
        assert bool(conv.pointwise(gt, "f32", "cpu", "bwd")) == bwd_on
        if not fwd_on:  # bf16's forward on x's VNNI pairs is a pointwise plan too
            x16, w16 = (rng.standard_normal(s).astype(brgemm.bfloat16)
                        for s in ((N, C, H, W), (K, C, 1, 1)))
            assert conv.pointwise_pairs(g, "bf16", "cpu", x16, w16, None) is None
        x = rng.standard_normal((N, C, H, W)).astype(np.float32)
        w = rng.standard_normal((K, C, 1, 1)).astype(np.float32)
        dy = rng.standard_normal((N, K, H, W)).astype(np.float32)
        dims = (N, C, K, H, W, 1, 1)
        fwd = conv._route("fwd", dims, (1, 1), (0, 0), cfg, "f32", "cpu", None, x, w)
        bwd = conv._route("bwd", dims, (1, 1), (0, 0), cfg, "f32", "cpu", None, x, w, dy)
        assert (fwd[1] == "pointwise") == fwd_on and (bwd[2][0] == "pointwise") == bwd_on
        y = conv.forward(x, w, config=cfg)
        dx, dw = conv.backward(dy, x, w, config=cfg)
        for got, want, mag in zip((y, dx, dw), reference(x, w, dy, 1, 0),
                                  magnitude(x, w, dy, 1, 0)):
            assert got.dtype == np.float32 and got.shape == want.shape
            assert np.all(np.abs(got - want) <= 1e-5 * mag + 1e-30)
    with pytest.raises(ValueError, match="pass_"):
        conv.pointwise(g, "f32", "cpu", "upd")
