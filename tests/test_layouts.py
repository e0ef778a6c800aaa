"""Blocked layouts against a NumPy reference: padding, transposes, swapped
grids, both element sizes, views with row strides, bad input."""
import numpy as np
import pytest

import brgemm
from brgemm.layouts import column_sums, from_blocks, pick_block, to_blocks, transpose_blocks


def ref_blocks(M, br, bs, swap_grid):
    R, S = M.shape
    Rb, Sb = -(-R // br), -(-S // bs)
    P = np.zeros((Rb * br, Sb * bs), M.dtype)
    P[:R, :S] = M
    t = P.reshape(Rb, br, Sb, bs).transpose(0, 2, 1, 3)
    return t.transpose(1, 0, 2, 3) if swap_grid else t


# sizes that reach the SIMD sub-blocks (4x4 f32, 8x8 bf16) with ragged edges too
@pytest.mark.parametrize("R,S,br,bs", [(5, 7, 2, 3), (64, 64, 16, 32), (1, 1, 4, 4), (33, 100, 32, 16),
                                      (37, 70, 16, 24), (100, 50, 64, 32), (13, 9, 12, 8)])
@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("swap_grid", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, brgemm.bfloat16])
def test_round_trip(rng, R, S, br, bs, transpose, swap_grid, dtype):
    x = rng.standard_normal((S, R) if transpose else (R, S)).astype(dtype)
    M = x.T if transpose else x
    t = to_blocks(x, br, bs, transpose=transpose, swap_grid=swap_grid)
    np.testing.assert_array_equal(t, ref_blocks(M, br, bs, swap_grid))
    back = from_blocks(t, R, S, transpose=transpose, swap_grid=swap_grid)
    np.testing.assert_array_equal(back, x)
    # the same copy summing x's columns on the way: column_sums' values, bit for bit
    sums = np.full(x.shape[1], np.nan, np.float32)
    t2 = to_blocks(x, br, bs, transpose=transpose, swap_grid=swap_grid, sums=sums)
    np.testing.assert_array_equal(t2, t)
    np.testing.assert_array_equal(sums, column_sums(x))
    np.testing.assert_allclose(sums, x.astype(np.float64).sum(0), rtol=1e-5, atol=1e-5 * R * S)


@pytest.mark.parametrize("case", range(12))
def test_round_trip_random(rng, case):
    """random sizes and blocks: the transposing copies' 16 x 16 (AVX-512), 8 x 8
    (AVX2) and 4 x 4 sub-blocks, their overlapping ragged edges and the
    scalar ones, on a window that starts anywhere in a larger array"""
    R, S = (int(v) for v in rng.integers(1, 90, 2))
    br, bs = int(rng.integers(1, R + 20)), int(rng.integers(1, S + 20))
    big = rng.standard_normal((S + 3, R + 5)).astype(np.float32)
    x = big[1:S + 1, 2:R + 2]  # S x R, rows R + 5 apart
    t = to_blocks(x, br, bs, transpose=True)
    np.testing.assert_array_equal(t, ref_blocks(x.T, br, bs, False))
    np.testing.assert_array_equal(from_blocks(t, R, S, transpose=True), x)


def test_views_and_out(rng):
    big = rng.standard_normal((10, 20)).astype(np.float32)
    x = big[1:8, 3:12]  # row stride 20
    out = np.empty((3, 3, 3, 4), np.float32)
    assert to_blocks(x, 3, 4, out=out) is out
    np.testing.assert_array_equal(out, ref_blocks(x, 3, 4, False))
    y = big[::2, ::3]  # no contiguous rows: copied first
    np.testing.assert_array_equal(from_blocks(to_blocks(y, 2, 2), *y.shape), y)


def test_bad_input():
    x = np.ones((4, 4), np.float32)
    with pytest.raises(ValueError, match="^out"):
        to_blocks(x, 2, 2, out=np.empty((2, 2, 2, 3), np.float32))
    with pytest.raises(TypeError, match="^x: expected 2- or 4-byte"):
        to_blocks(np.ones((4, 4)), 2, 2)
    with pytest.raises(ValueError, match="^x: expected 2 dimensions"):
        to_blocks(np.ones(4, np.float32), 2, 2)
    with pytest.raises(ValueError, match="^t: tiles"):
        from_blocks(np.ones((2, 2, 2, 2), np.float32), 5, 4)
    with pytest.raises(ValueError, match="^sums: expected a writeable C-contiguous float32"):
        to_blocks(x, 2, 2, sums=np.empty(3, np.float32))
    with pytest.raises(ValueError, match="^sums: expected a writeable C-contiguous float32"):
        to_blocks(x, 2, 2, sums=np.empty(4, np.float64))
    with pytest.raises(ValueError, match="^sums: overlaps"):
        to_blocks(x, 2, 2, sums=x[0])


