# The native extension is the only thing pyproject.toml cannot declare.
from setuptools import setup

setup(cffi_modules=["brgemm/_build_cpu.py:ffibuilder"])
