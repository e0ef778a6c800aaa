"""Builds the CUDA backend's device code: kernels/cuda/*.cu -> brgemm/_brgemm_cuda.fatbin.

One fatbin holds sm_90a machine code (Hopper: the wgmma tensor-core path)
and compute_80 PTX, which the driver compiles for any other GPU from Ampere
on (the generic path only there). The backend loads it through the CUDA
driver API at run time, so no toolkit is needed where it runs. setup.py
calls build(); where nvcc is missing the backend is simply absent.
Build in place without pip: python brgemm/_build_cuda.py
"""
import os
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOURCE = ROOT / "kernels" / "cuda" / "brgemm_plan.cu"
OUTPUT = ROOT / "brgemm" / "_brgemm_cuda.fatbin"
TARGETS = ["-gencode", "arch=compute_90a,code=sm_90a",   # wgmma needs the "a" target
           "-gencode", "arch=compute_80,code=compute_80"]


def nvcc():
    """The nvcc to use (NVCC, else PATH, else /usr/local/cuda), or None."""
    found = os.environ.get("NVCC") or shutil.which("nvcc")
    if not found and os.path.exists("/usr/local/cuda/bin/nvcc"):
        found = "/usr/local/cuda/bin/nvcc"
    return found


def command(compiler, output, extra=()):
    return [compiler, "-fatbin", "-O3", "-std=c++17", f"-I{ROOT / 'kernels' / 'cpu'}",
            f"-I{SOURCE.parent}", *TARGETS, *extra, "-o", str(output), str(SOURCE)]


def build(output=OUTPUT, strict=False):
    """Compile the fatbin; returns its path, or None where there is no nvcc.
    A compile error raises with strict, else it is reported and the backend
    stays absent (the package still installs)."""
    compiler = nvcc()
    if compiler is None:
        print("brgemm: nvcc not found; the CUDA backend is not built", file=sys.stderr)
        return None
    try:
        subprocess.run(command(compiler, output), check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as e:
        pathlib.Path(output).unlink(missing_ok=True)  # never leave an older build behind
        if strict:
            raise RuntimeError(f"nvcc failed:\n{e.stderr}") from None
        print(f"brgemm: nvcc failed, the CUDA backend is not built:\n{e.stderr}", file=sys.stderr)
        return None
    return output


def build_if_stale():
    """build() unless the fatbin is newer than every CUDA and shared C header source."""
    sources = list((ROOT / "kernels" / "cuda").iterdir()) + [ROOT / "kernels" / "cpu" / "brgemm_cpu.h"]
    if OUTPUT.exists() and OUTPUT.stat().st_mtime > max(p.stat().st_mtime for p in sources):
        return OUTPUT
    return build()


if __name__ == "__main__":
    print(build(strict=True) or "no nvcc: nothing built")
