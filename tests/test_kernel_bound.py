"""Kernel.__call__'s call bound to the last checked arrays' geometry, compared
in C on every call (kernels/cpu/bound_call.h): new arrays of the same
geometry, arrays changed in place, arrays freed and their ids reused, other
types, views and C made read-only between calls all behave as on a first
call; no array is kept alive by the binding. Against float64 NumPy."""
import gc
import warnings
import weakref

import numpy as np
import pytest

import brgemm


def _want(A, B, C0):
    return C0 + np.einsum("imk,ikn->mn", A.astype(np.float64), B.astype(np.float64))


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("packed", [False, True])
def test_bound_calls_follow_the_arrays(rng, dtype, packed):
    npdt = np.float32 if dtype == "f32" else brgemm.bfloat16
    m, n, k, count = (int(v) for v in rng.integers(1, 40, 4))
    print(f"m={m} n={n} k={k} count={count}")
    kern = brgemm.Kernel(m, n, k, dtype=dtype)
    tol = 1e-4 if dtype == "f32" else 1e-2
    for _ in range(6):  # new arrays each time: freed ones' ids may come back
        A = rng.standard_normal((count, m, k)).astype(npdt)
        B = rng.standard_normal((count, k, n)).astype(npdt)
        C = rng.standard_normal((m, n)).astype(np.float32)
        Bk = kern.pack_b(B) if packed else B
        want = C.astype(np.float64)
        for _ in range(2):  # the second call on the same arrays runs bound
            kern(A, Bk, C)
            want = _want(A, B, want)
            np.testing.assert_allclose(C, want, rtol=tol, atol=tol * np.abs(want).max())
        del A, B, Bk, C
        gc.collect()


def test_changes_between_calls_are_checked(rng):
    kern = brgemm.Kernel(4, 8, 6)
    A = rng.standard_normal((2, 4, 6)).astype(np.float32)
    B = rng.standard_normal((2, 6, 8)).astype(np.float32)
    C = np.zeros((4, 8), np.float32)
    kern(A, B, C)
    kern(A, B, C)
    C.flags.writeable = False
    with pytest.raises(ValueError, match="C: is read-only"):
        kern(A, B, C)
    C.flags.writeable = True
    with warnings.catch_warnings():  # NumPy 2.5 deprecates setting a shape in place
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            A.shape = (4, 2, 6)  # in place: the same object, another geometry
        except AttributeError:  # a NumPy that no longer allows it
            pass
        else:
            with pytest.raises(ValueError, match="A: expected blocks of shape"):
                kern(A, B, C)
            A.shape = (2, 4, 6)
    C[...] = 0
    kern(A, B, C)
    np.testing.assert_allclose(C, _want(A, B, np.zeros((4, 8))), rtol=1e-5, atol=1e-5)
    # an overlapping C is still refused on a bound call's arrays
    buf = np.zeros(2 * 4 * 6 + 4 * 8, np.float32)
    A2, C2 = buf[:48].reshape(2, 4, 6), buf[16:48].reshape(4, 8)
    with pytest.raises(ValueError, match="C: overlaps A"):
        kern(A2, B, C2)


def test_the_binding_keeps_no_array_alive(rng):
    kern = brgemm.Kernel(3, 5, 4, dtype="bf16")
    A = rng.standard_normal((2, 3, 4)).astype(brgemm.bfloat16)
    B = kern.pack_b(rng.standard_normal((2, 4, 5)).astype(brgemm.bfloat16))
    C = np.zeros((3, 5), np.float32)
    kern(A, B, C)
    refs = [weakref.ref(x) for x in (A, B.data, C)]
    del A, B, C
    gc.collect()
    assert all(r() is None for r in refs)


class _Sub(np.ndarray):
    pass


