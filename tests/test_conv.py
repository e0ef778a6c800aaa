"""Convolution against PyTorch autograd (float64): forward, backward-data and
weight update on a spread of shapes (ResNet-50 layers at reduced size, the 7x7
stride-2 first layer with C=3, odd channel counts, asymmetric stride and
padding), both dtypes, and bad input."""
import dataclasses

import numpy as np
import pytest
import torch

import brgemm
from primitives import conv, conv_plans

CASES = [  # N, C, K, H, W, R, S, stride, padding
    (2, 3, 64, 32, 32, 7, 7, 2, 3),           # conv1 at reduced size
    (2, 64, 64, 14, 14, 3, 3, 1, 1),          # res2a_branch2b
    (2, 64, 256, 14, 14, 1, 1, 1, 0),         # res2a_branch1
    (2, 256, 128, 14, 14, 1, 1, 2, 0),        # res3a_branch2a, stride 2
    (1, 128, 128, 9, 9, 3, 3, 1, 1),
    (2, 24, 48, 11, 13, 5, 3, (3, 2), (2, 1)),  # asymmetric
    (1, 112, 208, 7, 7, 3, 3, 1, 1),          # odd channel counts
    (1, 16, 96, 9, 8, 4, 2, (4, 1), (0, 1)),  # stride 4
    (3, 3, 5, 6, 6, 6, 6, 1, 0),              # kernel = input
    (1, 528, 16, 5, 5, 1, 1, 1, 0),
]


def reference(x, w, dy, stride, padding):
    X = torch.tensor(np.asarray(x, np.float64), requires_grad=True)
    W = torch.tensor(np.asarray(w, np.float64), requires_grad=True)
    Y = torch.nn.functional.conv2d(X, W, stride=stride, padding=padding)
    Y.backward(torch.tensor(np.asarray(dy, np.float64)))
    return Y.detach().numpy(), X.grad.numpy(), W.grad.numpy()


def magnitude(x, w, dy, stride, padding):
    """Sums of |terms|: what f32 rounding error scales with, per output."""
    ax, aw, ady = (torch.tensor(np.abs(np.asarray(a, np.float64))) for a in (x, w, dy))
    Y = torch.nn.functional.conv2d(ax, aw, stride=stride, padding=padding)
    dX = torch.nn.grad.conv2d_input(ax.shape, aw, ady, stride=stride, padding=padding)
    dW = torch.nn.grad.conv2d_weight(ax, aw.shape, ady, stride=stride, padding=padding)
    return [t.numpy() for t in (Y, dX, dW)]


