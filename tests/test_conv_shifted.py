"""The shifted forward (conv.shifted, conv_in_place.shifted_plan and
brgemm.conv_unwrap): a 3x3 layer with stride 1 and padding 1 on
NCHW x and y in place, rows 1..H-2 as one flat run of pixels and the wrapped
taps taken back after. Against PyTorch (float64): the functional forward on
random sizes where the rule takes the path, the plan and the fix on any
image of 2 rows and 2 columns or more (the rule's 28 columns are a speed
choice), each of the fix's versions (plain, AVX2, AVX-512, as this CPU
runs them), and its argument checks."""
import numpy as np
import pytest

from brgemm.conv_unwrap import conv_unwrap
from primitives import conv
from primitives.conv_in_place import shifted_plan
from test_conv import magnitude, reference


def _case(rng, W_lo, W_hi, H_hi=12):
    N, H, W = int(rng.integers(1, 4)), int(rng.integers(2, H_hi)), int(rng.integers(W_lo, W_hi))
    bc, bk = int(rng.choice([16, 32, 64])), int(rng.choice([16, 32, 64]))
    C, K = bc * int(rng.integers(1, 4)), int(rng.integers(1, 100))  # K ragged against bk
    cfg = {"fwd": {"bc": bc, "bk": bk, "pointwise_bp": int(rng.integers(16, 160)),
                   "shifted": True, "nchw_x": False}}  # on: the AMX table turns it off;
    # nchw_x (x in place, taken first where it applies) off
    print(f"N={N} C={C} K={K} H={H} W={W} {cfg}")
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = rng.standard_normal((K, C, 3, 3)).astype(np.float32)
    return x, w, conv.geometry(N, C, K, H, W, 3, 3, (1, 1), (1, 1), config=cfg), cfg


def _check(y, x, w):
    dy = np.zeros(y.shape, np.float32)
    want, mag = reference(x, w, dy, 1, 1)[0], magnitude(x, w, dy, 1, 1)[0]
    assert y.dtype == np.float32 and y.shape == want.shape
    assert np.all(np.abs(y - want) <= 1e-5 * mag + 1e-30)


def test_forward_shifted(rng):
    for _ in range(4):
        x, w, g, cfg = _case(rng, 28, 70)
        assert conv.shifted(g, "f32", "cpu", x)  # the path under test
        _check(conv.forward(x, w, 1, 1, config=cfg), x, w)


def test_shifted_off_by_config(rng):
    """shifted = false: the rule says no, and the forward takes the path before."""
    x, w, g, cfg = _case(rng, 28, 40)
    cfg["fwd"]["shifted"] = False
    g = conv.geometry(g.N, g.C, g.K, g.H, g.W, 3, 3, (1, 1), (1, 1), config=cfg)
    assert not conv.shifted(g, "f32", "cpu", x)
    _check(conv.forward(x, w, 1, 1, config=cfg), x, w)


def test_shifted_by_kernel_path():
    """The defaults turn the path on; the AMX Xeon's table ("f32@amx") and
    AVX2 kernels' ("f32@avx2") off."""
    shape = (2, 64, 64, 56, 56, 3, 3, (1, 1), (1, 1))
    assert conv.geometry(*shape, path="f32").shifted
    assert not conv.geometry(*shape, path="f32@amx").shifted
    assert not conv.geometry(*shape, path="f32@avx2").shifted


def test_shifted_plan_any_size(rng):
    """The plan and the fix on images the rule leaves to other paths (2 to 27
    columns), y poisoned first: every element written."""
    for _ in range(6):
        x, w, g, _ = _case(rng, 2, 28)
        wt = conv.block_w(w, g, "f32", True)
        y = np.full((g.N, g.K, g.H, g.W), np.nan, np.float32)
        shifted_plan(g, g.pointwise_bp).run(w=wt, x=x, y=y)
        _check(conv_unwrap(y, x, w), x, w)


@pytest.mark.parametrize("isa", [1, 2, 3])
@pytest.mark.parametrize("tall", [False, True])
def test_unwrap_versions(rng, isa, tall):
    """Each version of the fix against float64 on a random y (the plain one
    everywhere; AVX2 and AVX-512 where this CPU runs them, else refused);
    tall images: columns past one block of rows (each version's blocks of
    16 to 64 rows and their last, part-filled vectors)."""
    x, w, g, _ = _case(rng, 2, 40, 150 if tall else 12)
    y0 = rng.standard_normal((g.N, g.K, g.H, g.W)).astype(np.float32)
    try:
        got = conv_unwrap(y0.copy(), x, w, isa=isa)
    except ValueError as e:  # the CPU lacks it: refused, named
        assert isa > 1 and "conv_unwrap" in str(e), e
        pytest.skip(f"isa {isa} not on this CPU")
    H, W = g.H, g.W
    want, mag = y0.astype(np.float64), np.abs(y0).astype(np.float64)
    for r in range(3):  # the products the fix takes back (kernels/cpu/conv_wrap.c)
        for side, (rows, q, s) in enumerate((((2, H - 1), 0, 0), ((1, H - 2), W - 1, 2))):
            p = np.arange(*rows)
            if not len(p):
                continue
            cols = x[:, :, p + r + (-2 if side == 0 else 0), W - 1 if side == 0 else 0]
            want[:, :, p, q] -= np.einsum("kc,ncp->nkp", w[:, :, r, s].astype(np.float64), cols)
            mag[:, :, p, q] += np.einsum("kc,ncp->nkp", np.abs(w[:, :, r, s]).astype(np.float64),
                                         np.abs(cols))
    assert np.all(np.abs(got - want) <= 1e-5 * mag + 1e-30)


def test_unwrap_arguments():
    x = np.zeros((1, 2, 3, 4), np.float32)
    w = np.zeros((5, 2, 3, 3), np.float32)
    y = np.zeros((1, 5, 3, 4), np.float32)
    for name, args in (("x", (y, x.astype(np.float64), w)), ("w", (y, x, w[:, :, :2])),
                       ("y", (y[:, :4], x, w)), ("y", (np.asfortranarray(y), x, w)),
                       ("x", (y, x[0], w)), ("w", (y, x, [1.0]))):
        with pytest.raises(ValueError, match=f"^{name}:"):
            conv_unwrap(*args)
