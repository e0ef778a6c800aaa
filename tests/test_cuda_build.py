"""The CUDA sources compile wherever nvcc is (CI without a GPU included), and
without a usable GPU the backend is absent with a reason."""
import shutil

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


def test_absent_gpu_is_named():
    if "cuda" in brgemm.backends():
        pytest.skip("a GPU is here")
    with pytest.raises(BackendUnavailable, match="^backend: 'cuda' is not available here: .+"):
        resolve("cuda")
    with pytest.raises(BackendUnavailable, match="^backend: 'cuda'"):
        brgemm.Kernel(4, 4, 4, backend="cuda")