def test_each_call_is_compared_with_the_bound_geometry(rng):
    kern = brgemm.Kernel(4, 8, 6)
    A = rng.standard_normal((2, 4, 6)).astype(np.float32)
    B = rng.standard_normal((2, 6, 8)).astype(np.float32)
    want = np.zeros((4, 8))
    C = np.zeros((4, 8), np.float32)
    kern(A, B, C)
    want = _want(A, B, want)
    # a subclass, then a view with a row stride, then the plain arrays again
    for a, c in ((A.view(_Sub), C), (A, C.view(_Sub)), (A, C)):
        kern(a, B, c)
        want = _want(A, B, want)
        np.testing.assert_allclose(C, want, rtol=1e-5, atol=1e-5)
    wide = np.zeros((4, 11), np.float32)
    kern(A, B, wide[:, 2:10])
    np.testing.assert_allclose(wide[:, 2:10], _want(A, B, np.zeros((4, 8))), rtol=1e-5, atol=1e-5)
    assert not wide[:, :2].any() and not wide[:, 10:].any()
    with pytest.raises(TypeError, match="^A: expected a numpy.ndarray"):
        kern(A.tolist(), B, C)
    with pytest.raises(TypeError, match="^B: expected"):
        kern(A, None, C)
    A.dtype = np.int32  # in place: the same object and shape, another dtype
    with pytest.raises(TypeError, match="^A: expected dtype"):
        kern(A, B, C)


def test_a_packed_b_is_fixed(rng):
    kern = brgemm.Kernel(3, 5, 4, dtype="bf16")
    B = kern.pack_b(rng.standard_normal((2, 4, 5)).astype(brgemm.bfloat16))
    for name in ("data", "count", "k", "n", "path", "other"):
        with pytest.raises(AttributeError, match=f"PackedB: {name} is fixed"):
            setattr(B, name, 1)
    A = rng.standard_normal((2, 3, 4)).astype(brgemm.bfloat16)
    C = np.zeros((3, 5), np.float32)
    kern(A, B, C)
    kern(A, B, C)
    with warnings.catch_warnings():  # NumPy 2.5 deprecates setting a shape in place
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            B.data.shape = (1, B.data.size)  # its data, in place: checked again
        except AttributeError:  # a NumPy that no longer allows it
            return
    with pytest.raises(ValueError, match="^B: packed data must be"):
        kern(A, B, C)


def test_a_bound_packed_b_is_known_by_identity(rng):
    """The bound call takes the PackedB it was bound to and no other: one packed
    for another kernel with data of the same geometry goes through the checks."""
    k1, k2 = brgemm.Kernel(3, 6, 4, dtype="bf16"), brgemm.Kernel(3, 4, 6, dtype="bf16")
    B = rng.standard_normal((2, 4, 6)).astype(brgemm.bfloat16)
    P1 = k1.pack_b(B)
    P2 = k2.pack_b(rng.standard_normal((2, 6, 4)).astype(brgemm.bfloat16))
    if not isinstance(P1, brgemm.PackedB) or P1.data.shape != P2.data.shape:
        pytest.skip(f"this path ({k1.path}) packs no blocks of one geometry for both kernels")
    A = rng.standard_normal((2, 3, 4)).astype(brgemm.bfloat16)
    C = np.zeros((3, 6), np.float32)
    k1(A, P1, C)
    k1(A, P1, C)  # bound to P1
    with pytest.raises(ValueError, match="^B: PackedB.* was packed for another kernel"):
        k1(A, P2, C)
    with pytest.raises(TypeError, match="^B: expected dtype"):
        k1(A, P1.data, C)  # the packed data itself is no B
    B3 = rng.standard_normal((2, 4, 6)).astype(brgemm.bfloat16)
    P3 = k1.pack_b(B3)  # another PackedB of this kernel: its own data
    k1(A, P3, C)
    k1(A, P1, C)
    want = _want(A, B, _want(A, B3, _want(A, B, _want(A, B, np.zeros((3, 6))))))
    np.testing.assert_allclose(C, want, rtol=1e-2, atol=1e-2 * np.abs(want).max())


@pytest.mark.parametrize("other", [None, "packed's data"])
def test_a_dead_packed_b_binds_nothing(rng, other):
    """Once the bound PackedB is gone, its weak reference reads None: a call
    with None (or anything else) as B goes through the checks, which name B."""
    kern = brgemm.Kernel(3, 5, 4, dtype="bf16")
    A = rng.standard_normal((2, 3, 4)).astype(brgemm.bfloat16)
    B = rng.standard_normal((2, 4, 5)).astype(brgemm.bfloat16)
    C = np.zeros((3, 5), np.float32)
    P = kern.pack_b(B)
    kern(A, P, C)
    kern(A, P, C)  # bound to P
    data = P.data if isinstance(P, brgemm.PackedB) else None
    del P
    gc.collect()
    with pytest.raises(TypeError, match="^B: "):
        kern(A, None if other is None else data, C)
    want = _want(A, B, _want(A, B, np.zeros((3, 5))))
    np.testing.assert_allclose(C, want, rtol=1e-2, atol=1e-2 * np.abs(want).max())
