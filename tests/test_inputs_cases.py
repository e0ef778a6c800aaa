"""Issue 13's probed inputs, one test each: a clean error that names the
argument, or the right result. Crashes are tried in a subprocess."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import brgemm
from brgemm import plan as P
from brgemm.backend import cpu
from brgemm.config import ConfigError
from primitives.tune import TuneError, tune
from primitives import conv, fc, lstm

f32, bf16 = np.float32, brgemm.bfloat16
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_python(code, env=None, timeout=120):
    """Run code in a fresh interpreter from the repository root: (returncode, output)."""
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, timeout=timeout,
                       capture_output=True, text=True, env={**os.environ, **(env or {})})
    print(p.stdout, p.stderr)
    return p.returncode, p.stdout + p.stderr


def tiny_plan():
    """C[8, 8] = A[8, 8] @ B[8, 8] in 4 tasks, with its arrays."""
    from primitives import gemm
    p = gemm.plan(8, 8, 8, config={"fwd": {"spec": "IJk", "bm": 4, "bn": 4, "bk": 8, "kc": 8}})
    rng = np.random.default_rng()
    A, B = rng.standard_normal((8, 8)).astype(f32), rng.standard_normal((8, 8)).astype(f32)
    return p, dict(A=A, B=B, C=np.zeros((8, 8), f32))


# ---------------------------------------------------------------- crashes

@pytest.mark.parametrize("threads", [100000, 1000, 2**31, 2**63])
def test_huge_thread_counts_are_refused(threads):
    p, arrays = tiny_plan()
    with pytest.raises(ValueError, match=r"^threads: \d+ is more than the \d+ this machine runs"):
        p.run(threads=threads, **arrays)


def test_thread_counts_up_to_the_cap_run():
    p, arrays = tiny_plan()
    cap = cpu.lib.brgemm_cpu_max_threads()
    assert cap >= 8
    for threads in (1, np.int64(3), cap):
        arrays["C"][...] = np.nan
        p.run(threads=threads, **arrays)
        np.testing.assert_allclose(arrays["C"], arrays["A"] @ arrays["B"], rtol=1e-5, atol=1e-5)


def test_omp_num_threads_from_the_environment_is_capped():
    rc, out = run_python("""
        import numpy as np
        from brgemm.backend import cpu
        from primitives import fc
        x, w = np.ones((70, 40), np.float32), np.ones((30, 40), np.float32)
        y = fc.forward(x, w)
        assert np.all(y == 40), y
        print("threads", cpu.lib.brgemm_cpu_plan_threads(0), cpu.lib.brgemm_cpu_max_threads())
    """, env={"OMP_NUM_THREADS": "100000"})
    assert rc == 0, out
    used, cap = map(int, out.split("threads")[1].split()[:2])
    assert used == cap


def test_a_thousand_threads_under_a_memory_limit_do_not_end_the_process():
    """libgomp exits the process when it cannot create a thread; the count is
    refused (or capped) before it gets there."""
    rc, out = run_python("""
        import resource
        import numpy as np
        from primitives import fc
        from primitives import gemm
        p = gemm.plan(64, 64, 64)
        arrays = dict(A=np.ones((64, 64), np.float32), B=np.ones((64, 64), np.float32),
                      C=np.zeros((64, 64), np.float32))
        p.run(threads=2, **arrays)
        vm = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (vm + (600 << 20), resource.RLIM_INFINITY))
        try:
            p.run(threads=1000, **arrays)
        except ValueError as e:
            print("refused:", e)
        p.run(**arrays)  # OMP_NUM_THREADS=1000 below: capped
        assert np.all(arrays["C"] == 64)
        print("alive")
    """, env={"OMP_NUM_THREADS": "1000"})
    assert rc == 0 and "alive" in out and "refused: threads:" in out, out


def packed_case():
    kern = brgemm.Kernel(3, 6, 4, dtype="bf16")
    rng = np.random.default_rng()
    A = rng.standard_normal((2, 3, 4)).astype(bf16)
    B = rng.standard_normal((2, 4, 6)).astype(bf16)
    return kern, A, B, kern.pack_b(B)


def test_packed_b_built_by_hand_is_checked():
    kern, A, B, good = packed_case()
    C = np.zeros((3, 6), f32)
    kern(A, good, C)
    want = np.einsum("imk,ikn->mn", A.astype(np.float64), B.astype(np.float64))
    np.testing.assert_allclose(C, want, rtol=1e-2, atol=1e-2)
    d, path = good.data, good.path
    bad = [
        (P_(d[:, :10], 2, path), ValueError, r"^B: packed data must be a C-contiguous"),
        (P_(d.astype(np.float64), 2, path), TypeError, r"^B: packed data has dtype float64"),
        (P_(d[:1], 2, path), ValueError, r"^B: packed data must be"),  # truncated view
        (P_(np.repeat(d, 2, axis=0)[::2], 2, path), ValueError, r"^B: packed data must be"),
        (P_(d.tolist(), 2, path), TypeError, r"^B: packed data is a list"),
        (P_(d, "2", path), TypeError, r"^B: count '2' is not an int"),
        (P_(d, 1, path), ValueError, r"^B: has 1 packed blocks, A has 2"),
        (brgemm.PackedB(d, 2, 4, 7, path), ValueError, r"^B: .*packed for another kernel"),
        (P_(d, 2, "f32"), ValueError, r"^B: .*packed for another kernel"),
    ]
    for packed, exc, match in bad:
        with pytest.raises(exc, match=match):
            kern(A, packed, C)
    # a count that matches a lying A: the data must hold that many blocks
    with pytest.raises(ValueError, match=r"^B: packed data must be"):
        kern(np.ones((5, 3, 4), bf16), P_(d, 5, path), C)


def P_(data, count, path):
    return brgemm.PackedB(data, count, 4, 6, path)


# ---------------------------------------------------------------- silent wrong results

def lstm_case(K=40):
    rng = np.random.default_rng()
    T, N, C = 4, 3, 24
    x = rng.standard_normal((T, N, C)).astype(f32)
    h0, c0 = (rng.standard_normal((N, K)).astype(f32) for _ in range(2))
    w_ih = (rng.standard_normal((4 * K, C)) * 0.3).astype(f32)
    w_hh = (rng.standard_normal((4 * K, K)) * 0.3).astype(f32)
    b = rng.standard_normal(4 * K).astype(f32)
    return x, h0, c0, w_ih, w_hh, b


@pytest.mark.parametrize("spec", ["tKN", "NKt", "TNK", "Kt|N", "tNK", "ktn", "KNt"])
def test_lstm_specs_without_a_barrier_per_step_are_refused(spec):
    args = lstm_case()
    with pytest.raises(ValueError, match=rf"^config: spec '{spec.replace('|', '[|]')}'"):
        lstm.forward(*args, config={"fwd": {"spec": spec, "bk": 16}})


@pytest.mark.parametrize("spec", ["t|KN", "t|NK", "tn|K", "nt|K", "t|kn", "tnk"])
def test_lstm_specs_with_a_barrier_per_step_agree(spec):
    args = lstm_case()
    want = lstm.forward(*args, config={"fwd": {"spec": "t|KN", "bk": 16}})[0]
    got = lstm.forward(*args, config={"fwd": {"spec": spec, "bk": 16}})[0]
    np.testing.assert_array_equal(got, want)
    dy = np.ones_like(want)
    grads = lstm.backward(dy, None, None, *args, config={"fwd": {"spec": spec, "bk": 16}})
    ref = lstm.backward(dy, None, None, *args, config={"fwd": {"spec": "t|KN", "bk": 16}})
    for g, r in zip(grads, ref):
        np.testing.assert_array_equal(g, r)


def test_plan_refuses_a_read_write_race_and_takes_a_barrier():
    """Task 1 reads the block task 0 writes: one phase is a race, two are not."""
    blk = P.Block(2, 2, 2, lda=4, ldb=2, ldc=4, beta=0.0)

    def record(phases):
        rec = P.Recorder({"X": "f32", "W": "f32"}, spec="demo")
        rec.at((0,), (0,))
        rec.gemm(blk, "X", [8], "W", [0], "X", 0)  # writes X[0:2, 0:2], reads X rows 2-3
        rec.at((1 if phases == 2 else 0,), (1,))
        rec.gemm(blk, "X", [0], "W", [0], "X", 10)  # reads X[0:2, 0:2]
        return rec.finish()

    with pytest.raises(ValueError, match=r"^config: spec 'demo': tensor 'X': a parallel task "
                                         r"reads elements that another task"):
        record(1)
    record(2)


def test_plan_race_check_is_exact_for_interleaved_columns():
    """Two tasks writing alternate column windows of the same rows share a byte
    range but no element: accepted; one column more and they clash."""
    rec = P.Recorder({"A": "f32", "B": "f32", "C": "f32"})
    for t in range(2):
        rec.at((), (t,))
        rec.gemm(P.Block(4, 3, 2, lda=2, ldb=3, ldc=6, beta=0.0), "A", [0], "B", [0], "C", 3 * t)
    rec.finish()
    rec.at((), (2,))
    rec.gemm(P.Block(4, 2, 2, lda=2, ldb=3, ldc=6, beta=0.0), "A", [0], "B", [0], "C", 8)
    with pytest.raises(ValueError, match="two parallel tasks of one phase write the same"):
        rec.finish()


@pytest.mark.parametrize("name, value", [("beta", 1e39), ("alpha", -1e39), ("beta", 3.5e38)])
def test_scalars_that_overflow_float32(name, value):
    with pytest.raises(ValueError, match=rf"^{name}: .* overflows float32"):
        brgemm.Kernel(2, 2, 2, **{name: value})
    ones = np.ones((1, 2, 2), f32)
    with pytest.raises(ValueError, match=rf"^{name}: .* overflows float32"):
        brgemm.brgemm(ones, ones, np.zeros((2, 2), f32), **{name: value})
    with pytest.raises(ValueError, match=rf"^{name}: .* overflows float32"):
        P.Block(2, 2, 2, 2, 2, 2, **{name: value})


def test_block_checks_its_scalars_as_kernel_does():
    for bad, exc in ((float("nan"), ValueError), (float("inf"), ValueError), ("x", TypeError),
                     (None, TypeError), (1j, TypeError)):
        with pytest.raises(exc, match=r"^beta: "):
            P.Block(2, 2, 2, 2, 2, 2, beta=bad)
        with pytest.raises(exc, match=r"^alpha: "):
            P.Block(2, 2, 2, 2, 2, 2, alpha=bad)
    with pytest.raises(ValueError, match=r"^lda: 1 is less than"):
        P.Block(2, 2, 2, 1, 2, 2)
    with pytest.raises(ValueError, match=r"^c_dtype: "):
        P.Block(2, 2, 2, 2, 2, 2, c_dtype="bf16")


def test_relu_keeps_nan_like_torch(backend):
    """relu(NaN) is NaN in PyTorch; the C epilogue, the OpenCL one and the
    eager path agree (y = x times a 1 x 1 block of ones, then relu)."""
    torch = pytest.importorskip("torch")
    x = np.array([np.nan, -1.0, 2.0, -np.inf, np.inf, 0.5, -0.0, -3e-39], f32).reshape(8, 1)

    def nest(ex):
        ex.at((), ())
        ex.gemm(P.Block(8, 1, 1, lda=1, ldb=1, ldc=1, beta=0.0), "x", [0], "one", [0], "y", 0,
                ops=(P.relu(),))

    rec = P.Recorder({"x": "f32", "one": "f32", "y": "f32"})
    nest(rec)
    one = np.ones(1, f32)
    replay, eager = np.zeros((8, 1), f32), np.zeros((8, 1), f32)
    rec.finish().run(backend=backend, x=x, one=one, y=replay)
    nest(P.Eager(backend=backend, x=x, one=one, y=eager))
    ref = torch.relu(torch.from_numpy(x)).numpy()
    for got in (replay, eager):
        np.testing.assert_array_equal(got, ref)
        assert np.isnan(got[0, 0])


# ---------------------------------------------------------------- valid input rejected

def test_block_size_one_works():
    rng = np.random.default_rng()
    x, w = rng.standard_normal((5, 7)).astype(f32), rng.standard_normal((3, 7)).astype(f32)
    want = x.astype(np.float64) @ w.T.astype(np.float64)
    mag = np.abs(x).astype(np.float64) @ np.abs(w.T)
    layer = fc.Linear(7, 3, bias=False, blocks=(1, 1, 1))
    layer.weight[...] = w
    for y in (fc.forward(x, w, config={"fwd": {"bc": 1, "bn": 1, "bk": 1}}),
              fc.forward(x, w, config={"fwd": {"bc": 1}}), layer.forward(x)):
        assert np.all(np.abs(y - want) <= 1e-5 * mag + 1e-30)
    xc, wc = rng.standard_normal((1, 3, 5, 5)).astype(f32), rng.standard_normal((2, 3, 3, 3)).astype(f32)
    y1 = conv.forward(xc, wc, config={"fwd": {"bc": 1, "bk": 1, "bq": 1}})
    np.testing.assert_allclose(y1, conv.forward(xc, wc), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("C", [3, 16])  # 3: the narrow weight update's layout
def test_huge_conv_stride_works(C):
    """A stride of 2**29 leaves one output pixel, as any stride past the input does."""
    rng = np.random.default_rng()
    x, w = rng.standard_normal((2, C, 4, 4)).astype(f32), rng.standard_normal((3, C, 1, 1)).astype(f32)
    y = conv.forward(x, w, stride=2**29)
    want = np.einsum("nc,kc->nk", x[:, :, 0, 0].astype(np.float64), w[:, :, 0, 0])
    np.testing.assert_allclose(y[:, :, 0, 0], want, rtol=1e-5, atol=1e-5)
    dy = rng.standard_normal((2, 3, 1, 1)).astype(f32)
    dx, dw = conv.backward(dy, x, w, stride=2**29)
    np.testing.assert_allclose(dw[:, :, 0, 0], dy[:, :, 0, 0].T @ x[:, :, 0, 0], rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_allclose(dx[:, :, 0, 0], dy[:, :, 0, 0] @ w[:, :, 0, 0], rtol=1e-5,
                               atol=1e-5)
    assert not dx[:, :, 1:].any() and not dx[:, :, :, 1:].any()


def test_batch_stride_of_two_to_the_29_works():
    """libxsmm's batch stride is 32-bit bytes: such blocks go by address."""
    big = np.zeros((2, 2**29 + 8), f32)  # untouched pages: virtual memory only
    big[0, :4], big[1, :4] = [1, 2, 3, 4], [5, 6, 7, 8]
    A = np.lib.stride_tricks.as_strided(big, (2, 2, 2), (big.strides[0], 8, 4))
    B = np.ones((2, 2, 2), f32)
    C = np.zeros((2, 2), f32)
    brgemm.Kernel(2, 2, 2)(A, B, C)
    np.testing.assert_array_equal(C, np.einsum("imk,ikn->mn", A, B))


