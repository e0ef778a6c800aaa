"""Shared test helpers: fresh random data and float64 references.

The whole suite runs in check mode (BRGEMM_CHECK=1, set here before brgemm is
imported; subprocesses inherit it): every buffer the library allocates comes
NaN-filled, so a region a plan fails to write shows up as NaN in a result."""
import os
import pathlib
import subprocess

os.environ["BRGEMM_CHECK"] = "1"

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import brgemm  # noqa: E402
import brgemm.arrays  # noqa: E402

assert brgemm.arrays.CHECK, "brgemm was imported before conftest could turn on check mode"


ROOT = pathlib.Path(__file__).resolve().parent.parent


def python_files():
    """The project's Python files (tracked, and untracked ones git does not ignore)."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "*.py"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split()
    return [p for p in listed if (ROOT / p).is_file()]


@pytest.fixture(params=brgemm.backends())
def backend(request):
    """Every backend available here (CI: cpu and the SYCL CPU device; cuda where
    there is an NVIDIA GPU and the fatbin was built)."""
    return request.param


@pytest.fixture
def rng(request):
    # fresh data every run, but printed so a failure can be replayed
    seed = np.random.SeedSequence().entropy % (2**32)
    print(f"seed={seed}")
    return np.random.default_rng(seed)


def np_dtype(dtype):
    return np.float32 if dtype == "f32" else brgemm.bfloat16


def reference(As, Bs, C0, alpha, beta):
    """beta * C0 + alpha * sum_i A_i @ B_i in float64, and the magnitude the
    rounding error scales with (same sum with absolute values)."""
    acc = np.zeros(C0.shape)
    mag = np.zeros(C0.shape)
    for a, b in zip(As, Bs):
        a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
        acc += a64 @ b64
        mag += np.abs(a64) @ np.abs(b64)
    c64 = np.asarray(C0, np.float64)
    ref = alpha * acc + (beta * c64 if beta != 0 else 0.0)
    scale = abs(alpha) * mag + (abs(beta) * np.abs(c64) if beta != 0 else 0.0)
    return ref, scale


def assert_close(C, ref, scale, c_dtype):
    # f32 accumulation of up to a few thousand products: about 1e-5 of the
    # magnitude; a bf16 result is rounded once more (2**-8 relative)
    rel = 1e-5 if np.dtype(c_dtype) == np.float32 else 1e-2
    err = np.abs(np.asarray(C, np.float64) - ref)
    bound = rel * (scale + 1e-30)
    worst = np.max(err / bound) if err.size else 0.0
    print(f"max abs diff {err.max() if err.size else 0:.3e}, worst err/bound {worst:.3f}")
    assert np.all(err <= bound), f"max err/bound {worst:.3f}"
