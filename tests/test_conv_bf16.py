"""conv's bf16 functional forward where it reads w in place: 1x1 layers with
x's channel rows in VNNI pairs (conv.pointwise_pairs), and small images with
many output channels on x's im2col tiles (conv.columns); against float64
(PyTorch) within f32 accumulation and one bf16 rounding of the result."""
import numpy as np

import brgemm
from brgemm.info import kernel_path
from primitives import conv
from tests.test_conv import magnitude, reference
from tolerance import assert_close, linear


def test_pointwise_pairs_forward(rng):
    """bf16 1x1 forward on bf16 x and w (conv.pointwise_pairs): w read in place,
    x's channel rows copied into VNNI pairs, y stored in bf16 by the plan.
    Random sizes, K ragged against its block, a ragged last pixel block, random
    call sizes and pixel blocks; against float64 within f32 accumulation and
    one bf16 rounding of the result. Not where w is f32 or the config's
    pointwise_pairs is off."""
    for it in range(6):
        N, H, W = int(rng.integers(1, 4)), int(rng.integers(14, 41)), int(rng.integers(14, 41))
        while 16 * -(-H * W // 16) - H * W > H * W // 16:  # too many empty lanes: not
            H += 1                                         # pointwise (15 x 15 takes two)
        C, K = 32 * int(rng.integers(1, 5)), int(rng.integers(1, 80))
        kb, bp = int(rng.choice([1, 2, 32])), int(rng.choice([32, 64, 112]))
        cfg = {"fwd": {"bc": 32, "bk": 16, "pointwise_kb": kb, "pointwise_bp": bp,
                       "pointwise_pairs": True}}  # the path on every machine (off on AMX)
        print(f"N={N} C={C} K={K} H={H} W={W} pointwise_kb={kb} pointwise_bp={bp}")
        x = rng.standard_normal((N, C, H, W)).astype(brgemm.bfloat16)
        w = rng.standard_normal((K, C, 1, 1)).astype(brgemm.bfloat16)
        g = conv.geometry(N, C, K, H, W, 1, 1, (1, 1), (0, 0), config=cfg,
                          path=kernel_path("bf16", "cpu"))
        assert conv.pointwise_pairs(g, "bf16", "cpu", x, w, None)  # the path under test
        assert not conv.pointwise_pairs(g, "bf16", "cpu", x, w.astype(np.float32), None)
        off = conv.geometry(N, C, K, H, W, 1, 1, (1, 1), (0, 0), path=kernel_path("bf16", "cpu"),
                            config={"fwd": dict(cfg["fwd"], pointwise_pairs=False)})
        assert not conv.pointwise_pairs(off, "bf16", "cpu", x, w, None)
        y = conv.forward(x, w, dtype="bf16", config=cfg)
        assert y.dtype == brgemm.bfloat16
        xd, wd = (a.astype(np.float64)[..., 0, 0] if a is w else a.astype(np.float64)
                  for a in (x, w))
        want = linear(np.einsum("kc,nchw->nkhw", wd, xd),
                      np.einsum("kc,nchw->nkhw", np.abs(wd), np.abs(xd)))
        assert_close("y", y, want, rounded=True, context=f"it {it}")


def test_columns_forward_bf16(rng):
    """bf16 forward on small images with many output channels (conv.columns):
    w (bf16) read in place, x (bf16, or f32 rounded on the way) copied into
    im2col tiles, in VNNI pairs where the kernel reads them so (a ragged
    last depth of odd size: plain tiles), y rounded into NCHW unless x is
    f32. Random sizes, kernels of more than one tap, strides and padding;
    against float64 within f32 accumulation and one bf16 rounding of the
    result. A 1x1 layer's bf16 forward does not take it."""
    for it in range(6):
        N, H, W = int(rng.integers(1, 3)), int(rng.integers(1, 9)), int(rng.integers(2, 9))
        R, S = int(rng.integers(1, min(H, 3) + 1)), int(rng.integers(1, min(W, 3) + 1))
        S += R * S == 1  # more than one tap (a 1x1 layer takes another path)
        stride, padding = int(rng.integers(1, 3)), int(rng.integers(0, 2))
        P, Q = (H + 2 * padding - R) // stride + 1, (W + 2 * padding - S) // stride + 1
        C, K = int(rng.integers(1, 80)), 2 * N * P * Q + int(rng.integers(0, 64))
        x_dtype = brgemm.bfloat16 if it % 2 else np.float32
        print(f"N={N} C={C} K={K} H={H} W={W} R={R} S={S} stride={stride} padding={padding} "
              f"x {np.dtype(x_dtype).name}")
        x = rng.standard_normal((N, C, H, W)).astype(np.float32).astype(x_dtype)
        w = rng.standard_normal((K, C, R, S)).astype(brgemm.bfloat16)
        g = conv.geometry(N, C, K, H, W, R, S, (stride,) * 2, (padding,) * 2,
                          path=kernel_path("bf16", "cpu"))
        assert conv.columns(g, "bf16", "cpu")  # the path under test
        y = conv.forward(x, w, stride, padding, dtype="bf16")
        assert y.dtype == x_dtype and y.shape == (N, K, P, Q)
        xd = x.astype(brgemm.bfloat16).astype(np.float64)
        (want, _, _), (mag, _, _) = (f(xd, w.astype(np.float64), np.ones((N, K, P, Q)), stride,
                                       padding) for f in (reference, magnitude))
        assert_close("y", y, linear(want, mag), rounded=x_dtype != np.float32,
                     context=f"it {it}")
    x, w = np.ones((1, 64, 4, 4), brgemm.bfloat16), np.ones((128, 64, 1, 1), brgemm.bfloat16)
    g = conv.geometry(1, 64, 128, 4, 4, 1, 1, (1, 1), (0, 0), path=kernel_path("bf16", "cpu"),
                      config={"fwd": {"pointwise_pairs": False}})  # as on AMX
    assert conv.columns(g, "bf16", "cpu")
    assert conv._forward_route(g, "bf16", "cpu", None, x, w, False)[1] != "columns"


def test_nchw_stores_bf16(rng):
    """bf16 x, w and dy on 3x3 layers: the forward's and backward-data's plans
    store y and dx into the NCHW results rounded to bf16 from their epilogues
    (conv_in_place.stores_nchw, and stores_nchw_dx at stride 1); random
    sizes, K and C whole blocks of 16, stride 1 or 2, padding 0 or 1."""
    for it in range(4):
        N, H, W = int(rng.integers(1, 3)), int(rng.integers(3, 20)), int(rng.integers(3, 20))
        C, K = 16 * int(rng.integers(1, 4)), 16 * int(rng.integers(1, 4))
        stride, padding = 1 + it % 2, int(rng.integers(0, 2))
        cfg = {"fwd": {"bc": 16, "bk": 16}}
        print(f"N={N} C={C} K={K} H={H} W={W} stride={stride} padding={padding}")
        x, w = (rng.standard_normal(s).astype(brgemm.bfloat16) for s in ((N, C, H, W),
                                                                          (K, C, 3, 3)))
        g = conv.geometry(N, C, K, H, W, 3, 3, (stride,) * 2, (padding,) * 2, config=cfg,
                          path=kernel_path("bf16", "cpu"))
        assert conv.stores_nchw(g, "bf16", "cpu", x.dtype)  # the paths under test
        assert conv.stores_nchw_dx(g, "bf16", "cpu", x.dtype) == (g.sw == 1)  # (sw: clamped)
        y = conv.forward(x, w, stride, padding, dtype="bf16", config=cfg)
        dy = rng.standard_normal(y.shape).astype(brgemm.bfloat16)
        dx, _ = conv.backward(dy, x, w, stride, padding, dtype="bf16", config=cfg)
        assert y.dtype == dx.dtype == brgemm.bfloat16
        args = [a.astype(np.float64) for a in (x, w, dy)] + [stride, padding]
        (want_y, want_dx, _), (mag_y, mag_dx, _) = reference(*args), magnitude(*args)
        assert_close("y", y, linear(want_y, mag_y), rounded=True, context=f"it {it}")
        assert_close("dx", dx, linear(want_dx, mag_dx), rounded=True, context=f"it {it}")
