#!/usr/bin/env bash
# The fused MLP on the lent GPU machine's host CPU (a 16-core Xeon: AVX-512,
# AVX512-BF16, AMX): its tests, then python -m benchmarks mlp (fused against our
# unfused MLP and PyTorch, f32 and bf16) at all cores (MLP_TWO=1: at 2 pinned cores too).
# Expects .devcarry (device_carry.sh: libxsmm, cffi and pycparser wheels); run
# from the repository root. Each part has a time limit so the whole fits a short lease.
set -uo pipefail
. "$(dirname "$0")/device_setup.sh"
device_machine
device_build_cpu
timeout ${MLP_TEST_LIMIT:-40} $py -m pytest -q -p no:cacheprovider tests/test_mlp_fused.py 2>&1 \
  | tail -5 | tee $out/tests.txt
limit=${MLP_LIMIT:-80}  # seconds per benchmark run
all=$(nproc)
timeout $limit $py -m benchmarks mlp --quick --threads $all --dtype f32 --dtype bf16 2>&1 \
  | tee $out/mlp_${all}t.txt
if [ -n "${MLP_TWO:-}" ]; then
  pin=""; [ $all -ge 4 ] && pin="taskset -c 2,3"
  timeout $limit $pin $py -m benchmarks mlp --quick --threads 2 --dtype f32 --dtype bf16 2>&1 \
    | tee $out/mlp_2t.txt
fi
cp benchmarks/results/mlp-*.png $out/ 2>/dev/null
exit 0
