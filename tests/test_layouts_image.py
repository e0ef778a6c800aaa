"""The fused layout copies against NumPy references: images (padding, channel
blocks, pixels last with stride phases), convolution weights (tiles per tap,
shares summed), plain conversions; bf16 rounding fused in, views read in
place, thread counts, bad input."""
import numpy as np
import pytest

import brgemm
from brgemm import im2col, layouts as L

BF16 = brgemm.bfloat16


def ref_image(x, bc, Hp, Wp, top, left):
    N, C, H, W = x.shape
    Cb = -(-C // bc)
    full = np.zeros((N, Cb * bc, Hp, Wp), x.dtype)
    full[:, :C, top:top + H, left:left + W] = x
    return full.reshape(N, Cb, bc, Hp, Wp).transpose(0, 1, 3, 4, 2)


@pytest.mark.parametrize("dtypes", [(np.float32, np.float32), (BF16, BF16), (np.float32, BF16)])
@pytest.mark.parametrize("pixels_last,phases", [(False, 1), (True, 1), (True, 2), (True, 3)])
@pytest.mark.parametrize("threads", [1, 3])
def test_image_round_trip(rng, dtypes, pixels_last, phases, threads):
    src, dst = dtypes
    # channel blocks past the copies' groups of 16 channels, rows past their 16 x 16 (AVX-512)
    # sub-blocks
    N, C, H, W = rng.integers(1, 4), rng.integers(1, 80), rng.integers(1, 12), rng.integers(1, 40)
    bc, top, left = int(rng.integers(1, 40)), int(rng.integers(0, 3)), int(rng.integers(0, 3))
    Hp = top + H + int(rng.integers(0, 3))
    Wp = -(-(left + W + int(rng.integers(0, 3))) // phases) * phases
    big = rng.standard_normal((N + 1, C + 2, H + 1, 2 * W)).astype(src)
    x = big[1:, 2:, 1:, ::2] if rng.integers(2) else big[:N, :C, :H, :W]  # a strided view, read in place
    t = L.image_to_blocks(x, bc, Hp, Wp, top, left, pixels_last=pixels_last, phases=phases,
                          dtype=dst, threads=threads)
    ref = ref_image(x.astype(np.float32).astype(dst), bc, Hp, Wp, top, left)
    if pixels_last:  # [N][Cb][Hp][Wp][bc] -> [N][Cb][Hp][phases][bc][Wp/phases]
        ref = ref.reshape(*ref.shape[:3], Wp // phases, phases, bc).transpose(0, 1, 2, 4, 5, 3)
    np.testing.assert_array_equal(t.view(np.uint16 if dst == BF16 else np.uint32),
                                  np.ascontiguousarray(ref).view(np.uint16 if dst == BF16 else np.uint32))
    if not pixels_last:
        back = L.blocks_to_image(np.ascontiguousarray(t), C, H, W, top, left, threads=threads)
        np.testing.assert_array_equal(back, x.astype(np.float32).astype(dst))


@pytest.mark.parametrize("threads", [1, 2])
def test_image_groups_wide(rng, threads):
    """f32 images with a border, wide rows and channel blocks of 16 or more:
    the copies' groups of 16 channels in 16 x 16 blocks (AVX-512, where the
    CPU has it), with ragged last groups and rows, both ways"""
    N, C, H, W = int(rng.integers(1, 3)), int(rng.integers(16, 90)), int(rng.integers(1, 9)), \
        int(rng.integers(16, 60))
    bc, top, left = int(rng.integers(16, 70)), int(rng.integers(1, 3)), int(rng.integers(0, 3))
    Hp, Wp = top + H + int(rng.integers(0, 3)), left + W + int(rng.integers(0, 3))
    print(f"N={N} C={C} H={H} W={W} bc={bc} top={top} left={left} Hp={Hp} Wp={Wp}")
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    t = L.image_to_blocks(x, bc, Hp, Wp, top, left, threads=threads)
    np.testing.assert_array_equal(t, ref_image(x, bc, Hp, Wp, top, left))
    np.testing.assert_array_equal(L.blocks_to_image(t, C, H, W, top, left, threads=threads), x)


def test_blocks_to_image_rounds(rng):
    t = L.image_to_blocks(rng.standard_normal((2, 5, 3, 4)).astype(np.float32), 4, 5, 6, 1, 2)
    got = L.blocks_to_image(t, 5, 3, 4, 1, 2, dtype=BF16)
    np.testing.assert_array_equal(got, L.blocks_to_image(t, 5, 3, 4, 1, 2).astype(BF16))


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("taps", [(1, 1), (3, 3), (1, 7), (5,)])
@pytest.mark.parametrize("dtypes", [(np.float32, np.float32), (BF16, BF16), (np.float32, BF16)])
@pytest.mark.parametrize("size", ["small", "wide", "parts"])
def test_taps_to_blocks(rng, transposed, taps, dtypes, size):
    """parts: fewer (kb, cb) pairs than threads, so each pair's tiles are
    copied in parts of its k and c ranges, ragged ones included."""
    src, dst = dtypes
    K, C = int(rng.integers(1, 50)), int(rng.integers(1, 50))
    bk, bc = int(rng.integers(1, 24)), int(rng.integers(1, 24))
    threads = None
    if size == "wide":  # whole 8 x 8 SIMD blocks inside the tiles, ragged edges around them
        K, C = int(rng.integers(40, 140)), int(rng.integers(20, 90))
        bk, bc = int(rng.integers(16, 65)), int(rng.integers(8, 40))
    if size == "parts":
        bk, bc = int(rng.integers(17, 80)), int(rng.integers(17, 80))
        K, C = int(rng.integers(1, 2 * bk)), int(rng.integers(1, 2 * bc))
        threads = int(rng.choice([3, 7, 16]))
    w = rng.standard_normal((K, C) + taps).astype(src)
    print(f"K={K} C={C} bk={bk} bc={bc} threads={threads}")
    t = L.taps_to_blocks(w, bk, bc, transposed, dtype=dst, threads=threads)
    Kb, Cb, RS = -(-K // bk), -(-C // bc), int(np.prod(taps))
    full = np.zeros((Kb * bk, Cb * bc, RS), dst)
    full[:K, :C] = w.reshape(K, C, RS).astype(np.float32).astype(dst)
    f = full.reshape(Kb, bk, Cb, bc, RS)
    ref = f.transpose(2, 0, 4, 1, 3) if transposed else f.transpose(0, 2, 4, 3, 1)
    np.testing.assert_array_equal(t.astype(np.float32), ref.astype(np.float32))
    if dst == BF16:  # the same tiles in VNNI pairs, in one pass: vnni_tiles' of them, bit for bit
        bk, bc = bk + bk % 2 * transposed, bc + bc % 2 * (not transposed)  # rows paired: even
        t = L.taps_to_blocks(w, bk, bc, transposed, dtype=dst, threads=threads)
        got = L.taps_to_blocks(w, bk, bc, transposed, dtype=dst, threads=threads, vnni=True)
        from brgemm.vnni import vnni_tiles
        want = vnni_tiles(np.ascontiguousarray(t).reshape((-1,) + t.shape[-2:]))
        np.testing.assert_array_equal(got.view(np.uint16).reshape(want.shape),
                                      want.view(np.uint16))


@pytest.mark.parametrize("c_rows", [False, True])
@pytest.mark.parametrize("taps", [(1, 1), (3, 3), (7,)])
@pytest.mark.parametrize("J", [1, 3])
@pytest.mark.parametrize("dtype", [np.float32, BF16])
@pytest.mark.parametrize("parts", [False, True])
def test_taps_from_blocks(rng, c_rows, taps, J, dtype, parts):
    """parts: fewer (kb, cb) pairs than threads, so each pair's tiles are
    summed and written in parts of its k and c ranges, ragged ones included."""
    K, C = int(rng.integers(1, 50)), int(rng.integers(1, 50))
    bk, bc = int(rng.integers(1, 24)), int(rng.integers(1, 24))
    threads = None
    if parts:
        bk, bc = int(rng.integers(17, 80)), int(rng.integers(17, 80))
        K, C = int(rng.integers(1, 2 * bk)), int(rng.integers(1, 2 * bc))
        threads = int(rng.choice([3, 7, 16]))
    print(f"K={K} C={C} bk={bk} bc={bc} threads={threads}")
    Kb, Cb, RS = -(-K // bk), -(-C // bc), int(np.prod(taps))
    tile = (bc, bk) if c_rows else (bk, bc)
    t = rng.standard_normal((J, Kb, Cb, RS) + tile).astype(np.float32)
    got = L.taps_from_blocks(t, K, C, taps, c_rows=c_rows, dtype=dtype, threads=threads)
    s = t.sum(axis=0, dtype=np.float64)
    s = s.transpose(0, 4, 1, 3, 2) if c_rows else s.transpose(0, 3, 1, 4, 2)
    ref = s.reshape(Kb * bk, Cb * bc, RS)[:K, :C].reshape((K, C) + taps)
    tol = 1e-6 * J if dtype == np.float32 else 1e-2
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("transpose", [False, True])
def test_to_blocks_rounds_bf16(rng, transpose):
    x = rng.standard_normal((37, 70)).astype(np.float32)
    t = L.to_blocks(x, 16, 24, transpose=transpose, dtype=BF16)
    np.testing.assert_array_equal(t, L.to_blocks(x.astype(BF16), 16, 24, transpose=transpose))
    np.testing.assert_array_equal(L.from_blocks(L.to_blocks(x, 16, 24), 37, 70, dtype=BF16),
                                  x.astype(BF16))


def test_convert(rng):
    x = rng.standard_normal((3, 5000)).astype(np.float32)
    x[0, :4] = [np.nan, np.inf, -np.inf, 3.0e38]  # NaN stays NaN, overflow rounds to inf
    got = L.convert(x, BF16)
    ref = x.astype(BF16)
    np.testing.assert_array_equal(np.isnan(got.astype(np.float32)), np.isnan(ref.astype(np.float32)))
    ok = ~np.isnan(x)
    np.testing.assert_array_equal(got[ok], ref[ok])
    view = x[:, ::2]  # rows not contiguous
    np.testing.assert_array_equal(L.convert(view, np.float32), view)
    assert L.convert(x, np.float32) is x


def test_bad_input(rng):
    x = np.ones((1, 2, 3, 4), np.float32)
    with pytest.raises(ValueError, match="^Hp, Wp"):
        L.image_to_blocks(x, 2, 2, 4)
    with pytest.raises(ValueError, match="^x: expected"):
        L.image_to_blocks(np.ones((2, 3), np.float32), 2, 3, 3)
    with pytest.raises(TypeError, match="^dtype"):
        L.image_to_blocks(x.astype(BF16), 2, 3, 4, dtype=np.float32)
    with pytest.raises(TypeError, match="^x: expected float32 or bfloat16"):
        L.image_to_blocks(x.astype(np.float64), 2, 3, 4)
    with pytest.raises(ValueError, match="^out"):
        L.image_to_blocks(x, 2, 3, 4, out=np.empty(3, np.float32))
    with pytest.raises(ValueError, match="^t: blocks"):
        L.blocks_to_image(np.ones((1, 1, 3, 4, 2), np.float32), 5, 3, 4)
    with pytest.raises(ValueError, match="^t: tiles"):
        L.taps_from_blocks(np.ones((1, 1, 1, 9, 2, 2), np.float32), 4, 2, (3, 3))
    with pytest.raises(ValueError, match="^w: expected"):
        L.taps_to_blocks(np.ones(3, np.float32), 2, 2)
    with pytest.raises(ValueError, match="^out: overlaps"):
        L.convert(x, np.float32, out=x)


def test_native_layer_rejects_bad_arguments():
    from brgemm.backend import cpu
    lib, ffi, EINVAL = cpu.lib, cpu.ffi, cpu.lib.BRGEMM_EINVAL
    buf = np.zeros(4096, np.float32)
    p = cpu.address(buf)
    strides = ffi.new("int64_t[4]", [64, 16, 4, 1])
    bad_strides = ffi.new("int64_t[4]", [64, -16, 4, 1])
    assert lib.brgemm_cpu_image_to_blocks(ffi.NULL, 1, 4, 4, 4, strides, 4, 4, 4, 4, 0, 0, 1, 0,
                                          p, 4, 1) == EINVAL
    assert lib.brgemm_cpu_image_to_blocks(p, 1, 4, 4, 4, bad_strides, 4, 4, 4, 4, 0, 0, 1, 0,
                                          p, 4, 1) == EINVAL
    assert lib.brgemm_cpu_image_to_blocks(p, 1, 4, 4, 4, strides, 4, 4, 4, 3, 0, 0, 1, 0,
                                          p, 4, 1) == EINVAL  # Wp < W
    assert lib.brgemm_cpu_image_to_blocks(p, 1, 4, 4, 4, strides, 2, 4, 4, 4, 0, 0, 1, 0,
                                          p, 4, 1) == EINVAL  # bf16 -> f32
    assert lib.brgemm_cpu_blocks_to_image(p, 1, 4, 4, 4, 4, 4, 4, 1, 0, 4, p, 4, 1) == EINVAL
    assert lib.brgemm_cpu_image_to_planes(p, 1, 4, 4, 4, strides, 4, 4, 0, 0, 1, 1, 4, 4, 15,
                                          p, 4, 1) == EINVAL  # L < Hs * Ws
    assert lib.brgemm_cpu_image_to_planes(p, 1, 4, 4, 4, strides, 4, 4, 0, 1, 1, 1, 4, 4, 16,
                                          p, 4, 1) == EINVAL  # Ws * sw < left + W
    assert lib.brgemm_cpu_image_to_planes(p, 1, 4, 4, 4, bad_strides, 4, 4, 0, 0, 1, 1, 4, 4, 16,
                                          p, 4, 1) == EINVAL
    assert lib.brgemm_cpu_image_to_columns(p, 1, 4, 4, 4, bad_strides, 4, 3, 3, 1, 1, 1, 1, 4, 4,
                                           16, 16, p, 4, 0, 1) == EINVAL
    assert lib.brgemm_cpu_image_to_columns(p, 1, 4, 4, 4, strides, 4, 3, 3, 0, 1, 1, 1, 4, 4,
                                           16, 16, p, 4, 1, 1) == EINVAL  # stride 0
    f = ffi.cast("float *", p)
    assert lib.brgemm_cpu_columns_to_image(f, 8, 1, 1, 3, 3, 3, 3, 1, 1, 0, 0, 1, 1, f,
                                           1) == EINVAL  # ld < C R S
    assert lib.brgemm_cpu_conv_weights_to_blocks(p, 4, 4, 0, 4, 4, 4, 0, 0, p, 4, 1) == EINVAL
    # in VNNI pairs: not with an odd bc (w), an odd bk (wt), nor f32 tiles
    for bk, bc, transposed, di in ((4, 3, 0, 2), (3, 4, 1, 2), (4, 4, 0, 4)):
        assert lib.brgemm_cpu_conv_weights_to_blocks(p, 4, 4, 1, 2, bk, bc, transposed, 1, p,
                                                     di, 1) == EINVAL
    assert lib.brgemm_cpu_conv_weights_from_blocks(ffi.cast("float *", p), 0, 4, 4, 1, 4, 4, 0,
                                                   p, 4, 1) == EINVAL
    assert lib.brgemm_cpu_convert(p, 2, 8, 4, 4, p, 4, 1) == EINVAL  # ld < cols
    assert lib.brgemm_cpu_column_sums(p, 2, 0, 4, 4, ffi.cast("float *", p), 1) == EINVAL
    assert lib.brgemm_cpu_to_blocks(p, 4, 4, 4, 0, 0, 2, 2, 2, p, 4, 1) == EINVAL


@pytest.mark.parametrize("dtypes", [(np.float32, np.float32), (BF16, BF16), (np.float32, BF16)])
def test_image_without_border(rng, dtypes):
    # contiguous rows, no border: copied as one long row per channel block, in pixel chunks
    src, dst = dtypes
    N, C, H, W = int(rng.integers(1, 4)), int(rng.integers(1, 40)), int(rng.integers(1, 30)), \
        int(rng.integers(1, 30))
    bc = int(rng.integers(1, 20))
    x = rng.standard_normal((N, C, H, W)).astype(src)
    t = L.image_to_blocks(x, bc, H, W, dtype=dst, threads=3)
    ref = ref_image(x.astype(np.float32).astype(dst), bc, H, W, 0, 0)
    np.testing.assert_array_equal(t.astype(np.float32), ref.astype(np.float32))
    back = L.blocks_to_image(np.ascontiguousarray(t), C, H, W, threads=3)
    np.testing.assert_array_equal(back.astype(np.float32), x.astype(np.float32).astype(dst).astype(np.float32))


@pytest.mark.parametrize("dtypes", [(np.float32, np.float32), (BF16, BF16), (np.float32, BF16)])
def test_short_rows_in_a_border(rng, dtypes):
    # contiguous images, rows under and over 12 pixels (under: a plane at a time through a buffer)
    src, dst = dtypes
    N, C, H, W = int(rng.integers(1, 4)), int(rng.integers(1, 40)), int(rng.integers(1, 20)), \
        int(rng.integers(1, 32))
    bc, top, left = int(rng.integers(1, 20)), int(rng.integers(0, 3)), int(rng.integers(0, 3))
    Hp, Wp = top + H + int(rng.integers(0, 3)), left + W + int(rng.integers(0, 3))
    x = rng.standard_normal((N, C, H, W)).astype(src)
    t = L.image_to_blocks(x, bc, Hp, Wp, top, left, dtype=dst, threads=3)
    ref = ref_image(x.astype(np.float32).astype(dst), bc, Hp, Wp, top, left)
    np.testing.assert_array_equal(t.astype(np.float32), ref.astype(np.float32))
    back = L.blocks_to_image(np.ascontiguousarray(t), C, H, W, top, left, threads=3)
    np.testing.assert_array_equal(back.astype(np.float32), x.astype(np.float32).astype(dst).astype(np.float32))


def test_image_with_reversed_single_element_axes(rng):
    """NumPy keeps any stride, even a negative one, on an axis of one element and
    still calls the array contiguous (x[::-1] of a one-image batch): that stride
    is meaningless, and the copy must not refuse or misread it (the API fuzz
    found conv.forward failing on one, seed 3477240310 call 990)."""
    C, H, W = int(rng.integers(1, 20)), int(rng.integers(1, 9)), int(rng.integers(1, 20))
    base = rng.standard_normal((1, C, H, W)).astype(np.float32)
    for x in (base[::-1], base[:, :1][:, ::-1]):
        assert min(x.strides) < 0 and x.flags.c_contiguous
        t = L.image_to_blocks(x, 8, H + 2, W + 1, 1, 0)
        np.testing.assert_array_equal(t, ref_image(np.ascontiguousarray(x), 8, H + 2, W + 1, 1, 0))


@pytest.mark.parametrize("dtypes", [(np.float32, np.float32), (BF16, BF16), (np.float32, BF16)])
@pytest.mark.parametrize("threads", [1, 3])
def test_image_to_planes(rng, dtypes, threads):
    """The flat weight update's x: phase planes of the stride, pixels
    innermost, zeros after each plane's pixels; views read in place."""
    src, dst = dtypes
    N, C, H, W = (int(v) for v in (rng.integers(1, 4), rng.integers(1, 40), rng.integers(1, 12),
                                   rng.integers(1, 30)))
    bc, top, left = int(rng.integers(1, 20)), int(rng.integers(0, 3)), int(rng.integers(0, 3))
    sh, sw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    Hs = -(-(top + H + int(rng.integers(0, 3))) // sh)
    Ws = -(-(left + W + int(rng.integers(0, 3))) // sw)
    Lp = Hs * Ws + int(rng.integers(0, 40))
    print(f"N={N} C={C} H={H} W={W} bc={bc} top={top} left={left} stride={sh, sw} L={Lp}")
    big = rng.standard_normal((N + 1, C + 2, H + 1, 2 * W)).astype(src)
    x = big[1:, 2:, 1:, ::2] if rng.integers(2) else big[:N, :C, :H, :W]
    t = L.image_to_planes(x, bc, (sh, sw), Hs, Ws, Lp, top, left, dtype=dst, threads=threads)
    Cb = -(-C // bc)
    full = np.zeros((N, Cb * bc, Hs * sh, Ws * sw), dst)
    full[:, :C, top:top + H, left:left + W] = x.astype(np.float32).astype(dst)
    ref = np.zeros((N, Cb, sh, sw, bc, Lp), dst)
    for a in range(sh):
        for b in range(sw):
            ref[:, :, a, b, :, :Hs * Ws] = full[:, :, a::sh, b::sw].reshape(N, Cb, bc, Hs * Ws)
    view = np.uint16 if dst == BF16 else np.uint32
    np.testing.assert_array_equal(t.view(view), ref.view(view))
    with pytest.raises(ValueError, match="^Hs, Ws"):
        L.image_to_planes(x, bc, (sh, sw), Hs, Ws, Hs * Ws - 1, top, left)


def random_conv(rng, max_c):
    """A random image batch and convolution for the im2col tests: N, C (under
    max_c), H, W, then the kernel, stride and padding (the kernel fits the
    padded image)."""
    N, C, H, W = (int(v) for v in (rng.integers(1, 4), rng.integers(1, max_c), rng.integers(1, 12),
                                   rng.integers(1, 12)))
    ph, pw = (int(v) for v in rng.integers(0, 3, 2))
    R, S = int(rng.integers(1, H + 2 * ph + 1)), int(rng.integers(1, W + 2 * pw + 1))
    sh, sw = (int(v) for v in rng.integers(1, 4, 2))
    return N, C, H, W, (R, S), (sh, sw), (ph, pw)


@pytest.mark.parametrize("dtypes", [(np.float32, np.float32), (BF16, BF16), (np.float32, BF16)])
@pytest.mark.parametrize("threads", [1, 3])
def test_image_to_columns(rng, dtypes, threads):
    """The im2col tiles of conv's functional forward (conv.columns): rows (c, r,
    s), columns (n, p, q) over all images, zeros in the border and the padded
    rows and columns; views read in place; and, transposed, the tiles of the
    matrix's transpose (conv.columns' update), every element of each."""
    src, dst = dtypes
    for it in range(8):
        N, C, H, W, (R, S), (sh, sw), (ph, pw) = random_conv(rng, 20)
        bd, bp = (int(v) for v in rng.integers(1, 40, 2))
        big = rng.standard_normal((N + 1, C + 2, H + 1, 2 * W)).astype(src)
        x = big[1:, 2:, 1:, ::2] if rng.integers(2) else big[:N, :C, :H, :W]
        if it % 4 == 2:  # stride 1 or 2 across: f32 takes the AVX-512 path (any sh, strides)
            sw = int(rng.integers(1, 3))
        if it % 4 == 0:  # and no padding, columns 1 apart: that path reads x itself, up to
            sw, ph, pw, R, S = int(rng.integers(1, 3)), 0, 0, min(R, H), min(S, W)  # its ends
            x = big[:N, :C, :H, :W] if rng.integers(2) else np.ascontiguousarray(big[:N, :C, :H, :W])
        if it % 2:  # stride 1, output as wide as x, x contiguous: one span per image's rows
            sh = sw = 1
            S, R = 2 * pw + 1, int(rng.integers(1, min(H + 2 * ph, 2 * ph + 2) + 1))
            x = np.ascontiguousarray(x)
        transposed = bool(rng.integers(2))
        print(f"N={N} C={C} H={H} W={W} kernel={R, S} stride={sh, sw} padding={ph, pw} "
              f"blocks={bd, bp} transposed={transposed}")
        t = im2col.image_to_columns(x, (R, S), (sh, sw), (ph, pw), bd, bp, dtype=dst, threads=threads,
                               transposed=transposed)
        P, Q = (H + 2 * ph - R) // sh + 1, (W + 2 * pw - S) // sw + 1
        xp = np.zeros((N, C, H + 2 * ph, W + 2 * pw), dst)
        xp[:, :, ph:ph + H, pw:pw + W] = x.astype(np.float32).astype(dst)
        D, cols = C * R * S, N * P * Q
        Db, Pb = -(-D // bd), -(-cols // bp)
        m = np.zeros((Db * bd, Pb * bp), dst)
        for d in range(D):
            c, r, s = d // (R * S), d // S % R, d % S
            m[d, :cols] = xp[:, c, r:r + sh * (P - 1) + 1:sh, s:s + sw * (Q - 1) + 1:sw].reshape(-1)
        ref = m.reshape(Db, bd, Pb, bp).transpose((0, 2, 3, 1) if transposed else (2, 0, 1, 3))
        view = np.uint16 if dst == BF16 else np.uint32
        np.testing.assert_array_equal(t.view(view), ref.view(view))
    with pytest.raises(ValueError, match="^kernel"):
        im2col.image_to_columns(x, (H + 2 * ph + 1, 1), (1, 1), (ph, pw), 4, 4)


@pytest.mark.parametrize("threads", [1, 3])
def test_columns_to_image(rng, threads):
    """image_to_columns' adjoint (conv.columns' backward-data): each element of
    the transposed im2col matrix summed into the pixel it was read from, taps
    in the padding dropped; rows wider than C R S (a view) read in place.
    Small images take the AVX-512 path (where the CPU has it), every 4th
    image here is large enough for the plain loop."""
    for it in range(8):
        N, C, H, W, (R, S), (sh, sw), (ph, pw) = random_conv(rng, 40)
        if it % 4 == 3:  # a padded plane over 1024 pixels: the plain loop
            H, W = (int(v) for v in rng.integers(33, 45, 2))
        print(f"N={N} C={C} H={H} W={W} kernel={R, S} stride={sh, sw} padding={ph, pw}")
        P, Q = (H + 2 * ph - R) // sh + 1, (W + 2 * pw - S) // sw + 1
        D, extra = C * R * S, int(rng.integers(0, 3))
        xc = rng.standard_normal((N * P * Q, D + extra)).astype(np.float32)[:, :D]
        got = im2col.columns_to_image(xc, (N, C, H, W), (R, S), (sh, sw), (ph, pw), threads=threads)
        # the reference: the padded image's pixels, each tap's slice summed in float64
        want = np.zeros((N, C, H + 2 * ph + sh * R, W + 2 * pw + sw * S))
        taps = xc.astype(np.float64).reshape(N, P, Q, C, R, S)
        for r in range(R):
            for s in range(S):
                want[:, :, r:r + sh * P:sh, s:s + sw * Q:sw] += taps[..., r, s].transpose(0, 3, 1, 2)
        want = want[:, :, ph:ph + H, pw:pw + W]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="xc"):
        im2col.columns_to_image(np.zeros((3, 9), np.float32), (1, 1, 3, 3), (3, 3), (1, 1), (0, 0))
    with pytest.raises(ValueError, match="kernel"):
        im2col.columns_to_image(np.zeros((1, 9), np.float32), (1, 1, 2, 2), (3, 3), (1, 1), (0, 0))


def bf16_bits(x):
    """f32 -> bf16 bits by the library's rule, in NumPy: nearest even; a NaN
    keeps its sign and top payload bits and is made quiet"""
    u = x.view(np.uint32).astype(np.uint64)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
    return np.where(nan, (u >> 16) | 0x40, rounded).astype(np.uint16)


@pytest.mark.parametrize("case", range(6))
def test_rounding_bits(rng, case):
    """every f32 -> bf16 copy rounds as the scalar rule, bit for bit, on random
    bit patterns (NaNs, infinities, subnormals, ties) and lengths that leave
    part-filled SIMD vectors: convert, and dW's taps back to w's layout"""
    n = int(rng.integers(1, 300))
    bits = rng.integers(0, 2**32, (3, n), dtype=np.uint64).astype(np.uint32)
    bits[0, : min(n, 8)] = [0x7F800001, 0xFF800000, 0x00008000, 0x3F808000, 0x3F818000,
                            0x80000001, 0x7FFFFFFF, 0x7F7FFFFF][: min(n, 8)]  # sNaN, -inf, ties
    x = bits.view(np.float32)
    print(f"n={n}")
    np.testing.assert_array_equal(L.convert(x, BF16).view(np.uint16), bf16_bits(x))
    K, C, taps = int(rng.integers(1, 40)), int(rng.integers(1, 40)), int(rng.integers(2, 10))
    w = rng.integers(0, 2**32, (K, C, taps), dtype=np.uint64).astype(np.uint32).view(np.float32)
    bk, bc = 16, 8
    Kb, Cb = -(-K // bk), -(-C // bc)
    padded = np.zeros((Kb * bk, Cb * bc, taps), np.float32)
    padded[:K, :C] = w
    tiles = padded.reshape(Kb, bk, Cb, bc, taps).transpose(0, 2, 4, 1, 3)  # [Kb][Cb][RS][bk][bc]
    for c_rows in (False, True):
        t = np.ascontiguousarray(tiles.swapaxes(-1, -2) if c_rows else tiles)[None]
        got = L.taps_from_blocks(t, K, C, (taps,), c_rows=c_rows, dtype=BF16)
        np.testing.assert_array_equal(got.view(np.uint16), bf16_bits(w))
