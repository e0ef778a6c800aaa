"""Bad input raises ValueError or TypeError naming the argument, before any
native code runs; the native layer rejects what slips through with a code."""
import numpy as np
import pytest

import brgemm
from brgemm.backend import cpu

f32 = np.float32


def ok(m=4, n=5, k=3, count=2, dtype=f32):
    return (np.ones((count, m, k), dtype), np.ones((count, k, n), dtype),
            np.zeros((m, n), np.float32))


@pytest.mark.parametrize("kwargs,exc,names", [
    (dict(m=0, n=1, k=1), ValueError, "m"),
    (dict(m=1, n=-2, k=1), ValueError, "n"),
    (dict(m=1, n=1, k=2**31), ValueError, "k"),
    (dict(m=1.5, n=1, k=1), TypeError, "m"),
    (dict(m=True, n=1, k=1), ValueError, "m"),
    (dict(m=1, n=1, k="3"), TypeError, "k"),
    (dict(m=1, n=1, k=1, dtype="f16"), ValueError, "dtype"),
    (dict(m=1, n=1, k=1, dtype=np.float32), ValueError, "dtype"),
    (dict(m=1, n=1, k=1, beta=float("nan")), ValueError, "beta"),
    (dict(m=1, n=1, k=1, alpha="2"), TypeError, "alpha"),
    (dict(m=1, n=1, k=1, backend="tpu"), ValueError, "backend"),
    (dict(m=1, n=1, k=1, backend=3), ValueError, "backend"),
    (dict(m=2, n=3, k=4, lda=3), ValueError, "lda"),
    (dict(m=2, n=3, k=4, ldb=2), ValueError, "ldb"),
])
def test_constructor(kwargs, exc, names):
    with pytest.raises(exc, match=rf"^{names}\b"):
        brgemm.Kernel(**kwargs)


def test_unavailable_backend_is_a_clear_error():
    for name in ("sycl", "cuda"):
        if name not in brgemm.backends():
            with pytest.raises(brgemm.BackendUnavailable, match=rf"backend: '{name}'"):
                brgemm.Kernel(2, 2, 2, backend=name)


def strd_cases():
    A, B, C = ok()
    big = np.zeros((2, 4, 6), f32)
    Cbig = np.zeros((4, 10), f32)
    ro = C.copy()
    ro.flags.writeable = False
    return [
        ("A as list", (A.tolist(), B, C), TypeError, "A"),
        ("A float64", (A.astype(np.float64), B, C), TypeError, "A"),
        ("A bf16 in f32 kernel", (A.astype(brgemm.bfloat16), B, C), TypeError, "A"),
        ("A 2-D", (A[0], B, C), ValueError, "A"),
        ("A wrong m", (np.ones((2, 3, 3), f32), B, C), ValueError, "A"),
        ("B wrong k", (A, np.ones((2, 4, 5), f32), C), ValueError, "B"),
        ("B count", (A, np.ones((3, 3, 5), f32), C), ValueError, "B"),
        ("C shape", (A, B, np.zeros((5, 4), f32)), ValueError, "C"),
        ("C float64", (A, B, np.zeros((4, 5))), TypeError, "C"),
        ("C bf16 in f32 kernel", (A, B, np.zeros((4, 5), brgemm.bfloat16)), TypeError, "C"),
        ("C read-only", (A, B, ro), ValueError, "C"),
        ("C strided columns", (A, B, Cbig[:, ::2]), ValueError, "C"),
        ("A strided columns", (big[:, :, ::2], B, C), ValueError, "A"),
        ("A reversed batch", (A[::-1], B, C), ValueError, "A"),
        ("A reversed rows", (A[:, ::-1], B, C), ValueError, "A"),
        ("C reversed rows", (A, B, np.zeros((4, 5), f32)[::-1]), ValueError, "C"),
        ("C overlaps B", (np.ones((1, 5, 5), f32), None, None), ValueError, "C"),
    ]


