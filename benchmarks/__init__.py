"""Benchmarks against oneDNN and PyTorch (python -m benchmarks; README.md)."""
import os

# The cores this process may run on, read as the package loads, before the
# OpenMP runtime does: with OMP_PROC_BIND (or OMP_PLACES) set, libgomp binds
# the initial thread to the first place when it loads, and that thread's own
# mask then holds one core. Read after that, it would say 1.
CORES = tuple(sorted(os.sched_getaffinity(0)))