@pytest.mark.parametrize("which", ["A", "B", "C"])
def test_row_stride_past_32_bit_offsets_is_a_named_error(which):
    buf = np.zeros(2**29 + 8, f32)
    view = np.lib.stride_tricks.as_strided(buf, (2, 2), (2**29 * 4, 4))
    args = dict(A=np.ones((1, 2, 2), f32), B=np.ones((1, 2, 2), f32), C=np.zeros((2, 2), f32))
    args[which] = view if which == "C" else view[None]
    with pytest.raises(ValueError, match=rf"^{which}: a block of 2 rows .* at most 2\*\*31 - 1"):
        brgemm.Kernel(2, 2, 2)(args["A"], args["B"], args["C"])


# ---------------------------------------------------------------- unhelpful messages

@pytest.mark.parametrize("kw, exc, name", [
    (dict(beta="x"), TypeError, "beta"), (dict(beta=None), TypeError, "beta"),
    (dict(alpha=1j), TypeError, "alpha"), (dict(alpha=float("nan")), ValueError, "alpha"),
])
def test_kernel_and_one_shot_scalars(kw, exc, name):
    with pytest.raises(exc, match=rf"^{name}: "):
        brgemm.Kernel(2, 2, 2, **kw)
    ones = np.ones((1, 2, 2), f32)
    with pytest.raises(exc, match=rf"^{name}: "):
        brgemm.brgemm(ones, ones, np.zeros((2, 2), f32), **kw)