@pytest.mark.parametrize("label,args,exc,name", strd_cases(), ids=[c[0] for c in strd_cases()])
def test_stride_form(label, args, exc, name):
    if label == "C overlaps B":
        B = np.ones((1, 5, 5), f32)
        with pytest.raises(ValueError, match=r"^C: overlaps B"):
            brgemm.Kernel(5, 5, 5)(np.ones((1, 5, 5), f32), B, B[0])
        return
    with pytest.raises(exc, match=rf"^{name}\b"):
        brgemm.Kernel(4, 5, 3)(*args)


def test_interleaved_views_are_not_overlap():
    """C and A in one buffer, disjoint columns: byte ranges meet, elements do not."""
    rng = np.random.default_rng()
    big = rng.standard_normal((6, 10)).astype(f32)
    C, A = big[:, :5], big[:, 5:8][None]
    B = rng.standard_normal((1, 3, 5)).astype(f32)
    want = C.astype(np.float64) + A[0].astype(np.float64) @ B[0]
    kern = brgemm.Kernel(6, 5, 3)
    kern(A, B, C)
    np.testing.assert_allclose(C, want, rtol=1e-5, atol=1e-5)
    kern(A, B, C)  # the second call takes the cached-geometry path
    np.testing.assert_allclose(C, want + A[0].astype(np.float64) @ B[0], rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"^C: overlaps A"):
        kern(big[:, 4:7][None], B, C)  # column 4 is in both


def test_packed_b_from_another_kernel():
    B = np.ones((2, 4, 6), brgemm.bfloat16)
    packed = brgemm.Kernel(3, 6, 4, dtype="bf16").pack_b(B)
    with pytest.raises(ValueError, match=r"^B: .*packed for another kernel"):
        brgemm.Kernel(3, 6, 8, dtype="bf16")(np.ones((2, 3, 8), brgemm.bfloat16), packed,
                                             np.zeros((3, 6), f32))
    with pytest.raises(ValueError, match=r"^B: has 2 packed blocks, A has 1"):
        brgemm.Kernel(3, 6, 4, dtype="bf16")(np.ones((1, 3, 4), brgemm.bfloat16), packed,
                                             np.zeros((3, 6), f32))


def test_packed_b_checked_after_the_first_call():
    """A packed call of a seen geometry skips the checks but not the ones its
    arguments can still fail: C read-only, C over B's packed blocks."""
    kern = brgemm.Kernel(2, 16, 4, dtype="bf16", beta=0.0)
    A = np.ones((2, 2, 4), brgemm.bfloat16)
    packed = kern.pack_b(np.ones((2, 4, 16), brgemm.bfloat16))
    C = np.zeros((2, 16), np.float32)
    kern(A, packed, C)
    np.testing.assert_array_equal(C, 8.0)
    C.flags.writeable = False
    with pytest.raises(ValueError, match=r"^C: is read-only"):
        kern(A, packed, C)
    if packed.data.dtype == np.uint16:  # a bf16 C laid over B's packed blocks
        over = packed.data.reshape(-1)[:32].view(brgemm.bfloat16).reshape(2, 16)
        first = np.zeros((2, 16), brgemm.bfloat16)
        kern(A, packed, first)  # the same geometry as `over`, seen without overlap
        with pytest.raises(ValueError, match=r"^C: overlaps B"):
            kern(A, packed, over)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_read_only_c_of_a_geometry_seen_before_the_last(dtype):
    """The stride form remembers its last geometry and a cache of older ones:
    a read-only C is refused on either path."""
    dt = np.float32 if dtype == "f32" else brgemm.bfloat16
    kern = brgemm.Kernel(2, 3, 4, dtype=dtype)
    A, B = np.ones((1, 2, 4), dt), np.ones((1, 4, 3), dt)
    C, other = np.zeros((2, 3), f32), np.zeros((2, 5), f32)[:, :3]  # two geometries of C
    kern(A, B, C)
    kern(A, B, other)  # now C's geometry is cached but not the last
    C.flags.writeable = False
    with pytest.raises(ValueError, match=r"^C: is read-only"):
        kern(A, B, C)
    np.testing.assert_array_equal(C, 4.0)


