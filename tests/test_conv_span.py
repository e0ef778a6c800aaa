"""Convolution's pixel blocks that run on across rows (config span, forward and
backward-data; conv_plans.spans_rows) against PyTorch autograd (float64):
random shapes where the layouts allow it (S = 1, stride 1, no column
padding; any R and row padding), random blocks (ragged pixel and channel
blocks), layer and functional forms, both dtypes; and that no other shape spans."""
import numpy as np
import pytest

import brgemm
from primitives import conv
from test_conv import magnitude, reference


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_span_random_shapes(rng, backend, dtype):
    npdt = np.float32 if dtype == "f32" else brgemm.bfloat16
    rel = 1e-5 if dtype == "f32" else 1e-2  # bf16 results are rounded to 8 bits
    for _ in range(4):
        N, C, K = int(rng.integers(1, 4)), int(rng.integers(1, 90)), int(rng.integers(1, 90))
        R, ph = int(rng.integers(1, 4)), int(rng.integers(0, 2))
        H, W = R + int(rng.integers(0, 12)), int(rng.integers(1, 16))
        cfg = {"fwd": {"bc": int(rng.choice([16, 32, 64])), "bk": int(rng.choice([16, 32, 64])),
                       "span": True, "span_q": int(rng.integers(1, 80))},
               "bwd": {"span": True}}
        print(f"N={N} C={C} K={K} H={H} W={W} R={R} ph={ph} {cfg}")
        g = conv.geometry(N, C, K, H, W, R, 1, (1, 1), (ph, 0), config=cfg)
        assert g.span == (True, True) and 1 <= g.bs <= g.P * g.Q
        x = rng.standard_normal((N, C, H, W)).astype(npdt)
        w = rng.standard_normal((K, C, R, 1)).astype(npdt)
        dy = rng.standard_normal((N, K, g.P, g.Q)).astype(npdt)
        want = reference(x, w, dy, 1, (ph, 0))
        mag = magnitude(x, w, dy, 1, (ph, 0))
        layer = conv.Conv2d(C, K, (R, 1), 1, (ph, 0), dtype=dtype, config=cfg, backend=backend,
                            rng=rng)
        layer.weight[...] = w.astype(np.float32)
        y = layer.forward(x)
        dx = layer.backward(dy)
        y_func = conv.forward(x, w, 1, (ph, 0), dtype=dtype, config=cfg, backend=backend)
        dx_func, _ = conv.backward(dy, x, w, 1, (ph, 0), dtype=dtype, config=cfg, backend=backend)
        for name, got, i in (("y", y, 0), ("dx", dx, 1), ("y func", y_func, 0),
                             ("dx func", dx_func, 1)):
            err = np.abs(np.asarray(got, np.float64) - want[i])
            assert np.all(err <= rel * (mag[i] + 1e-3)), name


def test_span_only_where_rows_are_back_to_back():
    on = {"fwd": {"span": True}, "bwd": {"span": True}}
    assert conv.geometry(2, 64, 64, 14, 14, 1, 1, (1, 1), (0, 0), config=on).span == (True, True)
    assert conv.geometry(2, 64, 64, 14, 14, 3, 1, (1, 1), (1, 0), config=on).span == (True, True)
    for R, S, stride, padding in ((3, 3, 1, 1), (1, 1, 2, 0), (1, 3, 1, 0), (1, 1, 1, (0, 1))):
        assert conv.geometry(2, 64, 64, 14, 14, R, S, (stride, stride), padding if
                             isinstance(padding, tuple) else (padding, padding),
                             config=on).span == (False, False)
    assert conv.geometry(2, 64, 64, 14, 14, 1, 1, (1, 1), (0, 0)).span == (False, False)
