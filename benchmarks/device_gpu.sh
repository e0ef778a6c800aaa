#!/usr/bin/env bash
# Everything GPU-side in one call on the lent NVIDIA machine (GPU time is
# scarce): build the CUDA fatbin there with its nvcc and the CPU extension
# against a copied libxsmm (the tests compare with the CPU path), run the
# CUDA tests and every backend-parametrized test on "cuda", then time the
# CUDA backend against PyTorch. Logs go to $OUT. Run from the repository root;
# DEVCARRY points at the .devcarry folder (cffi wheels, libxsmm).
# Arguments: benchmarks.gpu options (default: all of it). TMA_FIRST=1: the TMA
# path's tests first (the benchmark skips that path if they fail, the suite
# does not run them again); BRGEMM_CUDA_TMA=0: everything with the TMA path off
# (brgemm/backend/cuda.py tma_loads). SUITE_PATHS: the suite's test paths
# (default tests/); SUITE_ENV="A=1 B=1": environment of the suite alone
# (e.g. BRGEMM_CUDA_TMA=0 BRGEMM_CUDA_VEC_STORES=0); BENCH=0: no benchmark. CUDA_PREBUILT=1: use the
# brgemm/*.fatbin that travelled (built here with the same nvcc). VARIANTS="5 6": also
# build the tensor-core path with that many pipeline stages and time GEMM on each.
# First argument "mlp": the fused MLP alone (build, its tests, then the parts
# of benchmarks.gpu_mlp, remaining arguments passed on; see that branch);
# MLP_VARIANTS="4": also time ours with the forward built for that many blocks
# per multiprocessor; part "variants": the recompute backward's variants
# (benchmarks/device_mlp_variants.sh: build, tests, timing against compile).
set -uo pipefail
. "$(dirname "$0")/device_setup.sh"
OUT=$out
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
nvcc --version | tail -1
t0=$(date +%s)
device_build_cpu
if [ -n "${CUDA_PREBUILT:-}" ] && [ -f brgemm/_brgemm_cuda.fatbin ]; then  # fatbins built elsewhere with the same nvcc, carried
  echo "carried fatbins: $(ls -l brgemm/*.fatbin | awk '{print $5, $9}' | tr '\n' ' ')"
else
  $py brgemm/_build_cuda.py || exit 1
fi
command -v cuobjdump >/dev/null && echo "HGMMA in SASS: $(cuobjdump -sass brgemm/_brgemm_cuda.fatbin | grep -c HGMMA), UTMALDG: $(cuobjdump -sass brgemm/_brgemm_cuda.fatbin | grep -c UTMALDG), HMMA in the fused MLP's: $(cuobjdump -sass brgemm/_mlp_cuda.fatbin | grep -c HMMA)"
echo "build: $(( $(date +%s) - t0 )) s"
$py -c 'import brgemm; from brgemm import machine; print(brgemm.backends(), machine.device_name("cuda"), "wgmma:", machine.cuda_has_tensor_cores())'
if [ "${1:-}" = mlp ]; then
  # the fused MLP: its tests, then benchmarks.gpu_mlp's parts, each under its own
  # timeout (MLP_PARTS, default "main widths batch"; "autotune": the main case
  # against torch.compile's max-autotune-no-cudagraphs); tables to stdout, rows
  # and the plot to $OUT
  shift; start=$(date +%s)
  t0=$(date +%s)
  if [ "${MLP_TESTS:-1}" = 1 ]; then
    timeout ${MLP_TEST_TIMEOUT:-150} $py -m pytest -q -p no:cacheprovider tests/test_cuda_mlp.py tests/test_cuda_build.py > $OUT/mlp_tests.txt 2>&1
    echo "fused MLP tests exit $? in $(( $(date +%s) - t0 )) s"; grep -E "^(FAILED|ERROR)|passed|failed" $OUT/mlp_tests.txt | tail -20
  fi
  # MLP_DEADLINE: seconds from the start of the mlp part after which no part starts
  for part in ${MLP_PARTS:-main widths batch}; do
    t0=$(date +%s); left=$(( ${MLP_DEADLINE:-100000} - (t0 - start) ))
    [ $left -gt 20 ] || { echo "part $part: skipped (deadline)"; continue; }
    lim() { echo $(( $1 < left ? $1 : left )); }
    case $part in
      main) timeout $(lim ${MLP_MAIN_TIMEOUT:-240}) $py -m benchmarks.gpu_mlp --what main --compile-mode default --json $OUT/mlp_main.json "$@" 2>&1 ;;
      autotune) timeout $(lim ${MLP_AUTOTUNE_TIMEOUT:-240}) $py -m benchmarks.gpu_mlp --what main --compile-mode max-autotune-no-cudagraphs --json $OUT/mlp_autotune.json "$@" 2>&1 ;;
      widths) timeout $(lim ${MLP_WIDTHS_TIMEOUT:-120}) $py -m benchmarks.gpu_mlp --what widths ${MLP_WIDTHS_COMPILE:---compile-mode default} --json $OUT/mlp_widths.json "$@" 2>&1 ;;
      batch) timeout $(lim ${MLP_BATCH_TIMEOUT:-120}) $py -m benchmarks.gpu_mlp --what batch --no-compile --reps 10 --json $OUT/mlp_batch.json --png $OUT/mlp_batch.png "$@" 2>&1 ;;
      variants) PYTHON=$py timeout $(lim ${MLP_VARIANTS_PART_TIMEOUT:-420}) bash benchmarks/device_mlp_variants.sh 2>&1 ;;
    esac
    echo "part $part: exit $? in $(( $(date +%s) - t0 )) s"
  done
  for mb in ${MLP_VARIANTS:-}; do
    $py -c "import subprocess; from brgemm import _build_cuda as b; subprocess.run(b.command(b.nvcc(), '/tmp/mlp$mb.fatbin', ['-DFWD_MIN_BLOCKS=$mb'], source=b.MLP_SOURCE), check=True)" || continue
    echo "--- FWD_MIN_BLOCKS=$mb"; BRGEMM_MLP_FATBIN=/tmp/mlp$mb.fatbin timeout 60 $py -m benchmarks.gpu_mlp --no-compile "$@" 2>&1 | tail -6
  done
  exit 0
