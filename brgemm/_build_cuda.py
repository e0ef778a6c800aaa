"""Builds the CUDA backend's device code: kernels/cuda/brgemm_plan.cu ->
brgemm/_brgemm_cuda.fatbin (plan replay) and kernels/cuda/mlp_fused.cu ->
brgemm/_mlp_cuda.fatbin (the fused MLP), one module each.

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
MLP_SOURCE = ROOT / "kernels" / "cuda" / "mlp_fused.cu"
MLP_OUTPUT = ROOT / "brgemm" / "_mlp_cuda.fatbin"
MODULES = ((SOURCE, OUTPUT), (MLP_SOURCE, MLP_OUTPUT))  # (source, fatbin)
TARGETS = ["-gencode", "arch=compute_90a,code=sm_90a",   # wgmma needs the "a" target
           "-gencode", "arch=compute_80,code=compute_80"]


def nvcc():
    """The nvcc to use (NVCC, else PATH, else /usr/local/cuda), or None."""
    found = os.environ.get("NVCC") or shutil.which("nvcc")
    if not found and os.path.exists("/usr/local/cuda/bin/nvcc"):
        found = "/usr/local/cuda/bin/nvcc"
    return found


def command(compiler, output, extra=(), source=SOURCE):
    return [compiler, "-fatbin", "-O3", "-std=c++17", f"-I{ROOT / 'kernels' / 'cpu'}",
            f"-I{SOURCE.parent}", *TARGETS, *extra, "-o", str(output), str(source)]


def build(output=OUTPUT, strict=False, source=SOURCE, extra=()):
    """Compile one fatbin (extra: more nvcc flags, e.g. a kernel variant's -D);
    returns its path, or None where there is no nvcc. A compile error raises
    with strict, else it is reported and the backend stays absent (the package
    still installs)."""
    compiler = nvcc()
    if compiler is None:
        print("brgemm: nvcc not found; the CUDA backend is not built", file=sys.stderr)
        return None
    try:
        subprocess.run(command(compiler, output, extra, source), check=True, capture_output=True,
                       text=True)
    except subprocess.CalledProcessError as e:
        pathlib.Path(output).unlink(missing_ok=True)  # never leave an older build behind
        if strict:
            raise RuntimeError(f"nvcc failed:\n{e.stderr}") from None
        print(f"brgemm: nvcc failed, the CUDA backend is not built:\n{e.stderr}", file=sys.stderr)
        return None
    return output


def build_all(strict=False):
    """Every module's fatbin; the paths built (none without nvcc)."""
    return [out for source, out in MODULES if build(out, strict, source)]


def build_if_stale():
    """build_all() unless each fatbin is newer than every CUDA and shared C header source."""
    sources = list((ROOT / "kernels" / "cuda").iterdir()) + [ROOT / "kernels" / "cpu" / "brgemm_cpu.h"]
    newest = max(p.stat().st_mtime for p in sources)
    if all(out.exists() and out.stat().st_mtime > newest for _, out in MODULES):
        return [out for _, out in MODULES]
    return build_all()


if __name__ == "__main__":
    print(" ".join(map(str, build_all(strict=True))) or "no nvcc: nothing built")