def test_address_form():
    A, B, C = ok()
    kern = brgemm.Kernel(4, 5, 3)
    with pytest.raises(TypeError, match=r"^As\b"):
        kern.addr(A, list(B), C)
    with pytest.raises(TypeError, match=r"^Bs\b"):
        kern.addr(list(A), 7, C)
    with pytest.raises(ValueError, match=r"^Bs: has 1 blocks, As has 2"):
        kern.addr(list(A), [B[0]], C)
    with pytest.raises(ValueError, match=r"^As\[1\]"):
        kern.addr([A[0], np.ones((4, 4), f32)], list(B), C)
    with pytest.raises(TypeError, match=r"^Bs\[0\]"):
        kern.addr(list(A), [B[0].astype(np.float64), B[1]], C)
    with pytest.raises(TypeError, match=r"^As\[0\]"):
        kern.addr([None, A[1]], list(B), C)
    wide = np.ones((4, 9), f32)
    with pytest.raises(ValueError, match=r"^As\[1\]: row stride 9 differs"):
        kern.addr([A[0], wide[:, :3]], list(B), C)
    with pytest.raises(ValueError, match=r"^C: overlaps Bs\[1\]"):
        kern2 = brgemm.Kernel(5, 5, 5)
        blocks = [np.ones((5, 5), f32), np.ones((5, 5), f32)]
        kern2.addr([np.ones((5, 5), f32)] * 2, blocks, blocks[1])


def test_offset_form():
    kern = brgemm.Kernel(4, 5, 3)
    A, B, C = np.ones(40, f32), np.ones(60, f32), np.zeros((4, 5), f32)
    with pytest.raises(ValueError, match=r"^a_offsets: block 1 at offset 29 needs 12 elements, the buffer has 40"):
        kern.offs(A, B, [0, 29], [0, 0], C)
    with pytest.raises(ValueError, match=r"^b_offsets: block 0 at offset 46"):
        kern.offs(A, B, [0, 0], [46, 0], C)
    with pytest.raises(ValueError, match=r"^a_offsets: offset -1 is negative"):
        kern.offs(A, B, [0, -1], [0, 0], C)
    with pytest.raises(TypeError, match=r"^a_offsets: expected integer"):
        kern.offs(A, B, [0.0, 1.0], [0, 0], C)
    with pytest.raises(TypeError, match=r"^b_offsets: expected integer"):
        kern.offs(A, B, [0, 1], [True, False], C)
    with pytest.raises(ValueError, match=r"^a_offsets: offset 9223372036854775813 is past"):
        kern.offs(A, B, np.array([0, 2**63 + 5], np.uint64), [0, 0], C)  # not wrapped negative
    with pytest.raises(ValueError, match=r"^a_offsets: expected a 1-D"):
        kern.offs(A, B, [[0, 1]], [0, 0], C)
    with pytest.raises(ValueError, match=r"^b_offsets: has 1 offsets, a_offsets has 2"):
        kern.offs(A, B, [0, 1], [0], C)
    with pytest.raises(ValueError, match=r"^A: the offset form reads a flat buffer"):
        kern.offs(np.ones((8, 10), f32)[:, ::2], B, [0], [0], C)
    with pytest.raises(TypeError, match=r"^B: expected a numpy.ndarray"):
        kern.offs(A, B.tolist(), [0], [0], C)
    huge = brgemm.Kernel(4, 5, 3, lda=100)
    with pytest.raises(ValueError, match=r"^a_offsets: block 0 at offset 0 needs 303"):
        huge.offs(A, B, [0], [0], C)


def test_one_shot_errors():
    with pytest.raises(TypeError, match=r"^A\b"):
        brgemm.brgemm(np.ones((2, 2)), np.ones((1, 2, 2)), np.zeros((2, 2)))
    with pytest.raises(TypeError, match=r"^A: expected dtype"):
        brgemm.brgemm(np.ones((1, 2, 2), np.int32), np.ones((1, 2, 2)), np.zeros((2, 2)))


def desc(**over):
    d = dict(dtype_ab=cpu.lib.BRGEMM_F32, dtype_c=cpu.lib.BRGEMM_F32, form=cpu.lib.BRGEMM_STRD,
             m=4, n=4, k=4, lda=4, ldb=4, ldc=4, stride_a=16, stride_b=16, alpha=1.0, beta=1.0)
    d.update(over)
    return cpu.ffi.new("brgemm_cpu_desc *", d)