@pytest.mark.parametrize("config, match", [(5, "^config: expected a dict"),
                                           ("", "^config: an empty path"),
                                           (b"x", "^config: expected a dict"),
                                           ([("fwd", {})], "^config: expected a dict")])
def test_config_of_the_wrong_kind(config, match):
    x, w = np.ones((4, 8), f32), np.ones((3, 8), f32)
    with pytest.raises(ConfigError, match=match):
        fc.forward(x, w, config=config)
    with pytest.raises(ConfigError, match=match):
        conv.forward(np.ones((1, 2, 3, 3), f32), np.ones((1, 2, 1, 1), f32), config=config)


def test_object_arrays():
    obj = np.ones((4, 8), object)
    with pytest.raises(TypeError, match="^x: expected dtype"):
        fc.forward(obj, np.ones((3, 8), f32))
    with pytest.raises(TypeError, match="^A: expected dtype"):
        brgemm.brgemm(np.ones((1, 2, 2), object), np.ones((1, 2, 2), f32), np.zeros((2, 2), f32))
    with pytest.raises(TypeError, match="^B: expected dtype"):
        brgemm.Kernel(2, 2, 2)(np.ones((1, 2, 2), f32), np.ones((1, 2, 2), object),
                               np.zeros((2, 2), f32))
    with pytest.raises(TypeError, match="^x: expected dtype"):
        conv.forward(np.ones((1, 2, 3, 3), object), np.ones((1, 2, 1, 1), f32))
    with pytest.raises(TypeError, match="^x: expected dtype"):
        lstm.forward(np.ones((2, 1, 3), object), None, None, np.ones((8, 3), f32),
                     np.ones((8, 2), f32), np.ones(8, f32))