def test_pick_block():
    assert pick_block(3, 64) == 3
    assert pick_block(1000, 64, 16) == 64      # no multiple-of-16 divisor in [32, 64]: pad
    assert pick_block(96, 64, 16) == 48
    assert pick_block(4096, 64, 16) == 64


@pytest.mark.parametrize("dtype", [np.float32, brgemm.bfloat16])
@pytest.mark.parametrize("br,bs", [(2, 3), (16, 8), (12, 20)])
def test_transpose_blocks(rng, dtype, br, bs):
    x = rng.standard_normal((5 * br - 1, 3 * bs - 2)).astype(dtype)
    t = to_blocks(x, br, bs)
    np.testing.assert_array_equal(transpose_blocks(t), to_blocks(x, bs, br, transpose=True))
    with pytest.raises(ValueError, match="^out"):
        transpose_blocks(t, out=np.empty(3, dtype))


@pytest.mark.parametrize("dtype", [np.float32, brgemm.bfloat16])
def test_transpose_blocks_paired_with_sums(rng, dtype):
    """pair > 1 stacks neighbouring transposed tiles (tiles of M.T pair*bs
    rows high); sums gets column_sums(M) bit for bit, padding rows included."""
    for _ in range(4):
        br, bs, pair = int(rng.integers(1, 20)), int(rng.integers(1, 20)), int(rng.integers(1, 4))
        Sb = pair * int(rng.integers(1, 4))
        x = rng.standard_normal((int(rng.integers(1, 5 * br)), Sb * bs - int(rng.integers(0, bs))))
        x = x.astype(dtype)
        t = to_blocks(x, br, bs)
        sums = np.full(Sb * bs, np.nan, np.float32)
        got = transpose_blocks(t, pair=pair, sums=sums)
        np.testing.assert_array_equal(got, to_blocks(x, pair * bs, br, transpose=True))
        padded = from_blocks(t, t.shape[0] * br, Sb * bs)
        np.testing.assert_array_equal(sums, column_sums(padded))
        np.testing.assert_array_equal(transpose_blocks(t, pair=pair), got)
    with pytest.raises(ValueError, match="^pair"):
        transpose_blocks(to_blocks(x, 2, 3), pair=0)
    with pytest.raises(ValueError, match="^pair"):
        transpose_blocks(np.zeros((2, 3, 4, 4), dtype), pair=2)
    with pytest.raises(ValueError, match="^sums"):
        transpose_blocks(t, sums=np.empty(3, np.float32))
    with pytest.raises(ValueError, match="^t"):
        transpose_blocks([[1.0]])


def test_vnni_tiles_into_out(rng):
    """vnni_tiles pairs rows 2p and 2p+1 of each tile; `out` must be writeable,
    of x's shape and dtype and apart from x (a view of x's buffer is refused)."""
    from brgemm.vnni import vnni_tiles
    x = rng.standard_normal((3, 4, 6)).astype(np.float32).astype(brgemm.bfloat16)
    want = x.reshape(3, 2, 2, 6).transpose(0, 1, 3, 2).reshape(3, 4, 6)
    out = np.empty_like(x)
    assert vnni_tiles(x, out=out) is out and np.array_equal(out, want)
    ro = np.empty_like(x)
    ro.flags.writeable = False
    both = np.empty((6, 4, 6), brgemm.bfloat16)
    both[:3] = x
    for bad in (ro, both[2:5], np.empty((3, 4, 4), brgemm.bfloat16), out.astype(np.float32)):
        with pytest.raises(ValueError, match="^out: expected a writeable C-contiguous array"):
            vnni_tiles(both[:3] if bad.base is both else x, out=bad)


