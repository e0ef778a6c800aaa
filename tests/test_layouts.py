"""Blocked layouts against a NumPy reference: padding, transposes, swapped
grids, both element sizes, views with row strides, bad input."""
import numpy as np
import pytest

import brgemm
from brgemm import layouts as L
from brgemm.layouts import column_sums, from_blocks, pick_block, to_blocks, transpose_blocks


def ref_blocks(M, br, bs, swap_grid):
    R, S = M.shape
    Rb, Sb = -(-R // br), -(-S // bs)
    P = np.zeros((Rb * br, Sb * bs), M.dtype)
    P[:R, :S] = M
    t = P.reshape(Rb, br, Sb, bs).transpose(0, 2, 1, 3)
    return t.transpose(1, 0, 2, 3) if swap_grid else t


# sizes that reach the SIMD sub-blocks (4x4 f32, 8x8 bf16) with ragged edges too
@pytest.mark.parametrize("R,S,br,bs", [(5, 7, 2, 3), (64, 64, 16, 32), (1, 1, 4, 4),
                                      (33, 100, 32, 16), (37, 70, 16, 24), (100, 50, 64, 32),
                                      (13, 9, 12, 8)])
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
        # one more than t's Sb * bs columns (a fixed 3 matched them in 3 draws of 171)
        transpose_blocks(t, sums=np.empty(t.shape[1] * t.shape[3] + 1, np.float32))
    with pytest.raises(TypeError, match="^t: expected a numpy.ndarray"):
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
    tiles, rows = int(rng.integers(1, 5)), 2 * int(rng.integers(1, 9))
    cols = int(rng.integers(1, 70))
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


# ---------------------------------------------------------------- bad input, by name

def test_from_blocks_widens_bf16_into_out(rng):
    """dtype=float32 from bf16 tiles (exact): the values land in `out`, which
    comes back itself; an out of the tiles' dtype is refused, naming out."""
    for _ in range(4):
        R, S, br, bs = (int(v) for v in rng.integers(1, 40, 4))
        transpose, swap_grid = bool(rng.integers(2)), bool(rng.integers(2))
        x = rng.standard_normal((S, R) if transpose else (R, S)).astype(brgemm.bfloat16)
        t = to_blocks(x, br, bs, transpose=transpose, swap_grid=swap_grid)
        out = np.full(x.shape, np.nan, np.float32)
        got = from_blocks(t, R, S, transpose, swap_grid, dtype=np.float32, out=out)
        assert got is out
        np.testing.assert_array_equal(out, x.astype(np.float32))
        new = from_blocks(t, R, S, transpose, swap_grid, dtype=np.float32)
        assert new.dtype == np.float32 and new.flags.c_contiguous
        np.testing.assert_array_equal(new, x.astype(np.float32))
    with pytest.raises(ValueError, match=r"^out: expected a writeable C-contiguous float32"):
        from_blocks(t, R, S, transpose, swap_grid, dtype=np.float32, out=np.empty_like(x))
    buf = np.empty(R * S + t.size, np.float32)  # tiles and out in one buffer
    shared = buf.view(brgemm.bfloat16)[:t.size].reshape(t.shape)
    shared[...] = t
    with pytest.raises(ValueError, match=r"^out: overlaps t"):
        from_blocks(shared, R, S, transpose, swap_grid, dtype=np.float32,
                    out=buf[:R * S].reshape(x.shape))


def _args():
    """Small valid arguments of every layout copy."""
    f = np.ones((4, 6), np.float32)
    return dict(f=f, t=to_blocks(f, 2, 3), img=np.ones((1, 3, 4, 4), np.float32),
                ib=L.image_to_blocks(np.ones((1, 3, 4, 4), np.float32), 2, 4, 4),
                w=np.ones((4, 3, 2, 2), np.float32), tt=np.ones((1, 2, 2, 4, 2, 2), np.float32))


# (call on _args' arrays, the argument it names, the exception)
BAD_SIZES = [
    (lambda a: to_blocks(a["f"], 0, 3), "br", ValueError),
    (lambda a: to_blocks(a["f"], 2, -1), "bs", ValueError),
    (lambda a: to_blocks(a["f"], 2.0, 3), "br", TypeError),
    (lambda a: to_blocks(a["f"], True, 3), "br", TypeError),
    (lambda a: to_blocks(a["f"], 2, None), "bs", TypeError),
    (lambda a: to_blocks(a["f"], 2, 1 << 40), "bs", ValueError),
    (lambda a: to_blocks(a["f"], 2, 3, threads=0), "threads", ValueError),
    (lambda a: to_blocks(a["f"], 2, 3, threads=2.0), "threads", TypeError),
    (lambda a: to_blocks(a["f"], 2, 3, dtype="foo"), "dtype", TypeError),
    (lambda a: from_blocks(a["t"], 0, 6), "R", ValueError),
    (lambda a: from_blocks(a["t"], 4, 6.0), "S", TypeError),
    (lambda a: from_blocks(a["t"], 4, 6, threads=-1), "threads", ValueError),
    (lambda a: transpose_blocks(a["t"], pair=2.0), "pair", TypeError),
    (lambda a: transpose_blocks(a["t"], pair=0), "pair", ValueError),
    (lambda a: L.convert(a["f"], brgemm.bfloat16, threads=1.5), "threads", TypeError),
    (lambda a: column_sums(a["f"], threads=0), "threads", ValueError),
    (lambda a: L.image_to_blocks(a["img"], 0, 4, 4), "bc", ValueError),
    (lambda a: L.image_to_blocks(a["img"], 2, 4.0, 4), "Hp", TypeError),
    (lambda a: L.image_to_blocks(a["img"], 2, 5, 5, top=-1), "top", ValueError),
    (lambda a: L.image_to_blocks(a["img"], 2, 4, 4, pixels_last=True, phases=2.0), "phases",
     TypeError),
    (lambda a: L.image_to_planes(a["img"], 2, (0, 1), 4, 4, 16), "stride", ValueError),
    (lambda a: L.image_to_planes(a["img"], 2, 2, 2, 2, 4), "stride", TypeError),
    (lambda a: L.image_to_planes(a["img"], 2, (2, 2), 2, 2, 4.0), "L", TypeError),
    (lambda a: L.blocks_to_image(a["ib"], 0, 4, 4), "C", ValueError),
    (lambda a: L.blocks_to_image(a["ib"], 3, 4.0, 4), "H", TypeError),
    (lambda a: L.blocks_to_image(a["ib"], 3, 3, 3, left=-1), "left", ValueError),
    (lambda a: L.taps_to_blocks(a["w"], 0, 2), "bk", ValueError),
    (lambda a: L.taps_to_blocks(a["w"], 2, 2.0), "bc", TypeError),
    (lambda a: L.taps_from_blocks(a["tt"], 0, 3, (2, 2)), "K", ValueError),
    (lambda a: L.taps_from_blocks(a["tt"], 4, 3.0, (2, 2)), "C", TypeError),
    (lambda a: L.taps_from_blocks(a["tt"], 4, 3, 4), "taps", TypeError),
    (lambda a: L.taps_from_blocks(a["tt"], 4, 3, (2.0, 2)), "taps", TypeError),
    (lambda a: L.taps_from_blocks(a["tt"], 4, 3, (-2, -2)), "taps", ValueError),
    (lambda a: L.taps_from_blocks(a["tt"], 4, 3, (2, 2), dtype="foo"), "dtype", TypeError),
    (lambda a: pick_block(0, 4), "dim", ValueError),
    (lambda a: pick_block(10, 0), "target", ValueError),
    (lambda a: pick_block(100, 64, 0), "multiple", ValueError),
    (lambda a: pick_block(10.0, 4), "dim", TypeError),
    (lambda a: L.nblocks(10, 0), "b", ValueError),
    (lambda a: L.nblocks(10, 2.0), "b", TypeError),
    (lambda a: L.nblocks(-1, 2), "dim", ValueError),
    (lambda a: L.matrix_tiles(4, 4, 0, 2, ("r", "c")), "br", ValueError),
    (lambda a: L.matrix_tiles(4.0, 4, 2, 2, ("r", "c")), "rows", TypeError),
]


@pytest.mark.parametrize("i", range(len(BAD_SIZES)))
def test_bad_sizes_name_the_argument(i):
    """sizes of 0 or less, floats, bools, None: an error that starts with the name"""
    call, name, exc = BAD_SIZES[i]
    with pytest.raises(exc, match=rf"^{name}: "):
        call(_args())


# every copy with its array argument's name, and a call of it on a given array
ARRAY_CALLS = [
    ("x", lambda x: to_blocks(x, 2, 3)),
    ("t", lambda t: from_blocks(t, 4, 6)),
    ("t", lambda t: transpose_blocks(t)),
    ("x", lambda x: L.convert(x, np.float32)),
    ("x", lambda x: column_sums(x)),
    ("x", lambda x: L.image_to_blocks(x, 2, 4, 4)),
    ("x", lambda x: L.image_to_planes(x, 2, (2, 2), 2, 2, 4)),
    ("t", lambda t: L.blocks_to_image(t, 3, 4, 4)),
    ("w", lambda w: L.taps_to_blocks(w, 2, 2)),
    ("t", lambda t: L.taps_from_blocks(t, 4, 3, (2, 2))),
]


@pytest.mark.parametrize("name,call", ARRAY_CALLS)
@pytest.mark.parametrize("bad", [None, [[1.0, 2.0]], 3.0])
def test_non_arrays_name_the_argument(name, call, bad):
    with pytest.raises(TypeError, match=rf"^{name}: expected a numpy.ndarray, got "):
        call(bad)


@pytest.mark.parametrize("name,shape,call", [
    ("x", (0, 6), lambda x: to_blocks(x, 2, 3)), ("x", (4, 0), lambda x: to_blocks(x, 2, 3)),
    ("t", (0, 2, 2, 3), lambda t: from_blocks(t, 4, 6)),
    ("t", (2, 2, 0, 3), lambda t: from_blocks(t, 4, 6)),
    ("t", (0, 2, 2, 3), lambda t: transpose_blocks(t)),
    ("t", (2, 2, 2, 0), lambda t: transpose_blocks(t)),
    ("x", (1, 0, 4, 4), lambda x: L.image_to_blocks(x, 2, 4, 4)),
    ("x", (0, 3, 4, 4), lambda x: L.image_to_planes(x, 2, (2, 2), 2, 2, 4)),
    ("t", (1, 2, 4, 4, 0), lambda t: L.blocks_to_image(t, 3, 4, 4)),
    ("w", (4, 3, 0), lambda w: L.taps_to_blocks(w, 2, 2)),
    ("t", (0, 2, 2, 4, 2, 2), lambda t: L.taps_from_blocks(t, 4, 3, (2, 2))),
])
def test_empty_arrays_name_the_argument(name, shape, call):
    with pytest.raises(ValueError, match=rf"^{name}: expected a non-empty "):
        call(np.ones(shape, np.float32))


def test_empty_sums_and_conversions(rng):
    """column_sums and convert take empty arrays: NumPy's results"""
    cols = int(rng.integers(1, 20))
    np.testing.assert_array_equal(column_sums(np.ones((0, cols), np.float32)), np.zeros(cols))
    assert column_sums(np.ones((3, 0), brgemm.bfloat16)).shape == (0,)
    got = L.convert(np.ones((0, cols), np.float32), brgemm.bfloat16)
    assert got.shape == (0, cols) and got.dtype == brgemm.bfloat16


# every copy that takes out=, called on _args' arrays
OUT_CALLS = [
    lambda a, out: to_blocks(a["f"], 2, 3, out=out),
    lambda a, out: from_blocks(a["t"], 4, 6, out=out),
    lambda a, out: transpose_blocks(a["t"], out=out),
    lambda a, out: L.convert(a["f"], brgemm.bfloat16, out=out),
    lambda a, out: column_sums(a["f"], out=out),
    lambda a, out: L.image_to_blocks(a["img"], 2, 4, 4, out=out),
    lambda a, out: L.image_to_planes(a["img"], 2, (2, 2), 2, 2, 4, out=out),
    lambda a, out: L.blocks_to_image(a["ib"], 3, 4, 4, out=out),
    lambda a, out: L.taps_to_blocks(a["w"], 2, 2, out=out),
    lambda a, out: L.taps_from_blocks(a["tt"], 4, 3, (2, 2), out=out),
]


@pytest.mark.parametrize("i", range(len(OUT_CALLS)))
def test_bad_out_names_it(i):
    """out of the wrong shape or dtype, a non-contiguous view, read-only, a list"""
    call, args = OUT_CALLS[i], _args()
    good = call(args, None)
    ro = np.empty_like(good)
    ro.flags.writeable = False
    wide = np.empty(good.shape[:-1] + (2 * good.shape[-1],), good.dtype)
    for bad in (np.empty(good.size + 1, good.dtype), np.empty(good.shape, np.float64), ro,
                wide[..., ::2], good.tolist()):
        with pytest.raises(ValueError, match=r"^out: expected a writeable C-contiguous"):
            call(args, bad)
    out = np.empty_like(good)
    assert call(args, out) is out
    np.testing.assert_array_equal(out, good)


def test_numpy_ints_work(rng):
    """NumPy integers as sizes: the same results as Python ints, NumPy's tiles"""
    R, S, br, bs = (int(v) for v in rng.integers(1, 40, 4))
    x = rng.standard_normal((R, S)).astype(np.float32)
    t = to_blocks(x, np.int64(br), np.int32(bs), threads=np.int64(2))
    np.testing.assert_array_equal(t, ref_blocks(x, br, bs, False))
    np.testing.assert_array_equal(from_blocks(t, np.int64(R), np.int16(S)), x)
    pair = np.int64(1)
    np.testing.assert_array_equal(transpose_blocks(t, pair=pair), to_blocks(x, bs, br, True))
    img = rng.standard_normal((2, 5, 3, 4)).astype(np.float32)
    i64 = np.int64
    ib = L.image_to_blocks(img, i64(4), i64(5), i64(6), i64(1), np.int32(2))
    np.testing.assert_array_equal(ib, L.image_to_blocks(img, 4, 5, 6, 1, 2))
    np.testing.assert_array_equal(L.blocks_to_image(ib, i64(5), i64(3), i64(4), i64(1), i64(2)),
                                  img)
    np.testing.assert_array_equal(L.image_to_planes(img, i64(2), (i64(2), i64(1)), 2, 4, i64(8)),
                                  L.image_to_planes(img, 2, (2, 1), 2, 4, 8))
    w = rng.standard_normal((5, 3, 2, 2)).astype(np.float32)
    tw = L.taps_to_blocks(w, i64(2), np.int32(2))
    np.testing.assert_array_equal(tw, L.taps_to_blocks(w, 2, 2))
    back = L.taps_from_blocks(tw[None], i64(5), i64(3), (i64(2), 2), c_rows=True)
    np.testing.assert_array_equal(back, w)
    assert pick_block(i64(96), i64(64), np.int32(16)) == 48
    assert L.nblocks(i64(10), np.int32(3)) == 4
    lay = L.matrix_tiles(i64(10), 8, i64(4), 8, ("r", "c"))
    assert lay.shape == (3, 1, 4, 8) and all(type(n) is int for n in lay.shape + lay.strides)
    assert L.Layout([i64(1)], N=i64(2)).shape == (2,)


@pytest.mark.parametrize("call", [
    lambda x, img, w, b: to_blocks(x, b, b + 1),
    lambda x, img, w, b: L.image_to_blocks(img, b, 2**20, 2**20),
    lambda x, img, w, b: L.taps_to_blocks(w, b, b - 1),
])
def test_results_too_large_for_memory_name_out(rng, call):
    """Valid block sizes whose padded result cannot be allocated: a MemoryError
    naming out and the result's size (it was NumPy's message alone)."""
    b = int(rng.integers(2**29, 2**30))
    x = rng.standard_normal((3, 5)).astype(np.float32)
    img = rng.standard_normal((1, 2, 3, 3)).astype(np.float32)
    w = rng.standard_normal((2, 3, 1, 1)).astype(np.float32)
    with pytest.raises(MemoryError, match=r"^out: a new float32 result of shape .* GiB\) cannot"):
        call(x, img, w, b)