@pytest.mark.parametrize("over", [
    dict(m=0), dict(n=-1), dict(k=2**31), dict(lda=3), dict(ldb=3), dict(ldc=1),
    dict(dtype_ab=7), dict(dtype_c=cpu.lib.BRGEMM_BF16), dict(form=9), dict(stride_a=-1),
])
def test_native_layer_rejects_bad_descriptors(over):
    out = cpu.ffi.new("brgemm_cpu_kernel **")
    assert cpu.lib.brgemm_cpu_create(desc(**over), out) == cpu.lib.BRGEMM_EINVAL
    assert out[0] == cpu.ffi.NULL


def test_native_layer_rejects_bad_calls():
    out = cpu.ffi.new("brgemm_cpu_kernel **")
    assert cpu.lib.brgemm_cpu_create(desc(), out) == cpu.lib.BRGEMM_OK
    kern = cpu.ffi.gc(out[0], cpu.lib.brgemm_cpu_destroy)
    buf = np.zeros(64, f32)
    p, null = cpu.ffi.from_buffer(buf), cpu.ffi.NULL
    lib = cpu.lib
    assert lib.brgemm_cpu_run_strd(null, p, p, p, 1, 0, 0) == lib.BRGEMM_EINVAL
    assert lib.brgemm_cpu_run_strd(kern, null, p, p, 1, 0, 0) == lib.BRGEMM_EINVAL
    assert lib.brgemm_cpu_run_strd(kern, p, p, null, 1, 0, 0) == lib.BRGEMM_EINVAL
    assert lib.brgemm_cpu_run_strd(kern, p, p, p, -1, 0, 0) == lib.BRGEMM_EINVAL
    assert lib.brgemm_cpu_run_strd(kern, p, p, p, 1, 1, 0) == lib.BRGEMM_EINVAL  # f32 has no packing
    # byte ranges of C and A meet: refused untouched when asked to check
    buf[:] = 3.0
    assert lib.brgemm_cpu_run_strd(kern, p, p + 16, p + 32, 1, 0, 1) == lib.BRGEMM_EOVERLAP
    assert np.all(buf == 3.0)
    far = np.zeros(64, f32)
    assert lib.brgemm_cpu_run_strd(kern, p, p + 16, cpu.ffi.from_buffer(far), 1, 0, 1) == lib.BRGEMM_OK
    # a kernel made for the stride form refuses the others
    arr = cpu.ffi.new("void *[]", [p])
    offs = cpu.ffi.new("int64_t[]", [0])
    assert lib.brgemm_cpu_run_addr(kern, arr, arr, p, 1, 0) == lib.BRGEMM_EINVAL
    assert lib.brgemm_cpu_run_offs(kern, p, p, offs, offs, p, 1, 0) == lib.BRGEMM_EINVAL
    assert lib.brgemm_cpu_pack_b(kern, p, 4, p) == lib.BRGEMM_EINVAL


def test_native_layer_rejects_null_blocks_and_negative_offsets():
    lib, ffi = cpu.lib, cpu.ffi
    buf = np.zeros(64, f32)
    p = ffi.from_buffer(buf)
    for form in (lib.BRGEMM_ADDR, lib.BRGEMM_OFFS):
        out = ffi.new("brgemm_cpu_kernel **")
        assert lib.brgemm_cpu_create(desc(form=form), out) == lib.BRGEMM_OK
        kern = ffi.gc(out[0], lib.brgemm_cpu_destroy)
        if form == lib.BRGEMM_ADDR:
            assert lib.brgemm_cpu_run_addr(kern, ffi.new("void *[]", [p, ffi.NULL]),
                                           ffi.new("void *[]", [p, p]), p, 2, 0) == lib.BRGEMM_EINVAL
        else:
            assert lib.brgemm_cpu_run_offs(kern, p, p, ffi.new("int64_t[]", [0, -4]),
                                           ffi.new("int64_t[]", [0, 0]), p, 2, 0) == lib.BRGEMM_EINVAL
