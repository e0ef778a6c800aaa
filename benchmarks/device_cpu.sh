#!/usr/bin/env bash
# The CPU kernel on the lent GPU machine's host CPU (AVX-512, maybe AVX512-BF16),
# which our AVX2 development machines cannot exercise: build in place against a
# copied libxsmm, run the kernel tests, then the kernel benchmark.
# Expects .devcarry/{lib,include,whl}, filled by benchmarks/device_carry.sh (libxsmm archives and headers, cffi and
# pycparser wheels for the machine's Python); run from the repository root.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .devcarry/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
lscpu | grep -E 'Model name|^CPU\(s\)|Thread|Flags' | sed 's/Flags:.*\(avx512[a-z_0-9 ]*\).*/Flags (avx512 part): \1/' 
grep -o 'avx512[a-z_0-9]*\|amx[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
LIBXSMM_LIBDIR=.devcarry/lib LIBXSMM_INCDIR=.devcarry/include python3 brgemm/_build_cpu.py || exit 1
python3 -c 'import brgemm; from brgemm import machine; print("libxsmm target", machine.cpu_arch(), "bf16 path", brgemm.Kernel(64,64,64,dtype="bf16").path, "f32 peak", machine.fma_peak(0.3), "bf16 peak", machine.bf16_peak(0.3))'
for extra in "$@"; do python3 "$extra"; done  # diagnostics named on the command line
python3 -m pytest -q -p no:cacheprovider tests/test_kernel.py tests/test_kernel_errors.py tests/test_kernel_fuzz.py \
  > ${OUT:-/tmp}/kernel_tests.txt 2>&1; echo "kernel tests exit $?"; tail -4 ${OUT:-/tmp}/kernel_tests.txt
taskset -c 2 python3 -m benchmarks kernel 2>&1 | tee ${OUT:-/tmp}/kernel_bench.txt
