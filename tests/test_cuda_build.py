"""The CUDA sources compile wherever nvcc is (CI without a GPU included), and
without a usable GPU the backend is absent with a reason."""
import shutil

import numpy as np

import pytest

import brgemm
from brgemm import _build_cuda
from brgemm.backend import BackendUnavailable, resolve


@pytest.mark.skipif(_build_cuda.nvcc() is None, reason="no nvcc here")
def test_fatbin_builds(tmp_path):
    out = _build_cuda.build(tmp_path / "brgemm_cuda.fatbin", strict=True)
    assert out is not None and out.stat().st_size > 10_000
    data = out.read_bytes()
    assert b"sm_90a" in data or b"compute_80" in data  # the fatbin names its targets
    if shutil.which("cuobjdump"):  # where the disassembler is there, look for wgmma
        import subprocess
        sass = subprocess.run(["cuobjdump", "-sass", str(out)], capture_output=True, text=True).stdout
        assert "HGMMA" in sass


@pytest.mark.skipif(_build_cuda.nvcc() is None, reason="no nvcc here")
def test_fused_mlp_fatbin_builds(tmp_path):
    """kernels/cuda/mlp_fused.cu: its own module, on tensor cores (mma.sync: HMMA)."""
    out = _build_cuda.build(tmp_path / "mlp_cuda.fatbin", strict=True, source=_build_cuda.MLP_SOURCE)
    assert out is not None and out.stat().st_size > 10_000
    if shutil.which("cuobjdump"):
        import subprocess
        sass = subprocess.run(["cuobjdump", "-sass", str(out)], capture_output=True, text=True).stdout
        assert "HMMA" in sass and "LDSM" in sass


@pytest.mark.skipif(_build_cuda.nvcc() is None, reason="no nvcc here")
def test_fused_mlp_backward_variants_build(tmp_path):
    """The recompute backward's variants (the BWD_* macros of mlp_fused.cu, off by
    default until benchmarks/device_mlp_variants.sh has tested and timed them on a
    GPU) still compile, all of them on."""
    flags = ["-DBWD_DW_SWIZZLE=1", "-DBWD_WG_PIPE=1", "-DBWD_FEWER_SYNCS=1", "-DBWD_EARLY_DY=1"]
    out = _build_cuda.build(tmp_path / "mlp_bwd.fatbin", strict=True, source=_build_cuda.MLP_SOURCE,
                            extra=flags)
    assert out is not None and out.stat().st_size > 10_000


def test_absent_gpu_is_named():
    if "cuda" in brgemm.backends():
        pytest.skip("a GPU is here")
    with pytest.raises(BackendUnavailable, match="^backend: 'cuda' is not available here: .+"):
        resolve("cuda")
    with pytest.raises(BackendUnavailable, match="^backend: 'cuda'"):
        brgemm.Kernel(4, 4, 4, backend="cuda")


class StandInGPU:
    """What the launch choice reads of the device: an H200's 132 SMs and the
    clusters of each size it held at once (cuOccupancyMaxActiveClusters on
    the H200 for the one-block-per-SM entry points and the 64-row one)."""
    has_tc, sm_count = True, 132
    HELD = {1: (132, 264), 2: (66, 132), 3: (39, 79), 4: (30, 62), 5: (22, 47), 6: (17, 39),
            7: (15, 32), 8: (15, 30)}

    def max_clusters(self, entry, size):
        return self.HELD[size][entry.startswith("tc_small")]

    def blocks_per_sm(self, entry):
        return 2 if entry.startswith("tc_small") else 1


def launches_of(monkeypatch, p, tma=False):
    """The Launch of each phase of p on the stand-in H200; tma: where the
    phase qualifies for the TMA path (as on a GPU), else as if none did."""
    from brgemm.backend import _cuda_tma, cuda
    monkeypatch.setattr(cuda, "device", StandInGPU)
    paths = np.ones(len(p.calls), np.uint8)  # every call on the tensor cores (PATH_TC)
    phases = cuda._phase_shapes(p.blocks, p.calls, paths, p.task_begin, p.phase_begin, 1, 2)
    if tma:
        for ph, ops in zip(phases, _cuda_tma.phase_operands(
                p.blocks, p.calls, *p.byte_offsets(), p.phase_begin,
                [p.extent[n] for n in p.tensors], [ph["kernel"] for ph in phases])):
            ph["tma"] = ops
    return [cuda._launch_shape(ph, True) for ph in phases]


