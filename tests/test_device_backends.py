"""What every device backend (SYCL, CUDA) promises, written once and run on
each one available: one submission or launch per plan phase, no libxsmm
kernel for a plan that only runs there, primitives that really reach the
device, resident tensors, and bad device arrays named. Each backend's own
extras: test_sycl.py, test_cuda.py."""
import importlib

import numpy as np
import pytest

import brgemm
from primitives import fc, gemm

WORK_COUNTER = {"sycl": "submissions", "cuda": "launches"}  # the module's count of device work


@pytest.fixture(params=sorted(WORK_COUNTER))
def device(request):
    """(name, backend module) of a device backend that runs here."""
    name = request.param
    if name not in brgemm.backends():
        pytest.skip(f"no {name} device here")
    return name, importlib.import_module(f"brgemm.backend.{name}")


def work(device):
    name, mod = device
    return getattr(mod, WORK_COUNTER[name])


def rand(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def assert_product(C, A, B):
    """C within f32 accumulation of A @ B (1e-5 of sum |a||b|, float64 reference)."""
    ref = A.astype(np.float64) @ B.astype(np.float64)
    assert np.all(np.abs(C - ref) <= 1e-5 * (np.abs(A) @ np.abs(B)) + 1e-30)


def test_one_device_run_per_phase(rng, device):
    """A k-split GEMM (every k chunk a phase) replays as exactly one
    submission (SYCL) or launch (CUDA) per phase, like the CPU's result."""
    name, _ = device
    M, N, K = 70, 90, 256
    p = gemm.plan(M, N, K, "f32", {"fwd": {"spec": "k|IJ", "bm": 32, "bn": 32, "bk": 32, "kc": 64}})
    phases = len(p.phase_begin) - 1
    assert phases == 4
    A, B = rand(rng, M, K), rand(rng, K, N)
    C_cpu, C_dev = np.zeros((M, N), np.float32), np.full((M, N), np.nan, np.float32)
    before = work(device)
    p.run(backend=name, A=A, B=B, C=C_dev)
    assert work(device) - before == phases
    assert p.replayed_on == [name]
    p.run(A=A, B=B, C=C_cpu)
    assert_product(C_dev, A, B)
    assert_product(C_cpu, A, B)


def test_device_replay_makes_no_cpu_kernel(rng, device, monkeypatch):
    """A plan run only on the device never JITs a libxsmm kernel: the CPU
    backend's kernel constructor is made to fail, and the plan, recorded
    afresh, still runs on the device and gives the product."""
    from brgemm.backend import cpu
    from brgemm.plan import Recorder

    def no_cpu_kernel(*args, **kwargs):
        raise AssertionError("a libxsmm kernel was made for a device-only plan")
    M, N, K = (int(v) for v in rng.integers(5, 80, 3))
    print(f"M, N, K = {M}, {N}, {K}")
    cfg = {"spec": "IJk", "bm": 16, "bn": 32, "bk": 16, "kc": 32}
    rec = Recorder({"A": "f32", "B": "f32", "C": "f32"}, spec=cfg["spec"])
    gemm._run_nest(rec, M, N, K, cfg, "f32")
    monkeypatch.setattr(cpu, "CpuKernel", no_cpu_kernel)
    p = rec.finish()
    A, B = rand(rng, M, K), rand(rng, K, N)
    C = np.full((M, N), np.nan, np.float32)
    p.run(backend=device[0], A=A, B=B, C=C)
    assert "cpu" not in p.replayed_on
    assert_product(C, A, B)
    with pytest.raises(AssertionError, match="libxsmm kernel was made"):
        p.run(A=A, B=B, C=C)            # the CPU replay does make them: the check can fail


def test_primitives_run_on_the_device(rng, device):
    """fc.forward with backend= a device puts work on it (no quiet CPU fallback)."""
    x, w = rand(rng, 33, 40), rand(rng, 20, 40)
    before = work(device)
    y = fc.forward(x, w, backend=device[0])
    assert work(device) > before
    assert_product(y, x, w.T)


def test_device_resident_tensors(rng, device):
    """DeviceArray tensors stay on the device: the result is read back only on request."""
    name, mod = device
    M, N, K = 40, 50, 60
    A, B = rand(rng, M, K), rand(rng, K, N)
    p = gemm.plan(M, N, K, "f32", None)
    dA, dB = brgemm.to_device(A, name), brgemm.to_device(B, name)
    dC = mod.DeviceArray((M, N), np.float32)
    for _ in range(3):  # steady state: nothing but the device work
        p.run(backend=name, A=dA, B=dB, C=dC)
    assert_product(brgemm.to_host(dC), A, B)
    np.testing.assert_array_equal(dA.numpy(), A)


def test_bad_device_arrays_are_named(rng, device):
    name, mod = device
    p = gemm.plan(8, 8, 8, "f32", None)
    A, B = rand(rng, 8, 8), rand(rng, 8, 8)
    with pytest.raises(TypeError, match="^C: expected dtype f32"):
        p.run(backend=name, A=A, B=B, C=mod.DeviceArray((8, 8), np.float64))
    with pytest.raises(ValueError, match="^C: the plan touches 64 elements"):
        p.run(backend=name, A=A, B=B, C=mod.DeviceArray((7, 8), np.float32))
    with pytest.raises(TypeError, match="^A: expected a numpy.ndarray or DeviceArray"):
        p.run(backend=name, A=[[1.0]], B=B, C=np.zeros((8, 8), np.float32))
    shared = mod.DeviceArray((8, 8), np.float32)
    with pytest.raises(ValueError, match="^C: overlaps A"):
        p.run(backend=name, A=shared, B=B, C=shared)
    with pytest.raises(ValueError, match="^threads:"):
        p.run(backend=name, threads=2, A=A, B=B, C=np.zeros((8, 8), np.float32))
    # device arrays belong to the device: the CPU replay refuses them by name
    with pytest.raises(TypeError, match="^A: expected a numpy.ndarray"):
        p.run(A=brgemm.to_device(A, name), B=B, C=np.zeros((8, 8), np.float32))


def test_device_name_is_reported(device):
    name = device[1].device_name()
    assert isinstance(name, str) and name