def test_huge_padding_is_refused_before_allocating():
    with pytest.raises(ValueError, match=r"^padding: the padded input .* GiB, more than"):
        conv.forward(np.ones((1, 1, 4, 4), f32), np.ones((1, 1, 1, 1), f32), padding=2**22)
    with pytest.raises(ValueError, match=r"^padding: "):
        conv.Conv2d(1, 1, 1, padding=(0, 2**40)).forward(np.ones((1, 1, 4, 4), f32))


def test_broadcast_inputs_larger_than_memory_are_refused_before_copying():
    """x broadcast (strides 0) to terabytes sits in a few bytes; the copies a
    call makes of it cannot: a named error, not a process the kernel kills."""
    n, K = 1 << 20, 4
    x = np.broadcast_to(np.ones((1, n), f32), (n, n))
    with pytest.raises(ValueError, match=r"^x: fc N=.* GiB, more than"):
        fc.forward(x, np.ones((3, n), f32))
    with pytest.raises(ValueError, match=r"^x: "):
        fc.backward(np.ones((n, 3), f32), x, np.ones((3, n), f32))
    xs = np.broadcast_to(np.ones((1, 1, n), f32), (n, 64, n))
    h = np.zeros((64, K), f32)
    with pytest.raises(ValueError, match=r"^x: x's copy"):
        lstm.forward(xs, h, h, np.ones((4 * K, n), f32), np.ones((4 * K, K), f32),
                     np.ones(4 * K, f32))


