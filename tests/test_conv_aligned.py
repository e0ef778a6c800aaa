"""conv's backward-data by classes of dy's rows (pointwise_classes: rows
grouped by where they start on a 64-byte line, each class on pixel blocks
that start lines) against PyTorch autograd in float64, on arrays that start
anywhere on a line."""
import dataclasses

import numpy as np

from brgemm.arrays import Scratch, aligned_empty
from primitives import conv
from primitives.conv_forward import line_blocks, row_classes
from tests.test_conv import magnitude, reference


def at_offset(rng, shape, offset):
    """A random float32 array of `shape` whose first element lies `offset`
    floats past a 64-byte line."""
    size = int(np.prod(shape))
    buf = np.empty(size + 32, np.float32)
    skip = (offset - buf.ctypes.data // 4) % 16
    a = buf[skip:skip + size].reshape(shape)
    a[...] = rng.standard_normal(shape)
    assert a.ctypes.data // 4 % 16 == offset
    return a


def test_line_blocks(rng):
    """Every pixel in exactly one block; blocks after the head start lines
    and are whole vectors but the last."""
    for _ in range(50):
        HW, s, bp = int(rng.integers(1, 400)), int(rng.integers(0, 16)), 16 * int(rng.integers(1, 9))
        s = min(s, HW)
        blocks = line_blocks(HW, s, bp)
        assert sum(w for _, w in blocks) == HW and blocks[0][0] == 0
        assert all(j0 + w == j1 for (j0, w), (j1, _) in zip(blocks, blocks[1:]))
        assert all((j0 - s) % 16 == 0 and (w % 16 == 0 or i == len(blocks) - 1)
                   for i, (j0, w) in enumerate(blocks) if j0 >= s)


def test_row_classes(rng):
    """Class r's rows start lines at pixel s, for every row of the class."""
    for _ in range(50):
        HW, align = int(rng.integers(1, 300)), int(rng.integers(0, 16))
        rows = 16 * int(rng.integers(1, 4))
        for r, s in row_classes(rows, HW, align):
            L = 16 // np.gcd(HW, 16)
            assert all((align + c * HW + s) % 16 == 0 for c in range(r, rows, L))


def test_classes_backward(rng):
    """pointwise_classes on: backward-data (w^T in tiles of each class of dy's
    rows, dy in place) on images whose pixel count is a multiple of 4 (1, 2
    or 4 classes), dy (and x) starting at random places on a line; random
    pixel blocks and call sizes; class_tiles against w^T by hand; results as
    F.conv2d's and its autograd's."""
    for it in range(6):
        N = int(rng.integers(1, 4))
        H, W = [(14, 14), (28, 28), (14, 16), (15, 20), (16, 17), (18, 18)][int(rng.integers(0, 6))]
        C, K = 64 * int(rng.integers(1, 3)), 64 * int(rng.integers(1, 5))  # whole tiles by class
        if it % 2:
            C, K = K, C
        kb, bp = int(rng.choice([1, 8, 32, 1024])), int(rng.choice([16, 32, 64, 112]))
        ox, ody = (int(o) for o in rng.integers(0, 16, 2))
        print(f"N={N} C={C} K={K} H={H} W={W} pointwise_kb={kb} pointwise_bp={bp} "
              f"x at {ox}, dy at {ody} floats past a line")
        cfg = {"fwd": {"bc": 16, "bk": 16, "pointwise_kb": kb, "pointwise_classes": True,
                       "classes_bp": bp}}
        g = conv.geometry(N, C, K, H, W, 1, 1, (1, 1), (0, 0), config=cfg)
        x, dy = at_offset(rng, (N, C, H, W), ox), at_offset(rng, (N, K, H, W), ody)
        gt = dataclasses.replace(g, C=g.K, K=g.C, bc=g.bk, bk=g.bc)  # backward-data's
        w = rng.standard_normal((K, C, 1, 1)).astype(np.float32)
        p = conv.pointwise_plan(gt, "f32", bp)  # the paths under test:
        pc, wt = conv.data_operands(p, gt, g, "f32", dy, w, None, Scratch())
        assert pc is not p
        L = 16 // np.gcd(H * W, 16)
        for r in range(L):  # tile (r, i, j) at [u][t]: w[r + L (j bk + t)][i bc + u]
            want = w.reshape(K, C)[r::L].T.reshape(C // 16, 16, K // L // 16, 16).transpose(0, 2, 1, 3)
            assert np.array_equal(wt[r], want)
        y = conv.forward(x, w, config=cfg)
        dx, dw = conv.backward(dy, x, w, config=cfg)
        for got, want, mag in zip((y, dx, dw), reference(x, w, dy, 1, 0), magnitude(x, w, dy, 1, 0)):
            assert got.dtype == np.float32 and got.shape == want.shape
            assert np.all(np.abs(got - want) <= 1e-5 * mag + 1e-30)


def test_classes_not_taken():
    """Backward-data keeps gt's tiles where dy's rows fall into more than 4
    classes (odd pixel counts: 16), a class holds part of a tile, C is
    ragged against its blocks, or pointwise_classes is off."""
    on = {"fwd": {"bc": 16, "bk": 16, "pointwise_classes": True}}
    off = {"fwd": {"bc": 16, "bk": 16, "pointwise_classes": False}}
    for (C, K, H, W), cfg in (((32, 64, 15, 15), on), ((32, 48, 14, 14), on),
                              ((40, 64, 14, 14), on), ((32, 64, 14, 14), off)):
        g = conv.geometry(1, C, K, H, W, 1, 1, (1, 1), (0, 0), config=cfg)
        gt = dataclasses.replace(g, C=g.K, K=g.C, bc=g.bk, bk=g.bc)
        dy, w = aligned_empty((1, K, H, W), np.float32), np.zeros((K, C, 1, 1), np.float32)
        p = conv.pointwise_plan(gt, "f32", 64)
        assert conv.data_operands(p, gt, g, "f32", dy, w, None, Scratch())[0] is p


def test_classes_where():
    """On by the AMX Xeon's table ("f32@amx", where straddling loads cost), off
    by default (the EPYC: the same speed either way)."""
    shape = (2, 256, 1024, 14, 14, 1, 1, (1, 1), (0, 0))
    assert conv.geometry(*shape, path="f32@amx").pointwise_classes
    assert not conv.geometry(*shape, path="f32").pointwise_classes