def test_pointwise_forward_backward(rng):
    """1x1, stride 1, no padding on images of 14 x 14 pixels or more: the
    forward reads w and x in place and writes y in place (conv.pointwise),
    and backward-data, the pointwise forward of w^T (w read in place as the
    kernel's transposed A, or its class tiles where pointwise_classes says
    so), reads dy in place and writes dx in place. Random sizes, K and C
    ragged against their blocks, a ragged last pixel block; random call sizes
    and pixel blocks (pointwise_kb, pointwise_bp: one block a call up to the
    whole reduction); the forward on x itself and on its copy on whole-line
    rows (pointwise_rows); w a strided view in one case of four."""
    for it in range(6):
        N, H, W = int(rng.integers(1, 4)), int(rng.integers(14, 41)), int(rng.integers(14, 41))
        if 16 * -(-H * W // 16) - H * W > H * W // 16:  # too many empty lanes: not pointwise
            H += 1
        C, K = 16 * int(rng.integers(1, 5)), int(rng.integers(1, 80))
        if it % 2:  # backward-data's turn: K whole blocks, C ragged
            C, K = K, C
        kb, bp = int(rng.choice([1, 8, 32, 1024])), int(rng.choice([32, 64, 112]))
        rows = bool(it // 2 % 2)  # the forward on x's copy on whole-line rows, or on x
        print(f"N={N} C={C} K={K} H={H} W={W} pointwise_kb={kb} pointwise_bp={bp} rows={rows}")
        cfg = {"fwd": {"bc": 16, "bk": 16, "pointwise_kb": kb, "pointwise_bp": bp,
                       "pointwise_rows": rows}}
        g = conv.geometry(N, C, K, H, W, 1, 1, (1, 1), (0, 0), config=cfg)
        assert (g.pointwise_kb, g.pointwise_bp) == (kb, bp)
        gt = dataclasses.replace(g, C=g.K, K=g.C, bc=g.bk, bk=g.bc)
        assert conv.pointwise(gt if it % 2 else g, "f32", "cpu") <= bp  # the path under test
        x = rng.standard_normal((N, C, H, W)).astype(np.float32)
        w = rng.standard_normal((K, C, 1, 1)).astype(np.float32)
        if it % 4 == 3:
            w = np.repeat(w, 2, axis=1)[:, ::2]
        assert conv.pointwise_rows(g) == (16 * -(-H * W // 16) if rows and H * W % 16 else None)
        y = conv.forward(x, w, config=cfg)
        dy = rng.standard_normal(y.shape).astype(np.float32)
        dx, dw = conv.backward(dy, x, w, config=cfg)
        for got, want, mag in zip((y, dx, dw), reference(x, w, dy, 1, 0), magnitude(x, w, dy, 1, 0)):
            assert got.dtype == np.float32 and got.shape == want.shape
            assert np.all(np.abs(got - want) <= 1e-5 * mag + 1e-30)


def test_pointwise_update(rng):
    """The weight update of 1x1 layers with stride 1 and no padding
    (conv.pointwise_update): dy read in place, x's pixels transposed into
    tiles of bc channels (C whole blocks) or of all C, dW written in w's
    layout, its reduction split into shares or not; any image size (7 x 7,
    ragged pixel blocks past 256 pixels); layers that narrow the channels on
    large images the other way round (conv.pointwise_copies_dy: x in place,
    dy copied, dW^T transposed), or with x a strided view, not; forward and
    backward-data on whichever path they take; dW again with the config's
    pointwise_images (one share per image), and with its pointwise_shares
    (a random count, up to one past the units). Against float64."""
    for it in range(6):
        N, H, W = int(rng.integers(1, 4)), int(rng.integers(1, 24)), int(rng.integers(1, 24))
        C, K = int(rng.integers(1, 90)), int(rng.integers(1, 90))
        if it % 2:  # C whole blocks: x's tiles bc wide
            C = 16 * int(rng.integers(1, 5))
        if it == 4:  # 323 pixels: blocks of 256 and a ragged last one
            H, W = 17, 19
        if it in (2, 5):  # C > K on large images: dy is copied, dW^T transposed after (in
            # rows of 16 where 16 divides K, else as one tile)
            C, K, H, W = 16 * int(rng.integers(3, 6)), 16 if it == 2 else int(rng.integers(1, 16)), \
                16, 18
        cfg = {"fwd": {"bc": 16 * int(rng.integers(1, 5)), "bk": 16 * int(rng.integers(1, 5))}}
        print(f"N={N} C={C} K={K} H={H} W={W} {cfg}")
        g = conv.geometry(N, C, K, H, W, 1, 1, (1, 1), (0, 0), config=cfg)
        x = rng.standard_normal((N, C, H, W)).astype(np.float32)
        if it == 5:  # x a strided view: not read in place, so x is copied after all
            x = rng.standard_normal((N, C, H, 2 * W)).astype(np.float32)[..., ::2]
        w = rng.standard_normal((K, C, 1, 1)).astype(np.float32)
        dy = rng.standard_normal((N, K, H, W)).astype(np.float32)
        bp, shares = conv.pointwise_update(g, "f32", "cpu", dy)  # the path under test
        assert conv.pointwise_copies_dy(g) or it not in (2, 5)
        print(f"pixel block {bp}, {shares} shares, x tiles {conv.pointwise_x_block(g)} wide, "
              f"copies dy: {conv.pointwise_copies_dy(g)}")
        y = conv.forward(x, w, config=cfg)
        dx, dw = conv.backward(dy, x, w, config=cfg)
        # and with the config's pointwise_images: one share per image, images outermost
        images = {**cfg, "upd": {"pointwise_images": True}}
        gi = conv.geometry(N, C, K, H, W, 1, 1, (1, 1), (0, 0), config=images)
        assert conv.pointwise_update(gi, "f32", "cpu", dy) == (bp, N)
        dwi = conv.backward(dy, x, w, config=images, need_dx=False)[1]
        # and with pointwise_shares (over pointwise_images): at most that many
        # shares, none empty, images outermost
        units = N * -(-H * W // bp)
        asked = int(rng.integers(1, units + 2))
        shared = {**cfg, "upd": {"pointwise_images": True, "pointwise_shares": asked}}
        gs = conv.geometry(N, C, K, H, W, 1, 1, (1, 1), (0, 0), config=shared)
        bps, parts = conv.pointwise_update(gs, "f32", "cpu", dy)
        print(f"pointwise_shares {asked}: {parts} shares of {units} units")
        assert bps == bp and 1 <= parts <= min(units, asked)
        assert (parts - 1) * -(-units // parts) < units  # the last share has units
        dws = conv.backward(dy, x, w, config=shared, need_dx=False)[1]
        want, mag = reference(x, w, dy, 1, 0), magnitude(x, w, dy, 1, 0)
        for got, i in zip((y, dx, dw, dwi, dws), (0, 1, 2, 2, 2)):
            assert got.dtype == np.float32 and got.shape == want[i].shape
            assert np.all(np.abs(got - want[i]) <= 1e-5 * mag[i] + 1e-30)
    g = conv.geometry(2, 64, 64, 9, 9, 1, 1, (1, 1), (0, 0))
    assert not conv.pointwise_update(g, "f32", "cpu", np.zeros((2, 64, 9, 18), np.float32)[..., ::2])


def test_forward_stores_nchw(rng):
    """The forward's plan that stores each summed tile into the NCHW result
    from its epilogue, every task summing in one slot (conv.nchw_plan): random
    sizes with K whole blocks, ragged pixel blocks, strides and padding, the
    loop orders that make p or n parallel or sequential, one call or several
    per tile, tiles of a task taking each call's weights in turn (w_reuse), x a
    strided view."""
    done = 0
    while done < 5:
        N, C, H, W, R, S = (int(v) for v in rng.integers(1, 12, 6))
        stride, padding = tuple(int(v) for v in rng.integers(1, 3, 2)), \
            tuple(int(v) for v in rng.integers(0, 2, 2))
        if R > H + 2 * padding[0] or S > W + 2 * padding[1]:
            continue
        spec = ("NKpq", "KNpq", "NKPq", "nKPq", "NKPQ")[done]
        K = 16 * int(rng.integers(1, 4))
        cfg = {"fwd": {"bc": 16, "bk": 16, "bq": int(rng.integers(1, 6)), "spec": spec,
                       "call_kb": int(rng.choice([1, 32])),  # 1: a call per tap
                       "w_reuse": int(rng.choice([1, 2, 3, 8]))}}  # tiles sharing each call's w
        g = conv.geometry(N, C, K, H, W, R, S, stride, padding, config=cfg)
        if conv.columns(g, "f32", "cpu") or conv.pointwise(g, "f32", "cpu"):
            continue
        assert conv.stores_nchw(g, "f32", "cpu", np.float32)  # the path under test
        done += 1
        print(f"N={N} C={C} K={K} H={H} W={W} kernel={R, S} stride={stride} "
              f"padding={padding} {cfg}")
        x = rng.standard_normal((N, C, H, 2 * W)).astype(np.float32)[..., ::2]
        w = rng.standard_normal((K, C, R, S)).astype(np.float32)
        y = conv.forward(x, w, stride, padding, config=cfg)
        dy = np.zeros(y.shape, np.float32)
        want, mag = reference(x, w, dy, stride, padding)[0], magnitude(x, w, dy, stride,
                                                                      padding)[0]
        assert y.dtype == np.float32 and y.shape == want.shape
        assert np.all(np.abs(y - want) <= 1e-5 * mag + 1e-30)


def test_backward_stores_nchw(rng):
    """Backward-data's plan that stores each summed block of dx into the NCHW
    result from its epilogue, a slot per task (conv.nchw_dx_plan), and every
    other case the update reading dy in place (conv.reads_dy): random sizes
    with C whole blocks and stride 1 across, any stride down, padding, the
    loop orders, one call or several per block, blocks of a task taking each
    call's weights in turn (w_reuse), dy a strided view or not."""
    done = 0
    while done < 4:
        N, H, W, R, S = (int(v) for v in rng.integers(1, 12, 5))
        stride, padding = (int(rng.integers(1, 3)), 1), tuple(int(v) for v in rng.integers(0, 2, 2))
        if R > H + 2 * padding[0] or S > W + 2 * padding[1]:
            continue
        C, K = 16 * int(rng.integers(1, 4)), int(rng.integers(1, 40))
        in_place = done % 2  # the update reads dy in place: K whole blocks, dy contiguous
        if in_place:
            K = 16 * int(rng.integers(1, 3))
        cfg = {"fwd": {"bc": 16, "bk": 16, "bq": int(rng.integers(1, 6))},
               "bwd": {"spec": ("NChu", "CNhu", "NCHu", "nCHu")[done],
                       "call_kb": int(rng.choice([1, 32])),  # 1: a call per tap
                       "w_reuse": int(rng.choice([1, 2, 3, 8]))}}  # blocks sharing each call's wt
        g = conv.geometry(N, C, K, H, W, R, S, stride, padding, config=cfg)
        gt = dataclasses.replace(g, C=g.K, K=g.C, bc=g.bk, bk=g.bc)
        if conv.pointwise(gt, "f32", "cpu"):
            continue
        assert conv.stores_nchw_dx(g, "f32", "cpu", np.float32)  # the path under test
        done += 1
        print(f"N={N} C={C} K={K} H={H} W={W} kernel={R, S} stride={stride} "
              f"padding={padding} {cfg}")
        x = rng.standard_normal((N, C, H, W)).astype(np.float32)
        w = rng.standard_normal((K, C, R, S)).astype(np.float32)
        dy = rng.standard_normal((N, K, g.P, 2 * g.Q)).astype(np.float32)[..., ::2]
        if in_place:  # x a strided view: the update copies x, so it reads dy in place
            dy = np.ascontiguousarray(dy)
            x = np.ascontiguousarray(np.repeat(x, 2, axis=3))[..., ::2]
            assert not conv.reads_x(g, "f32", "cpu", x)
            assert conv.reads_dy(g, "f32", "cpu", dy) == (conv.update_form(g) == "rows")
        dx, dw = conv.backward(dy, x, w, stride, padding, config=cfg)
        for got, want, mag in list(zip((dx, dw), reference(x, w, dy, stride, padding)[1:],
                                       magnitude(x, w, dy, stride, padding)[1:])):
            assert got.dtype == np.float32 and got.shape == want.shape
            assert np.all(np.abs(got - want) <= 1e-5 * mag + 1e-30)


def test_amx_table_res5a(rng):
    """The AMX Xeon's keys for res5a_branch2b at N = 16 (output blocks outer,
    bk 32, calls of 128 KiB whose weight blocks a task's rows take in turn;
    backward-data likewise) on random 3x3 layers, functional forward and
    backward against float64."""
    res5a = (16, 512, 512, 7, 7, 3, 3, (1, 1), (1, 1))
    g = conv.geometry(*res5a, path="f32@amx")
    keys = {"fwd": {"spec": g.specs[0], "bk": g.bk, "call_kb": g.call_kb[0],
                    "w_reuse": g.w_reuse[0]},
            "bwd": {"spec": g.specs[1], "call_kb": g.call_kb[1], "w_reuse": g.w_reuse[1]}}
    assert keys["fwd"] == {"spec": "KNpq", "bk": 32, "call_kb": 128, "w_reuse": 8}
    done = 0
    while done < 3:
        N, H, W = int(rng.integers(1, 5)), int(rng.integers(1, 10)), int(rng.integers(1, 10))
        C, K = 32 * int(rng.integers(1, 4)), 32 * int(rng.integers(1, 4)) - 16 * (done == 2)
        g = conv.geometry(N, C, K, H, W, 3, 3, (1, 1), (1, 1), config=keys)
        if conv.columns(g, "f32", "cpu"):
            continue
        done += 1
        print(f"N={N} C={C} K={K} H={H} W={W} {keys}")
        x, w, dy = (rng.standard_normal(s).astype(np.float32)
                    for s in ((N, C, H, W), (K, C, 3, 3), (N, K, H, W)))
        got = (conv.forward(x, w, 1, 1, config=keys), *conv.backward(dy, x, w, 1, 1, config=keys))
        for a, want, mag in zip(got, reference(x, w, dy, 1, 1), magnitude(x, w, dy, 1, 1)):
            assert a.dtype == np.float32 and a.shape == want.shape
            assert np.all(np.abs(a - want) <= 1e-5 * mag + 1e-30)


def test_update_reads_x(rng):
    """The weight update reading x in place against backward-data's bordered dy
    (conv.reads_x, conv_update.update_x_nest: each tap's rows and pixels
    clipped to x's real ones): random sizes with C whole blocks and stride 1
    across, any stride down, padding up to 2, K ragged or whole, shares of the
    reduction (tiles), one call per block or several; rows wider than the
    update's whole-row blocks (UPDATE_ROW); and a layer where a share has no
    row that a tap reaches, which the rule leaves to the copy."""
    done = 0
    while done < 6:
        N, H, W, R, S = (int(v) for v in rng.integers(1, 10, 5))
        if done == 5:
            W = int(rng.integers(66, 80))  # past UPDATE_ROW: the rows come in bq blocks
        stride, padding = (int(rng.integers(1, 4)), 1), tuple(int(v) for v in rng.integers(0, 3, 2))
        if R > H + 2 * padding[0] or S > W + 2 * padding[1]:
            continue
        C, K = 16 * int(rng.integers(1, 4)), int(rng.integers(1, 40))
        cfg = {"fwd": {"bc": 16, "bk": 16, "bq": int(rng.integers(1, 6))},
               "upd": {"tiles": int(rng.choice([1, 16, 256])), "call_kb": int(rng.choice([1, 64])),
                       "spec": str(rng.choice(["KCRSJ", "JKCRS"]))}}  # shares in or outermost
        g = conv.geometry(N, C, K, H, W, R, S, stride, padding, config=cfg)
        x = rng.standard_normal((N, C, H, W)).astype(np.float32)
        if conv.columns(g, "f32", "cpu", "bwd") or not conv.reads_x(g, "f32", "cpu", x):
            continue
        done += 1
        print(f"N={N} C={C} K={K} H={H} W={W} kernel={R, S} stride={stride} "
              f"padding={padding} {cfg} shares={g.splits}")
        w = rng.standard_normal((K, C, R, S)).astype(np.float32)
        dy = rng.standard_normal((N, K, g.P, g.Q)).astype(np.float32)
        dx, dw = conv.backward(dy, x, w, stride, padding, config=cfg)
        for got, want, mag in list(zip((dx, dw), reference(x, w, dy, stride, padding)[1:],
                                       magnitude(x, w, dy, stride, padding)[1:])):
            assert got.dtype == np.float32 and got.shape == want.shape
            assert np.all(np.abs(got - want) <= 1e-5 * mag + 1e-30)
    # one row of one image, 3 taps down and a row of padding: tap row 0 reads only padding
    g = conv.geometry(1, 16, 16, 1, 5, 3, 3, (1, 1), (1, 1))
    x = rng.standard_normal((1, 16, 1, 5)).astype(np.float32)
    assert not conv.reads_x(g, "f32", "cpu", x)


@pytest.mark.parametrize("case", CASES, ids=[str(c[:7]) for c in CASES])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_forward_backward(rng, backend, case, dtype):
    N, C, K, H, W, R, S, stride, padding = case
    npdt = np.float32 if dtype == "f32" else brgemm.bfloat16
    x = rng.standard_normal((N, C, H, W)).astype(npdt)
    w = rng.standard_normal((K, C, R, S)).astype(npdt)
    # several blocks and a ragged pixel block; pixel blocks that share each
    # call's weight blocks (w_reuse), in whatever number
    cfg = {"fwd": {"bc": 32, "bk": 32, "bq": 5, "w_reuse": int(rng.choice([1, 2, 3, 8]))},
           "bwd": {"w_reuse": int(rng.choice([1, 2, 3, 8]))}}
    print(cfg)
    y = conv.forward(x, w, stride, padding, dtype=dtype, config=cfg, backend=backend)
    dy = rng.standard_normal(y.shape).astype(npdt)
    dx, dw = conv.backward(dy, x, w, stride, padding, dtype=dtype, config=cfg, backend=backend)
    assert y.dtype == dx.dtype == dw.dtype == npdt
    rel = 1e-5 if dtype == "f32" else 1e-2  # bf16 results are rounded to 8 bits
    for name, got, want, mag in zip(("y", "dx", "dw"), (y, dx, dw),
                                    reference(x, w, dy, stride, padding),
                                    magnitude(x, w, dy, stride, padding)):
        err = np.abs(np.asarray(got, np.float64) - want)
        print(f"{name}: max abs diff {err.max():.3e}")
        assert np.all(err <= rel * (mag + 1e-3)), name


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_flat_update_random_shapes(rng, backend, dtype):
    """The flat weight update (config flat: runs of pixels across rows, C blocks
    of 32, shares of image chunks) on random shapes, strides, paddings and
    blockings, layer and functional forms; on AMX (or its model) with dy in
    VNNI pairs. The recorded plan and the eager nest agree."""
    from primitives import conv_update
    npdt = np.float32 if dtype == "f32" else brgemm.bfloat16
    rel = 1e-5 if dtype == "f32" else 1e-2
    for _ in range(4):
        N, C, K = int(rng.integers(1, 4)), int(rng.integers(1, 90)), int(rng.integers(1, 90))
        R, S = int(rng.integers(1, 5)), int(rng.integers(1, 5))
        stride, padding = tuple(int(v) for v in rng.integers(1, 4, 2)), tuple(int(v) for v in rng.integers(0, 3, 2))
        H, W = R + int(rng.integers(0, 20)), S + int(rng.integers(0, 20))
        cfg = {"fwd": {"bc": int(rng.choice([16, 32, 48, 64])), "bk": int(rng.choice([16, 32, 48, 64]))},
               "upd": {"flat": True, "tiles": int(rng.integers(1, 200))}}
        print(f"N={N} C={C} K={K} H={H} W={W} R={R} S={S} stride={stride} padding={padding} {cfg}")
        g = conv.geometry(N, C, K, H, W, R, S, stride, padding, config=cfg)
        assert conv.update_form(g) == "flat"
        x = rng.standard_normal((N, C, H, W)).astype(npdt)
        w = rng.standard_normal((K, C, R, S)).astype(npdt)
        dy = rng.standard_normal((N, K, g.P, g.Q)).astype(npdt)
        _, _, want = reference(x, w, dy, stride, padding)
        mag = magnitude(x, w, dy, stride, padding)[2]
        _, dw = conv.backward(dy, x, w, stride, padding, dtype=dtype, config=cfg, backend=backend)
        assert np.all(np.abs(dw.astype(np.float64) - want) <= rel * (mag + 1e-3))
        layer = conv.Conv2d(C, K, (R, S), stride, padding, dtype=dtype, config=cfg, backend=backend,
                            rng=rng)
        layer.weight[...] = w.astype(np.float32)
        layer.forward(x)
        layer.backward(dy)
        assert np.all(np.abs(layer.grad_weight - want) <= rel * (mag + 1e-3))
        vnni = "upd" in conv.vnni_passes(g, dtype, backend)
        inputs = conv.update_inputs(x, dy, g, dtype, vnni=vnni)
        planned, eager = conv.update_output(g), conv.update_output(g)
        conv.plan(g, "upd", dtype, vnni).run(backend=backend, dw=planned, **inputs)
        conv_update.update_flat_nest(brgemm.plan.Eager(dw=eager, **inputs),
                                     conv_plans._loops(g, "upd"), g, dtype, vnni)
        np.testing.assert_allclose(planned, eager, rtol=1e-5, atol=1e-5 * float(np.abs(eager).max()))


def test_flat_update_leaves_huge_images_to_the_row_nests():
    """A block of the flat update spans bc planes of the whole image: where
    that passes the kernel's 2**31 bytes per block, the row nest takes over."""
    cfg = {"upd": {"flat": True}}
    assert conv.geometry(1, 64, 64, 64, 64, 3, 3, (1, 1), (1, 1), config=cfg).flat
    g = conv.geometry(1, 64, 64, 4096, 4096, 3, 3, (1, 1), (1, 1), config=cfg)
    assert not g.flat and conv.update_form(g) == "rows"


def test_default_config_and_eager_match(rng):
    """The blocked forward (x copied into blocks: nchw_x and nchw_x_rows off) and
    its nest run eagerly, bit for bit (tests/test_conv_nchw_x.py: the same for x
    in place)."""
    x = rng.standard_normal((2, 64, 12, 12)).astype(np.float32)
    w = rng.standard_normal((32, 64, 3, 3)).astype(np.float32)
    y = conv.forward(x, w, 1, 1, config={"fwd": {"nchw_x": False, "nchw_x_rows": False}})
    g = conv.geometry(2, 64, 32, 12, 12, 3, 3, (1, 1), (1, 1))
    ye = np.zeros((g.N, g.Kb, g.P, g.Q, g.bk), np.float32)
    conv.forward_nest(brgemm.plan.Eager(x=conv.block_x(x, g, "f32"), w=conv.block_w(w, g, "f32"),
                                        y=ye), conv_plans._loops(g, "fwd"), g, "f32")
    np.testing.assert_array_equal(conv.unblock_y(ye, g, np.float32), y)


class TestBadInput:
    x = np.ones((1, 3, 8, 8), np.float32)
    w = np.ones((4, 3, 3, 3), np.float32)

    def test_shapes(self):
        with pytest.raises(ValueError, match="^w: has 2 input channels, x has 3"):
            conv.forward(self.x, np.ones((4, 2, 3, 3), np.float32))
        with pytest.raises(ValueError, match="^x: has 3 channels, the layer takes 2"):
            conv.Conv2d(2, 4, 3, padding=1).forward(self.x)  # the layer owns w: x is at fault
        with pytest.raises(ValueError, match="^x: the padded input 8x8 is smaller than w's 9x9 kernel"):
            conv.forward(self.x, np.ones((4, 3, 9, 9), np.float32))
        with pytest.raises(ValueError, match="^x: expected 4 non-empty dimensions"):
            conv.forward(np.ones((3, 8, 8), np.float32), self.w)
        with pytest.raises(ValueError, match=r"^dy: expected shape \(1, 4, 6, 6\)"):
            conv.backward(np.ones((1, 4, 5, 6), np.float32), self.x, self.w)
        with pytest.raises(ValueError, match="^dy: expected a numpy.ndarray, got list"):
            conv.backward([1.0], self.x, self.w)

    def test_stride_and_padding(self):
        with pytest.raises(ValueError, match="^padding: expected values >= 0"):
            conv.forward(self.x, self.w, padding=-1)
        with pytest.raises(ValueError, match="^stride: expected values >= 1"):
            conv.forward(self.x, self.w, stride=(1, 0))
        with pytest.raises(TypeError, match="^stride: expected an int or a pair"):
            conv.forward(self.x, self.w, stride=1.5)
        with pytest.raises(TypeError, match="^padding: expected an int or a pair"):
            conv.forward(self.x, self.w, padding=(1, 2, 3))

    def test_types(self):
        with pytest.raises(TypeError, match="^x: expected dtype"):
            conv.forward(self.x.astype(np.float64), self.w)
        with pytest.raises(TypeError, match="^w: expected a numpy.ndarray"):
            conv.forward(self.x, self.w.tolist())
        with pytest.raises(TypeError, match="^dy: expected dtype"):
            conv.backward(np.ones((1, 4, 6, 6)), self.x, self.w)
        with pytest.raises(ValueError, match="^backend"):
            conv.forward(self.x, self.w, backend="tpu")


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_conv2d_layer(rng, backend, dtype):
    npdt = np.float32 if dtype == "f32" else brgemm.bfloat16
    layer = conv.Conv2d(5, 12, (3, 2), stride=(2, 1), padding=1, dtype=dtype, rng=rng, backend=backend)
    x = rng.standard_normal((2, 5, 9, 7)).astype(npdt)
    for _ in range(2):  # the second pass reuses plans and blocked weights
        y = layer.forward(x)
        dy = rng.standard_normal(y.shape).astype(npdt)
        dx = layer.backward(dy)
    w = layer.weight.astype(npdt)
    rel = 1e-5 if dtype == "f32" else 1e-2
    for name, got, want, mag in zip(("y", "dx", "dw"), (y, dx, layer.grad_weight),
                                    reference(x, w, dy, (2, 1), 1),
                                    magnitude(x, w, dy, (2, 1), 1)):
        err = np.abs(np.asarray(got, np.float64) - want)
        assert np.all(err <= rel * (mag + 1e-3)), name
    before = layer.weight.copy()
    layer.step(0.1)
    np.testing.assert_allclose(layer.weight, before - 0.1 * layer.grad_weight, rtol=1e-6)
    with pytest.raises(ValueError, match="^dy: expected the forward's output shape"):
        layer.backward(np.ones((1, 12, 5, 8), np.float32))
    with pytest.raises(ValueError, match="^kernel_size"):
        conv.Conv2d(3, 4, 0, backend=backend)