@pytest.mark.parametrize("blocks, exc", [((0, 1, 1), ValueError), ((-1, 16, 16), ValueError),
                                         (("a", 1, 1), TypeError), ((1, 2), TypeError),
                                         ("abc", TypeError), (5, TypeError),
                                         ((1.5, 2, 2), TypeError)])
def test_bad_block_sizes(blocks, exc):
    with pytest.raises(exc, match="^blocks: "):
        fc.Linear(8, 4, blocks=blocks)
    with pytest.raises(exc, match="^blocks: "):
        fc.MLP([8, 4], blocks=blocks)


@pytest.mark.parametrize("primitive, shape, match", [
    ("fc", {"N": 4, "C": 4, "K": 4, "X": 3}, "no dimension 'X'"),
    ("fc", {"N": 4, "C": 4}, "'K' missing"),
    ("fc", {"N": 10**11, "C": 10**7, "K": 4}, "more than this machine's"),
    ("conv", dict(N=1, C=4, K=4, H=2, W=2, R=5, S=5, sh=1, sw=1, ph=0, pw=0), "larger than"),
    # 9.5 TiB of tensors: more than any machine this runs on (10**8, 95 GiB, fit
    # the lent machine's 128 GiB, and its tuner set out to time the layer)
    ("conv", dict(N=1, C=4, K=4, H=2, W=2, R=1, S=1, sh=1, sw=1, ph=10**10, pw=0), "more than"),
    ("gemm", {"M": 10**6, "N": 10**6, "K": 10**6}, "more than this machine's"),
])
def test_tuner_shapes_that_cannot_exist(primitive, shape, match):
    with pytest.raises(TuneError, match=f"^shape: .*{match}") as e:
        tune(primitive, "fwd", shape, 5.0, progress=None)
    assert e.value.arg == "shape"