fi
t0=$(date +%s)
if [ -z "${SUITE_ONLY:-}" ]; then  # SUITE_ONLY=1: these run within the suite below anyway
  timeout 90 $py -m pytest -q -x -p no:cacheprovider tests/test_cuda.py tests/test_device_backends.py tests/test_cuda_build.py > $OUT/gpu_tests.txt 2>&1
  echo "CUDA tests exit $? in $(( $(date +%s) - t0 )) s"; tail -5 $OUT/gpu_tests.txt
fi
suite_skip=()
if [ -n "${TMA_FIRST:-}" ]; then  # the TMA path's tests alone first; the benchmark skips it if they fail
  t0=$(date +%s)
  timeout ${TMA_TIMEOUT:-120} $py -m pytest -q -p no:cacheprovider tests/test_cuda_tma.py > $OUT/tma_tests.txt 2>&1; rc=$?
  echo "TMA tests exit $rc in $(( $(date +%s) - t0 )) s"; grep -E "^(FAILED|ERROR)|passed|failed|Error|^E " $OUT/tma_tests.txt | head -20
  [ $rc = 0 ] || set -- "$@" --skip-tma
  suite_skip=(--ignore tests/test_cuda_tma.py)
fi
t0=$(date +%s)
env ${SUITE_ENV:-} timeout ${SUITE_TIMEOUT:-150} $py -m pytest -q -p no:cacheprovider -k cuda ${SUITE_PATHS:-tests/} ${suite_skip[@]+"${suite_skip[@]}"} > $OUT/suite_cuda.txt 2>&1
echo "suite on cuda exit $? in $(( $(date +%s) - t0 )) s"; grep -E "^(FAILED|ERROR)|passed|failed|Error" $OUT/suite_cuda.txt | tail -12
[ "${BENCH:-1}" = 0 ] || timeout ${BENCH_TIMEOUT:-300} $py -m benchmarks.gpu "$@" 2>&1 | tee $OUT/gpu_bench.txt
[ -n "${GEMM_QUICK:-}" ] && timeout 40 $py -m benchmarks.gpu --what gemm --dtypes bf16 --quick --skip-tma 2>&1 | tee $OUT/gpu_gemm.txt  # GEMM_QUICK=1: the 4096^3 GEMM too
for st in ${VARIANTS:-}; do
  $py -c "import subprocess, sys; from brgemm import _build_cuda as b; subprocess.run(b.command(b.nvcc(), '/tmp/v$st.fatbin', ['-DSTAGES=$st']), check=True)" || continue
  echo "--- STAGES=$st"; BRGEMM_CUDA_FATBIN=/tmp/v$st.fatbin timeout 60 $py -m benchmarks.gpu --what gemm 2>&1 | tail -4
done
