"""Per-element tolerances from the data, shared by every sweep.

A reference value is a float64 `Approx`: the exact result of the computation
the library performs (with bf16 roundings where the library rounds its own
intermediates) and, per element, a bound `e` on how far the library's value
may be from it. Inputs are exact (e = 0); each operation widens the bound by
what f32 arithmetic can add:
  - a matrix product or convolution accumulated in f32: GAMMA times the sum
    of |a||b| of that element's reduction (plus what its inputs' bounds carry);
  - an element-wise f32 operation: one f32 rounding of its result, and for
    the epilogue's sigmoid and tanh (a polynomial exp) ACT_ABS absolute;
  - a bf16 rounding of an intermediate the library reuses: the two sides may
    round to neighbouring bf16 values, one bf16 step apart.
A result returned in bf16 may be one rounding (half a step) further off.
Nothing is bounded by a tensor's maximum: a wrong small element fails."""
import numpy as np

import brgemm

GAMMA = 1e-5         # f32 accumulation: |error| <= GAMMA * sum |a||b|
EPS32 = 2.0 ** -23   # one f32 rounding of an element-wise result, relative (twice the unit)
ACT_ABS = 1e-6       # sigmoid / tanh from the epilogue's polynomial exp, absolute


def round_bf16(x):
    """x rounded to bf16 (nearest even), as float64."""
    return np.asarray(x, np.float64).astype(brgemm.bfloat16).astype(np.float64)


def bf16_step(a):
    """One bf16 step (unit in the last place) at magnitude a >= 0."""
    _, e = np.frexp(np.asarray(a, np.float64))
    return np.where(a > 0, np.ldexp(1.0, e - 8), 0.0)


class Approx:
    """A float64 reference value v and a per-element bound e on the library's error."""
    __slots__ = ("v", "e")

    def __init__(self, v, e=None):
        self.v = np.asarray(v, np.float64)
        self.e = np.zeros_like(self.v) if e is None else np.broadcast_to(e, self.v.shape) * 1.0

    @staticmethod
    def of(x):
        return x if isinstance(x, Approx) else Approx(x)

    def _rounded(self, v, e):
        return Approx(v, e + EPS32 * np.abs(v))

    # -- element-wise f32 arithmetic --
    def __add__(self, o):
        o = Approx.of(o)
        return self._rounded(self.v + o.v, self.e + o.e)

    __radd__ = __add__

    def __sub__(self, o):
        o = Approx.of(o)
        return self._rounded(self.v - o.v, self.e + o.e)

    def __rsub__(self, o):
        return Approx.of(o) - self

    def __neg__(self):
        return Approx(-self.v, self.e)

    def __mul__(self, o):
        o = Approx.of(o)
        return self._rounded(self.v * o.v, np.abs(self.v) * o.e + np.abs(o.v) * self.e
                             + self.e * o.e)

    __rmul__ = __mul__

    def sigmoid(self):  # 1/4-Lipschitz
        return Approx(np.exp(-np.logaddexp(0, -self.v)), 0.25 * self.e + ACT_ABS)

    def tanh(self):     # 1-Lipschitz
        return Approx(np.tanh(self.v), self.e + ACT_ABS)

    def relu(self):     # 1-Lipschitz, exact
        return Approx(np.maximum(self.v, 0), self.e)

    def bf16(self):
        """Rounded to bf16 by both sides: equal where the values are, else up to
        one step apart on top of their difference (a NaN bound stays NaN)."""
        v = round_bf16(self.v)
        return Approx(v, np.where(self.e == 0, 0.0, self.e + bf16_step(np.abs(self.v) + self.e)))

    # -- shapes --
    def __getitem__(self, idx):
        return Approx(self.v[idx], self.e[idx])

    shape = property(lambda self: self.v.shape)

    @property
    def T(self):
        return Approx(self.v.T, self.e.T)

    def reshape(self, *shape):
        return Approx(self.v.reshape(*shape), self.e.reshape(*shape))

    def sum(self, axis):
        """A sum in f32 (NumPy's pairwise sum): bounded like a product with ones."""
        a = np.abs(self.v).sum(axis)
        return Approx(self.v.sum(axis), self.e.sum(axis) + GAMMA * a)


def stack(parts, axis=0):
    return Approx(np.stack([p.v for p in parts], axis), np.stack([p.e for p in parts], axis))


def matmul(a, b, c=None):
    """a @ b (+ c, accumulated onto it as a kernel with beta 1 does), f32 accumulation."""
    a, b = Approx.of(a), Approx.of(b)
    v = a.v @ b.v
    mag = (np.abs(a.v) + a.e) @ (np.abs(b.v) + b.e)
    e = GAMMA * mag
    if a.e.any() or b.e.any():
        e = e + np.abs(a.v) @ b.e + a.e @ np.abs(b.v) + a.e @ b.e
    if c is not None:
        c = Approx.of(c)
        v, e = v + c.v, e + c.e + GAMMA * np.abs(c.v)
    return Approx(v, e)


def linear(value, magnitude):
    """A linear map of exact inputs accumulated in f32: its value and the same
    map on |inputs| (the sums of |a||b| the rounding error scales with)."""
    return Approx(value, GAMMA * np.asarray(magnitude, np.float64))


def assert_close(name, got, want, rounded=False, context=""):
    """|got - want.v| <= want.e per element (+ half a bf16 step of the result if
    the library rounded it to bf16 on the way out); NaN or inf anywhere fails,
    in the reference's value or bound too (an overflowed error model checks nothing)."""
    got = np.asarray(got, np.float64)
    if got.shape != want.v.shape:
        raise AssertionError(f"{name}: shape {got.shape}, expected {want.v.shape}. {context}")
    finite = np.isfinite(want.v) & np.isfinite(want.e)
    if not finite.all():
        at = tuple(int(i) for i in np.argwhere(~finite)[0])
        raise AssertionError(
            f"{name}: the reference itself is not finite ({int((~finite).sum())} of "
            f"{got.size} elements; first at {at}: value {want.v[at]:.3g}, bound "
            f"{want.e[at]:.3g}): the error model overflowed, nothing was checked. {context}")
    bound = want.e + (0.5 * bf16_step(np.abs(want.v) + want.e) if rounded else 0.0)
    bound = bound * (1 + 1e-9) + 1e-300
    err = np.abs(got - want.v)
    bad = ~(err <= bound)
    print(f"  {name}: worst err/bound {np.max(err / bound, initial=0):.3g}")
    if bad.any():
        ratio = np.where(bad, np.nan_to_num(err / bound, nan=np.inf), 0)
        worst = np.unravel_index(np.argmax(ratio), got.shape)
        raise AssertionError(
            f"{name}: {int(bad.sum())} of {got.size} elements outside their bound "
            f"({int(np.isnan(got).sum())} NaN); worst at {tuple(int(i) for i in worst)}: got "
            f"{got[worst]:.8g}, want {want.v[worst]:.8g}, bound {bound[worst]:.3g}. {context}")
