"""The SYCL backend's own promises (the kernel contract and the primitives run
on it through the `backend` fixture elsewhere): one submission per plan phase,
USM-resident tensors, and clear errors."""
import numpy as np
import pytest

import brgemm
from primitives import fc, gemm

if "sycl" not in brgemm.backends():
    pytest.skip("no SYCL device here", allow_module_level=True)

from brgemm.backend import sycl  # noqa: E402


def rand(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def test_one_submission_per_phase(rng):
    """A plan with several phases (a k-split GEMM: every k chunk is a phase)
    replays as exactly one ND-range submission per phase."""
    M, N, K = 70, 90, 256
    cfg = {"fwd": {"spec": "k|IJ", "bm": 32, "bn": 32, "bk": 32, "kc": 64}}
    p = gemm.plan(M, N, K, "f32", cfg)
    phases = len(p.phase_begin) - 1
    assert phases == 4
    A, B = rand(rng, M, K), rand(rng, K, N)
    C_cpu, C_dev = np.zeros((M, N), np.float32), np.full((M, N), np.nan, np.float32)
    p.run(A=A, B=B, C=C_cpu)
    before = sycl.submissions
    p.run(backend="sycl", A=A, B=B, C=C_dev)
    assert sycl.submissions - before == phases
    ref, bound = A.astype(np.float64) @ B.astype(np.float64), 1e-5 * (np.abs(A) @ np.abs(B))
    assert np.all(np.abs(C_dev - ref) <= bound)  # each side within f32 rounding of float64
    assert np.all(np.abs(C_cpu - ref) <= bound)


def test_primitives_run_on_the_device(rng):
    """fc.forward with backend="sycl" submits work to the device (it does not
    quietly fall back to the CPU), one submission per phase of its plan."""
    x, w = rand(rng, 33, 40), rand(rng, 20, 40)
    before = sycl.submissions
    y = fc.forward(x, w, backend="sycl")
    assert sycl.submissions > before
    ref = x.astype(np.float64) @ w.T.astype(np.float64)
    assert np.all(np.abs(y - ref) <= 1e-5 * (np.abs(x) @ np.abs(w.T)))


def test_device_resident_tensors(rng):
    """DeviceArray tensors stay in USM: the result is read back only on request."""
    M, N, K = 40, 50, 60
    A, B = rand(rng, M, K), rand(rng, K, N)
    p = gemm.plan(M, N, K, "f32", None)
    dA, dB = brgemm.to_device(A, "sycl"), brgemm.to_device(B, "sycl")
    dC = sycl.DeviceArray((M, N), np.float32)
    for _ in range(3):  # steady state: nothing but the submissions
        p.run(backend="sycl", A=dA, B=dB, C=dC)
    C = brgemm.to_host(dC)
    ref = A.astype(np.float64) @ B.astype(np.float64)
    assert np.all(np.abs(C - ref) <= 1e-5 * (np.abs(A) @ np.abs(B)))
    np.testing.assert_array_equal(dA.numpy(), A)


def test_bad_device_arrays_are_named(rng):
    p = gemm.plan(8, 8, 8, "f32", None)
    A, B = rand(rng, 8, 8), rand(rng, 8, 8)
    with pytest.raises(TypeError, match="^C: expected dtype f32"):
        p.run(backend="sycl", A=A, B=B, C=sycl.DeviceArray((8, 8), np.float64))
    with pytest.raises(ValueError, match="^C: the plan touches 64 elements"):
        p.run(backend="sycl", A=A, B=B, C=sycl.DeviceArray((7, 8), np.float32))
    with pytest.raises(TypeError, match="^A: expected a numpy.ndarray or DeviceArray"):
        p.run(backend="sycl", A=[[1.0]], B=B, C=np.zeros((8, 8), np.float32))
    shared = sycl.DeviceArray((8, 8), np.float32)
    with pytest.raises(ValueError, match="^C: overlaps A"):
        p.run(backend="sycl", A=shared, B=B, C=shared)
    with pytest.raises(ValueError, match="^threads:"):
        p.run(backend="sycl", threads=2, A=A, B=B, C=np.zeros((8, 8), np.float32))
    # device arrays belong to the device: the CPU replay refuses them by name
    with pytest.raises(TypeError, match="^A: expected a numpy.ndarray"):
        p.run(A=brgemm.to_device(A, "sycl"), B=B, C=np.zeros((8, 8), np.float32))


def test_to_device_on_the_cpu_is_the_array_itself(rng):
    A = rand(rng, 3, 4)
    assert brgemm.to_device(A, "cpu") is A
    assert brgemm.to_host(A) is A


def test_device_name_is_reported():
    assert isinstance(sycl.device_name(), str) and sycl.device_name()


def test_sycl_replay_makes_no_cpu_kernel(rng, monkeypatch):
    """A plan run only on SYCL never JITs a libxsmm kernel: the CPU backend's
    kernel constructor is made to fail, and the plan, recorded afresh, still
    runs on the device and gives the product."""
    from brgemm.backend import cpu
    from brgemm.plan import Recorder

    def no_cpu_kernel(*args, **kwargs):
        raise AssertionError("a libxsmm kernel was made for a SYCL-only plan")
    M, N, K = (int(v) for v in rng.integers(5, 80, 3))
    print(f"M, N, K = {M}, {N}, {K}")
    cfg = {"spec": "IJk", "bm": 16, "bn": 32, "bk": 16, "kc": 32}
    rec = Recorder({"A": "f32", "B": "f32", "C": "f32"}, spec=cfg["spec"])
    gemm._run_nest(rec, M, N, K, cfg, "f32")
    monkeypatch.setattr(cpu, "CpuKernel", no_cpu_kernel)
    p = rec.finish()
    A, B = rand(rng, M, K), rand(rng, K, N)
    C = np.full((M, N), np.nan, np.float32)
    p.run(backend="sycl", A=A, B=B, C=C)
    assert "cpu" not in p.replayed_on
    ref, bound = A.astype(np.float64) @ B.astype(np.float64), 1e-5 * (np.abs(A) @ np.abs(B))
    assert np.all(np.abs(C - ref) <= bound)
    with pytest.raises(AssertionError, match="libxsmm kernel was made"):
        p.run(A=A, B=B, C=C)            # the CPU replay does make them: the check can fail