def vnni_reference(t):
    """tiles [..., rows, cols] -> rows 2p and 2p+1 of each tile side by side"""
    *lead, rows, cols = t.shape
    return t.reshape(*lead, rows // 2, 2, cols).swapaxes(-1, -2).reshape(t.shape)


@pytest.mark.parametrize("case", range(16))
def test_vnni_tiles_random(rng, case):
    """pairs of rows of random widths: the 16-column SIMD steps and the rest"""
    tiles, rows, cols = int(rng.integers(1, 5)), 2 * int(rng.integers(1, 9)), int(rng.integers(1, 70))
    x = rng.standard_normal((tiles, rows, cols)).astype(brgemm.bfloat16)
    from brgemm.vnni import vnni_tiles
    np.testing.assert_array_equal(vnni_tiles(x).view(np.uint16), vnni_reference(x).view(np.uint16))


@pytest.mark.parametrize("case", range(24))
def test_to_blocks_vnni_random(rng, case):
    """to_blocks(vnni=True) = vnni_tiles of to_blocks, bit for bit: transposed
    bf16 windows whose pairs are words of x's rows (even widths and row
    strides, x at a 4-byte boundary or not), the other cases through a tile
    buffer, f32 rounded on the way; ragged edges zero-padded"""
    R, S = (int(v) for v in rng.integers(1, 90, 2))
    if rng.random() < 0.5:
        R += R % 2  # even: the word path where the rest allows
    br, bs = 2 * int(rng.integers(1, 20)), int(rng.integers(1, 40))
    transpose, swap_grid = bool(rng.integers(2)), bool(rng.integers(2))
    src = (np.float32, brgemm.bfloat16)[int(rng.integers(2))]
    rows, cols = (S, R) if transpose else (R, S)
    skip, pad = int(rng.integers(0, 2)), int(rng.integers(0, 3))
    big = rng.standard_normal((rows + 1, cols + skip + pad)).astype(src)
    x = big[1:, skip:skip + cols]
    print(f"R={R} S={S} br={br} bs={bs} transpose={transpose} swap_grid={swap_grid} "
          f"src={np.dtype(src).name} skip={skip} pad={pad}")
    got = to_blocks(x, br, bs, transpose=transpose, swap_grid=swap_grid, dtype=brgemm.bfloat16,
                    vnni=True)
    plain = to_blocks(x, br, bs, transpose=transpose, swap_grid=swap_grid, dtype=brgemm.bfloat16)
    np.testing.assert_array_equal(plain, ref_blocks((x.T if transpose else x).astype(
        brgemm.bfloat16), br, bs, swap_grid))
    np.testing.assert_array_equal(got.view(np.uint16), vnni_reference(plain).view(np.uint16))


def test_to_blocks_vnni_bad_input(rng):
    x = rng.standard_normal((6, 8)).astype(brgemm.bfloat16)
    for kw in (dict(br=3, bs=4), dict(br=4, bs=4, dtype=np.float32, x=x.astype(np.float32)),
               dict(br=4, bs=4, sums=np.empty(8, np.float32))):
        with pytest.raises(ValueError, match="^vnni"):
            to_blocks(kw.pop("x", x), kw.pop("br"), kw.pop("bs"), vnni=True, **kw)


def test_rows_that_overlap_are_copied_first(rng):
    """A row stride shorter than a row (broadcast rows, a sliding window) is no
    matrix to walk row by row: the copies, the sums and fc.forward read the
    values the array shows, not the memory past it."""
    from brgemm.layouts import convert
    from primitives import fc
    rows, cols = (int(v) for v in rng.integers(2, 40, 2))
    base = rng.standard_normal(rows + cols).astype(np.float32)
    views = {"broadcast": np.broadcast_to(base[:cols], (rows, cols)),
             "sliding window": np.lib.stride_tricks.sliding_window_view(base, cols)[:rows]}
    for name, x in views.items():
        want = np.array(x)  # what NumPy reads
        np.testing.assert_array_equal(convert(x, np.float32), want, err_msg=name)
        np.testing.assert_array_equal(column_sums(x), column_sums(want), err_msg=name)
        br, bs = (int(v) for v in rng.integers(1, 9, 2))
        np.testing.assert_array_equal(from_blocks(to_blocks(x, br, bs), rows, cols), want,
                                      err_msg=name)
        w = rng.standard_normal((int(rng.integers(1, 20)), cols)).astype(np.float32)
        np.testing.assert_allclose(fc.forward(x, w), want @ w.T, rtol=0,
                                   atol=1e-5 * (np.abs(want) @ np.abs(w.T)).max(), err_msg=name)
