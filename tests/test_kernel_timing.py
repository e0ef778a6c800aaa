"""Kernel.time_native and brgemm.machine's AMX probes: the public timing API
benchmarks/kernel.py and benchmarks/amx_profile.py use instead of a Kernel's
private native kernels. The timed calls must be the stride form's calls (C
against float64 NumPy), and a bad argument a named error, never a crash."""
import numpy as np
import pytest
from conftest import assert_close, np_dtype, reference

import brgemm
from brgemm import machine


def _case(rng, dtype):
    m, n, k = (int(x) for x in rng.integers(1, 40, 3))
    count = int(rng.integers(1, 6))
    A = rng.standard_normal((count, m, k)).astype(np_dtype(dtype))
    B = rng.standard_normal((count, k, n)).astype(np_dtype(dtype))
    return m, n, k, count, A, B


@pytest.mark.parametrize("dtype,packed", [("f32", False), ("bf16", False), ("bf16", True)])
@pytest.mark.parametrize("loop", ["native", "pointers", "binding", "apart"])
def test_time_native_runs_the_stride_form(rng, dtype, packed, loop):
    m, n, k, count, A, B = _case(rng, dtype)
    kern = brgemm.Kernel(m, n, k, dtype=dtype)
    reps = int(rng.integers(1, 4))
    C = np.zeros((m, n), np.float32)
    # "apart": the native loop with memory written and a wait between calls
    between = dict(gap=1e-6, touch=int(rng.integers(1, 5000))) if loop == "apart" else {}
    loop = "native" if loop == "apart" else loop
    seconds = kern.time_native(A, kern.pack_b(B) if packed else B, C, reps, loop=loop, **between)
    assert isinstance(seconds, float) and seconds >= 0
    # the Python loops make one call first, outside the timing (it checks that C accepts them)
    calls = reps + (loop != "native")
    ref, scale = reference(list(A) * calls, list(B) * calls, np.zeros((m, n)), 1.0, 1.0)
    assert_close(C, ref, scale, np.float32)


def test_time_native_checks_its_arguments(rng):
    m, n, k, count, A, B = _case(rng, "f32")
    kern = brgemm.Kernel(m, n, k)
    C = np.zeros((m, n), np.float32)
    for bad in (0, -2, 1.5, True, "3"):
        with pytest.raises(ValueError, match=r"^reps: "):
            kern.time_native(A, B, C, bad)
    with pytest.raises(ValueError, match=r"^loop: "):
        kern.time_native(A, B, C, 1, loop="python")
    with pytest.raises(ValueError, match=r"^loop: "):  # waits apply to the native loop only
        kern.time_native(A, B, C, 1, loop="pointers", gap=1e-6)
    for bad in (-1e-6, 2.0, float("nan")):
        with pytest.raises(ValueError, match=r"^gap: "):
            kern.time_native(A, B, C, 1, gap=bad)
    with pytest.raises(TypeError, match=r"^gap: "):
        kern.time_native(A, B, C, 1, gap="1")
    for bad in (-1, 1.5, True, 2**31):
        with pytest.raises(ValueError, match=r"^touch: "):
            kern.time_native(A, B, C, 1, touch=bad)
    with pytest.raises(TypeError, match=r"^A: "):
        kern.time_native(list(A), B, C, 1)
    with pytest.raises(TypeError, match=r"^B: "):
        kern.time_native(A, list(B), C, 1)
    with pytest.raises(TypeError, match=r"^C: "):
        kern.time_native(A, B, None, 1)
    with pytest.raises(ValueError, match=r"^B: "):
        kern.time_native(A, B[:-1] if count > 1 else B[:, :-1], C, 1)
    with pytest.raises(ValueError, match=r"^C: "):
        kern.time_native(A, B, C.T.copy() if m != n else C[:, :0], 1)
    with pytest.raises(ValueError, match=r"^C: "):  # C may not overlap an operand it reads
        buf = np.zeros(count * m * k + m * n, np.float32)
        kern.time_native(buf[:count * m * k].reshape(count, m, k), B,
                         buf[count * m * k - 1:-1].reshape(m, n), 1)
    assert not C.any()  # nothing ran


@pytest.mark.skipif("sycl" not in brgemm.backends(), reason="no SYCL device here")
def test_time_native_is_cpu_only(rng):
    m, n, k, count, A, B = _case(rng, "f32")
    with pytest.raises(ValueError, match=r"^backend: "):
        brgemm.Kernel(m, n, k, backend="sycl").time_native(A, B, np.zeros((m, n), np.float32), 1)


def test_amx_probes():
    has_amx = machine.amx_peak(0.01) > 0
    for loads in (False, True):
        gflops = machine.amx_step(loads, 0.01)
        assert gflops >= 0 and (gflops > 0) == has_amx
    for release in (False, True):
        s = machine.amx_config_seconds(release, 0.01)
        assert 0 <= s < 1e-3 and (s > 0) == has_amx
    for every in (2, 8, 32):
        gflops = machine.amx_turns(every, every == 8, 0.01)
        assert gflops >= 0 and (gflops > 0) == has_amx
    for bad in (1, 4, True, "8"):
        with pytest.raises(ValueError, match=r"^every: "):
            machine.amx_turns(bad)
    with pytest.raises(ValueError, match=r"^by_tile: "):
        machine.amx_turns(8, 1)
    with pytest.raises(ValueError, match=r"^loads: "):
        machine.amx_step(1)
    with pytest.raises(ValueError, match=r"^release: "):
        machine.amx_config_seconds("yes")
    for bad in (0, -1.0, 100, True, "0.1"):
        with pytest.raises(ValueError, match=r"^seconds: "):
            machine.amx_step(False, bad)


def test_the_kernel_benchmarks_run(capsys):
    """benchmarks.kernel and benchmarks.amx_profile (the latter runs only on the
    lent AMX host) end to end at their smallest settings, so that neither meets
    a broken API there first."""
    from benchmarks import amx_profile, kernel
    row = kernel.measure(8, 16, 8, 2, "bf16", reps=1, seconds=1e-4, packed=True)
    assert row["native"] > 0 and row["api"] > 0
    amx_profile.run(reps=1)
    out = capsys.readouterr().out
    assert "of which the binding" in out and "7x64x64 x18" in out
