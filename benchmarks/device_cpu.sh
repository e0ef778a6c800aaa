#!/usr/bin/env bash
# The CPU kernel on the lent GPU machine's host CPU (AVX-512, maybe AVX512-BF16),
# which our AVX2 development machines cannot exercise: build in place against a
# copied libxsmm, run the kernel tests, then the kernel benchmark.
# Expects .devcarry/{lib,include,whl}, filled by benchmarks/device_carry.sh (libxsmm archives and headers, cffi and
# pycparser wheels for the machine's Python); run from the repository root.
set -uo pipefail
. "$(dirname "$0")/device_setup.sh"
device_machine
device_build_cpu
$py -c 'import brgemm; from brgemm import machine; print("libxsmm target", machine.cpu_arch(), "bf16 path", brgemm.Kernel(64,64,64,dtype="bf16").path, "f32 peak", machine.fma_peak(0.3), "bf16 peak", machine.bf16_peak(0.3))'
for extra in "$@"; do $py "$extra"; done  # diagnostics named on the command line
$py -m pytest -q -p no:cacheprovider tests/test_kernel.py tests/test_kernel_errors.py tests/test_kernel_fuzz.py \
  > $out/kernel_tests.txt 2>&1; echo "kernel tests exit $?"; tail -4 $out/kernel_tests.txt
taskset -c 2 $py -m benchmarks kernel 2>&1 | tee $out/kernel_bench.txt
