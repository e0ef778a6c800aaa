"""tests/tolerance.py's rules: the bf16 rounding bound holds for every value in
the interval, and a reference that overflowed fails loudly."""
import numpy as np
import pytest

from tolerance import Approx, assert_close, round_bf16


def test_bf16_bound_covers_the_interval(rng):
    # v as the library holds values before it rounds them to bf16: in f32. A v
    # with no f32 form and a zero bound asks for more than the library can give
    # (its f32 value, then bf16, rounds twice: ml_dtypes 0.7 rounds v itself once,
    # and a v just under a bf16 midpoint whose f32 value is the midpoint failed)
    v = (rng.standard_normal(20000) * np.exp(rng.uniform(-8, 8, 20000))).astype(np.float32)
    v = v.astype(np.float64)
    e = np.abs(v) * np.exp(rng.uniform(-14, -2, v.size)) * (rng.random(v.size) < 0.9)
    r = Approx(v, e).bf16()
    for s in (-1.0, -0.5, 0.0, 0.3, 1.0):  # the library's value anywhere in [v - e, v + e]
        got = round_bf16((v + s * e).astype(np.float32))
        assert np.all(np.abs(got - r.v) <= r.e)
    assert np.all(r.e[e == 0] == 0)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_bound_that_is_not_finite_fails(bad):
    want = Approx(np.ones(4), np.array([0.0, bad, 0.0, 0.0]))
    with np.errstate(invalid="ignore"):  # inf * 0 in the second-order term
        carried = (want, want.bf16(), want * 2.0)
    for w in carried:  # carried through, never dropped
        with pytest.raises(AssertionError, match="reference itself is not finite"):
            assert_close("x", np.ones(4), w)
