# The native pieces are the only things pyproject.toml cannot declare: the
# CPU extension (cffi) and the CUDA backend's fatbin, built here when nvcc
# exists (kept when it is newer than its sources; absent without nvcc).
import importlib.util
import pathlib

from setuptools import setup

_spec = importlib.util.spec_from_file_location(
    "_build_cuda", pathlib.Path(__file__).resolve().parent / "brgemm" / "_build_cuda.py")
_build_cuda = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_build_cuda)
_build_cuda.build_if_stale()

setup(cffi_modules=["brgemm/_build_cpu.py:ffibuilder"])