def _wrong(rng, shape):
    """shape with one dimension changed (never to 0)."""
    i = int(rng.integers(len(shape)))
    return tuple(s + int(rng.integers(1, 4)) * (1 if rng.random() < 0.5 or s < 4 else -1)
                 if j == i else s for j, s in enumerate(shape))


@pytest.mark.parametrize("kind", ["fc", "conv", "lstm"])
def test_layer_weights_of_the_wrong_shape_or_dtype_are_named(rng, kind):
    """A layer's weights set by hand (attributes, set_weights) are checked
    before they are blocked: a wrong shape or dtype names the weight, never
    a silent result from part of it nor an error blaming the input."""
    C, K, N = (int(v) for v in rng.integers(4, 24, 3))
    make, x, names = {
        "fc": (lambda: fc.Linear(C, K), rng.standard_normal((N, C)), ("weight", "bias")),
        "conv": (lambda: conv.Conv2d(C, K, 3, padding=1, bias=True),
                 rng.standard_normal((2, C, 5, 5)), ("weight", "bias")),
        "lstm": (lambda: lstm.LSTM(C, K), rng.standard_normal((3, N, C)), ("w_ih", "w_hh", "b")),
    }[kind]
    x = x.astype(f32)
    for name in names:
        for bad in ("shape", "dtype"):
            layer = make()
            w = getattr(layer, name)
            w = (rng.standard_normal(_wrong(rng, w.shape)).astype(f32) if bad == "shape"
                 else w.astype(np.float64))
            setattr(layer, name, w)
            with pytest.raises(ValueError if bad == "shape" else TypeError, match=f"^{name}:"):
                layer.forward(x)
    layer = make()
    layer.forward(x)
    if kind == "lstm":  # set_weights, after the layer has run once
        with pytest.raises(ValueError, match="^w_hh:"):
            layer.set_weights(layer.w_ih, layer.w_hh[:, :-1], layer.b)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_dtype_given_as_a_str_subclass(rng, dtype):
    """numpy.str_ (what a dtype read from a NumPy array of names is) works as
    its plain str does, with arrays of either dtype."""
    N, C, K = (int(v) for v in rng.integers(1, 40, 3))
    x, w = (rng.standard_normal(s).astype(np.float32) for s in ((N, C), (K, C)))
    want = fc.forward(x, w, dtype=dtype)
    np.testing.assert_array_equal(fc.forward(x, w, dtype=np.str_(dtype)), want)
    if dtype == "bf16":
        xb, wb = x.astype(bf16), w.astype(bf16)
        np.testing.assert_array_equal(fc.forward(xb, wb, dtype=np.str_(dtype)).astype(np.float32),
                                      fc.forward(xb, wb, dtype=dtype).astype(np.float32))