def test_small_problem_launch_choice(monkeypatch):
    """Runs anywhere (no GPU needed): a phase of few one-call tasks spreads
    over more blocks (tiles dealt out, k-steps split), about one round of
    blocks on the SMs; forced, the tiles and cluster are as asked; phases that
    fill the GPU launch as before."""
    from brgemm.backend import cuda
    from primitives import fc, gemm
    # bert_attn_out forward, blocks (64, 64, 128): 24 tasks of 64 x 128, 12 k-steps
    p = fc.plan(fc.geometry(256, 768, 768, blocks=(64, 64, 128), path="cuda"), "fwd", "bf16")
    (ln,) = launches_of(monkeypatch, p)
    print(ln)
    assert 24 < 24 * ln.parts * ln.cluster <= 2 * 132 and ln.entry != "generic"
    monkeypatch.setattr(cuda, "split_tiles", (64, 64, 3, "tc_small"))
    assert launches_of(monkeypatch, p) == [("tc_small", 3, 2, (64, 64))]
    monkeypatch.setattr(cuda, "split_tiles", None)
    monkeypatch.setattr(cuda, "max_cluster", 1)  # no split: the tiles alone spread
    (ln,) = launches_of(monkeypatch, p)
    assert ln.cluster == 1 and ln.parts == 2 and ln.tile == (64, 64) and ln.entry == "tc"
    monkeypatch.setattr(cuda, "max_cluster", 8)
    # a 4096^3 GEMM on 128 x 256 blocks (512 tasks) and square_4k's update (1024)
    cfg = {"fwd": {"spec": "IJk", "bm": 128, "bn": 256, "bk": 64, "kc": 4096}}
    (ln,) = launches_of(monkeypatch, gemm.plan(4096, 4096, 4096, "bf16", cfg))
    assert ln == ("tc_wide", 1, 1, (128, 128))
    (ln,) = launches_of(monkeypatch, fc.plan(fc.geometry(256, 4096, 4096, blocks=(128, 128, 128),
                                                         path="cuda"), "upd", "bf16"))
    assert ln == ("tc", 1, 1, (128, 128))


def test_small_problem_launch_choice_on_tma(monkeypatch):
    """Runs anywhere: on the TMA entries the small-problem path chooses by
    their model (the H200's best launch of each of these GEMM plans, 128 x
    128 blocks of 64-deep k, as measured: benchmarks/RESULTS.md), and takes
    phases of up to two rounds of 128 x 128 tiles; with tma_parts off, as
    before."""
    from brgemm.backend import cuda
    from primitives import gemm

    def plan(M, N, K):
        cfg = {"fwd": {"spec": "IJk", "bm": 128, "bn": 128, "bk": 64, "kc": K}}
        return gemm.plan(M, N, K, "bf16", cfg)
    for (M, N, K), want in (((1024, 1024, 1024), ("tc_tma", 1, 2, (128, 64))),
                            ((256, 1024, 1024), ("tc_split_tma", 2, 4, (64, 64))),
                            ((768, 768, 256), ("tc_tma", 1, 2, (128, 64))),
                            ((3072, 768, 256), ("tc_small_tma", 1, 2, (64, 128))),
                            ((4096, 4096, 256), ("tc_tma", 1, 1, (128, 128))),
                            ((256, 4096, 4096), ("tc_split_tma", 2, 1, (128, 128)))):
        (ln,) = launches_of(monkeypatch, plan(M, N, K), tma=True)
        assert ln == want, (M, N, K, ln)
    monkeypatch.setattr(cuda, "tma_parts", False)
    (ln,) = launches_of(monkeypatch, plan(3072, 768, 256), tma=True)
    assert ln == ("tc_tma", 1, 1, (128, 128))
    (ln,) = launches_of(monkeypatch, plan(1024, 1024, 1024), tma=True)
    assert ln == ("tc", 1, 2, (64, 128))  # the cp.async model's choice, on cp.async


def test_new_launch_settings_check_their_arguments():
    """cuda_launch_settings refuses bad values of the small-problem path's
    settings by name, before it looks for a GPU."""
    from brgemm import machine
    for kw, name in (({"split_tiles": (32, 64, 1, "tc")}, "split_tiles"),
                     ({"split_tiles": (64, 64, 9, "tc")}, "split_tiles"),
                     ({"split_tiles": True}, "split_tiles"),
                     ({"uniform_args": 1}, "uniform_args"),
                     ({"programmatic_launch": None}, "programmatic_launch"),
                     ({"clustered_pdl": 1}, "clustered_pdl"), ({"tma_loads": "yes"}, "tma_loads"),
                     ({"tma_persistent": None}, "tma_persistent")):
        with pytest.raises(ValueError, match=f"^{name}: "):
            with machine.cuda_launch_settings(**kw):
                pass


def test_mlp_benchmark_on_cuda_says_why_without_a_gpu():
    """`python -m benchmarks mlp --device cuda` where "cuda" is absent stops with
    the backend's reason, before timing anything."""
    if "cuda" in brgemm.backends():
        pytest.skip("a CUDA device is here: the benchmark would run")
    from benchmarks.__main__ import main
    with pytest.raises(SystemExit, match="no CUDA backend here"):
        main(["mlp", "--device", "cuda"])
