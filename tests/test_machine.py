"""brgemm.machine: the public facts benchmarks use instead of reaching into
brgemm.backend (peak probes, thread count, device names)."""
import os

import pytest

import brgemm
from brgemm import machine


def test_resolve_backend_names_the_argument():
    assert machine.resolve_backend("cpu") == "cpu"
    with pytest.raises(ValueError, match=r"^backend: unknown 'tpu'"):
        machine.resolve_backend("tpu")


def test_unavailable_reason_matches_backends():
    for name in ("cpu", "sycl", "cuda"):
        reason = machine.unavailable_reason(name)
        assert (reason is None) == (name in brgemm.backends()), (name, reason)
        assert reason is None or isinstance(reason, str) and reason


def test_cpu_facts():
    assert machine.cpu_arch() == brgemm.info("cpu")["arch"]
    gflops, unit = machine.fma_peak(0.01)
    assert gflops > 0 and isinstance(unit, str) and unit
    assert machine.bf16_peak(0.01) >= 0 and machine.amx_peak(0.01) >= 0


def test_set_cpu_threads_round_trip():
    before = machine.cpu_threads()
    want = 1 if before > 1 else 2
    try:
        machine.set_cpu_threads(want)
        assert machine.cpu_threads() == want
    finally:
        machine.set_cpu_threads(before)
    assert machine.cpu_threads() == before
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match=r"^threads: "):
            machine.set_cpu_threads(bad)


def test_device_name_only_for_devices():
    with pytest.raises(ValueError, match=r"^backend: "):
        machine.device_name("cpu")
    for name in ("sycl", "cuda"):
        if name in brgemm.backends():
            assert isinstance(machine.device_name(name), str)
