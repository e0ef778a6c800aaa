"""brgemm.machine: the public facts benchmarks use instead of reaching into
brgemm.backend (peak probes, thread count, device names)."""
import os

import numpy as np
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


def test_cuda_launch_settings_check_their_arguments_first():
    for kw, name in (({"max_cluster": 0}, "max_cluster"), ({"max_cluster": True}, "max_cluster"),
                     ({"max_cluster": 2.0}, "max_cluster"), ({"small_tiles": 1}, "small_tiles"),
                     ({"small_tiles": "no"}, "small_tiles"), ({"wide_tiles": None}, "wide_tiles"),
                     ({"wide_tiles": 1}, "wide_tiles")):
        with pytest.raises(ValueError, match=f"^{name}: "):
            with machine.cuda_launch_settings(**kw):
                pass
    with pytest.raises(TypeError):
        with machine.cuda_launch_settings(clusters=2):
            pass
    for bad, name in (((0,), "size"), ((True,), "size"), ((2.0,), "size")):
        with pytest.raises(ValueError, match=f"^{name}: "):
            machine.cuda_max_clusters("tc_split", *bad)
    with pytest.raises(TypeError, match="^plan: "):
        machine.cuda_launches("not a plan")


@pytest.mark.skipif("cuda" in brgemm.backends(), reason="checks the errors where CUDA is absent")
def test_cuda_launch_functions_say_cuda_is_absent():
    from brgemm import plan as bplan
    rec = bplan.Recorder({"A": "f32", "B": "f32", "C": "f32"})
    rec.gemm(bplan.Block(2, 2, 2, lda=2, ldb=2, ldc=2), "A", [0], "B", [0], "C", 0)
    p = rec.finish()
    for call in (lambda: machine.cuda_launch_settings(max_cluster=1).__enter__(),
                 lambda: machine.cuda_max_clusters("tc_split", 2),
                 lambda: machine.cuda_launches(p)):
        with pytest.raises(brgemm.BackendUnavailable, match="^backend: 'cuda' is not available"):
            call()


@pytest.mark.skipif("cuda" not in brgemm.backends(), reason="needs the CUDA backend")
def test_cuda_launch_settings_apply_inside_and_restore_after():
    from brgemm.backend import cuda
    before = (cuda.max_cluster, cuda.small_tiles, cuda.wide_tiles)
    with machine.cuda_launch_settings(max_cluster=1, small_tiles=False, wide_tiles=False):
        assert (cuda.max_cluster, cuda.small_tiles, cuda.wide_tiles) == (1, False, False)
        with machine.cuda_launch_settings(small_tiles=True):
            assert (cuda.max_cluster, cuda.small_tiles) == (1, True)
        assert cuda.small_tiles is False
    assert (cuda.max_cluster, cuda.small_tiles, cuda.wide_tiles) == before
    with pytest.raises(RuntimeError):
        with machine.cuda_launch_settings(max_cluster=2):
            raise RuntimeError("inside")
    assert (cuda.max_cluster, cuda.small_tiles, cuda.wide_tiles) == before
    assert machine.cuda_max_clusters("tc_split", 1) >= 0
    with pytest.raises(ValueError, match="^entry: "):
        machine.cuda_max_clusters("nope", 1)


@pytest.mark.skipif("cuda" not in brgemm.backends(), reason="needs the CUDA backend")
def test_cuda_launches_follow_the_settings():
    from primitives import fc
    p = fc.plan(fc.geometry(256, 512, 256, blocks=(64, 64, 64), path="cuda"), "fwd", "bf16")
    shapes = machine.cuda_launches(p)
    assert [t for t, _, _ in shapes] == list(np.diff(p.phase_begin))
    assert all(entry in ("generic", "tc", "tc_small", "tc_split", "tc_wide", "tc_tma",
                         "tc_small_tma", "tc_split_tma", "tc_small_split_tma")
               and cluster >= 1 for _, entry, cluster in shapes)
    with machine.cuda_launch_settings(max_cluster=1):
        assert all(cluster == 1 for _, _, cluster in machine.cuda_launches(p))
