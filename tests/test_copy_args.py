"""brgemm.im2col's and brgemm.vnni's copies refuse bad geometry and thread
counts with errors naming the argument, as brgemm.layouts' copies do, and
take NumPy integers as ints; every copy's yes/no arguments take bools (NumPy's
too) and 0 / 1, and name anything else (results against NumPy references)."""
import numpy as np
import pytest

import brgemm
from brgemm import im2col, layouts, vnni

X_SHAPE = (1, 3, 6, 5)


def _image(rng):
    return rng.standard_normal(X_SHAPE).astype(np.float32)


def _columns_ref(x, R, S, sh, sw, ph, pw):
    """The plain im2col matrix [C R S][N P Q] in float64."""
    N, C, H, W = x.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    P, Q = (H + 2 * ph - R) // sh + 1, (W + 2 * pw - S) // sw + 1
    cols = np.empty((C * R * S, N * P * Q))
    for c in range(C):
        for r in range(R):
            for s in range(S):
                patch = xp[:, c, r:r + sh * P:sh, s:s + sw * Q:sw]
                cols[(c * R + r) * S + s] = patch.reshape(-1)
    return cols


@pytest.mark.parametrize("kw, exc, name", [
    (dict(kernel=3), TypeError, "kernel"), (dict(kernel=(3, 0)), ValueError, "kernel"),
    (dict(kernel=(2.0, 2)), TypeError, "kernel"), (dict(stride=(1,)), TypeError, "stride"),
    (dict(stride=(0, 1)), ValueError, "stride"), (dict(padding=1), TypeError, "padding"),
    (dict(padding=(-1, 0)), ValueError, "padding"), (dict(bd=0), ValueError, "bd"),
    (dict(bp=2.5), TypeError, "bp"), (dict(threads=0), ValueError, "threads"),
    (dict(threads=-2), ValueError, "threads"), (dict(threads="2"), TypeError, "threads"),
])
def test_image_to_columns_names_bad_arguments(rng, kw, exc, name):
    args = dict(kernel=(3, 3), stride=(1, 1), padding=(1, 1), bd=8, bp=8) | kw
    with pytest.raises(exc, match=rf"^{name}: "):
        im2col.image_to_columns(_image(rng), **args)


def test_image_to_columns_takes_numpy_ints(rng):
    x = _image(rng)
    i = np.int64
    t = im2col.image_to_columns(x, (i(3), i(2)), (i(2), i(1)), (i(1), i(0)), i(4), i(8),
                                threads=np.int32(2))
    want = _columns_ref(x, 3, 2, 2, 1, 1, 0)
    D, M = want.shape
    got = brgemm.layouts.from_blocks(t, D, M, swap_grid=True)  # tiles [Pb][Db][bd][bp]
    np.testing.assert_array_equal(got, want.astype(np.float32))


@pytest.mark.parametrize("kw, exc, name", [
    (dict(shape=(1, 3, 6)), TypeError, "shape"), (dict(shape=(1, 0, 6, 5)), ValueError, "shape"),
    (dict(kernel=(3, -1)), ValueError, "kernel"), (dict(padding=(1, 1.5)), TypeError, "padding"),
    (dict(threads=0), ValueError, "threads"),
])
def test_columns_to_image_names_bad_arguments(rng, kw, exc, name):
    args = dict(shape=X_SHAPE, kernel=(3, 3), stride=(1, 1), padding=(1, 1)) | kw
    xc = rng.standard_normal((1 * 6 * 5, 3 * 9)).astype(np.float32)
    with pytest.raises(exc, match=rf"^{name}: "):
        im2col.columns_to_image(xc, **args)


@pytest.mark.parametrize("threads, exc", [(0, ValueError), (-1, ValueError), (1.0, TypeError)])
def test_vnni_tiles_names_bad_threads(rng, threads, exc):
    x = rng.standard_normal((2, 4, 6)).astype(brgemm.bfloat16)
    with pytest.raises(exc, match=r"^threads: "):
        vnni.vnni_tiles(x, threads=threads)


def test_vnni_tiles_pairs_rows(rng):
    x = rng.standard_normal((3, 4, 6)).astype(brgemm.bfloat16)
    got = vnni.vnni_tiles(x, threads=np.int64(2))
    want = x.reshape(3, 2, 2, 6).transpose(0, 1, 3, 2).reshape(3, 4, 6)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def _flag_calls(rng):
    """Each copy with a yes/no argument: (its name, a call taking that argument)."""
    m = rng.standard_normal((6, 8)).astype(np.float32)
    t = layouts.to_blocks(m, 2, 4)
    x = _image(rng)
    w = rng.standard_normal((4, 6, 3, 3)).astype(np.float32)
    dw = rng.standard_normal((1, 1, 2, 9, 4, 4)).astype(np.float32)
    return {
        "transpose": lambda v: layouts.to_blocks(m, 2, 4, transpose=v),
        "swap_grid": lambda v: layouts.from_blocks(t, 6, 8, swap_grid=v) if not v else
        layouts.from_blocks(layouts.to_blocks(m, 2, 4, swap_grid=True), 6, 8, swap_grid=v),
        "vnni": lambda v: layouts.to_blocks(m.astype(brgemm.bfloat16), 2, 4, vnni=v),
        "pixels_last": lambda v: layouts.image_to_blocks(x, 4, 8, 7, 1, 1, pixels_last=v),
        "transposed": lambda v: layouts.taps_to_blocks(w, 2, 3, transposed=v),
        "c_rows": lambda v: layouts.taps_from_blocks(dw, 4, 8, (3, 3), c_rows=v),
        "im2col transposed": lambda v: im2col.image_to_columns(x, (3, 3), (1, 1), (1, 1), 8,
                                                               8, transposed=v),
    }


@pytest.mark.parametrize("name", ["transpose", "swap_grid", "vnni", "pixels_last", "transposed",
                                  "c_rows", "im2col transposed"])
def test_yes_no_arguments_take_bools_and_name_the_rest(rng, name):
    call = _flag_calls(rng)[name]
    for yes in (True, np.True_, 1, np.int8(1)):
        np.testing.assert_array_equal(np.asarray(call(yes), np.float32),
                                      np.asarray(call(True), np.float32))
    for no in (False, np.False_, 0):
        np.testing.assert_array_equal(np.asarray(call(no), np.float32),
                                      np.asarray(call(False), np.float32))
    arg = name.split()[-1]
    for bad in ("yes", 2, 0.5, None, [True]):
        with pytest.raises(TypeError, match=rf"^{arg}: expected True or False"):
            call(bad)
