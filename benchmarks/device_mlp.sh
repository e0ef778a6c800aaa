#!/usr/bin/env bash
# The fused MLP on the lent GPU machine's host CPU (a 16-core Xeon: AVX-512,
# AVX512-BF16, AMX): its tests, then python -m benchmarks mlp (fused against our
# unfused MLP and PyTorch, f32 and bf16) at all cores (MLP_TWO=1: at 2 pinned cores too).
# Expects .devcarry (device_carry.sh: libxsmm, cffi and pycparser wheels); run
# from the repository root. Each part has a time limit so the whole fits a short lease.
set -uo pipefail
out=${OUT:-/tmp}
py=${PY:-python3}  # PY: another interpreter with cffi (a local dry run)
if [ -z "${PY:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
    .devcarry/whl/cffi*.whl .devcarry/whl/pycparser*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
lscpu | grep -E 'Model name|^CPU\(s\)|Thread|Core|Socket' | tee $out/machine.txt
grep -o 'avx512[a-z_0-9]*\|amx[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ' | tee -a $out/machine.txt; echo
LIBXSMM_LIBDIR=.devcarry/lib LIBXSMM_INCDIR=.devcarry/include $py brgemm/_build_cpu.py \
  > $out/build.txt 2>&1 || { tail -20 $out/build.txt; exit 1; }
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
