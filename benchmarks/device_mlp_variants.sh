#!/usr/bin/env bash
# The recompute backward's variants (the BWD_* macros of kernels/cuda/mlp_fused.cu,
# issue 18) on the lent GPU, in one short part: every variant's fatbin built (in
# parallel), the fused-MLP tests that run the recompute backward against each
# build (in parallel, one process each), then one process
# (benchmarks.gpu_mlp_variants) times the training step of the default build and
# of every variant whose tests passed, then torch.compile's. Summary lines on
# stdout ("variant NAME: ..."), logs in $OUT.
# Run from the repository root once brgemm and its default fatbins are built:
# device_gpu.sh's mlp branch runs it as part "variants" (after its build), or alone
# PYTHON=python3 bash benchmarks/device_mlp_variants.sh. Settings:
#   MLP_BWD_VARIANTS       "NAME=FLAG,FLAG ..." (default: the four below, each turns one more macro off)
#   MLP_VARIANTS_COMPILE   torch.compile mode, "none" for none (default max-autotune-no-cudagraphs)
#   MLP_VARIANTS_TIMEOUT   seconds for the timing process (default 240)
#   MLP_VARIANTS_K         pytest -k of the tests per build (default "not stored": every
#                          test that may run the recompute backward)
set -uo pipefail
py=${PYTHON:-${PY:-python3}}
out=${OUT:-/tmp}
# the four macros are on by default since the seventh session's timing (RESULTS.md);
# the default variants switch them back off, last first, to show what each brings
noearly=-DBWD_EARLY_DY=0 nosync=$noearly,-DBWD_FEWER_SYNCS=0 nopipe=$nosync,-DBWD_WG_PIPE=0
none=$nopipe,-DBWD_DW_SWIZZLE=0
variants=${MLP_BWD_VARIANTS:-"noearly=$noearly nosync=$nosync nopipe=$nopipe none=$none"}
t0=$(date +%s)

for v in $variants; do  # builds, in parallel
  name=${v%%=*} flags=${v#*=}
  rm -f /tmp/mlp_bwd_$name.fatbin  # never an older build
  timeout 180 $py -c "import sys; from brgemm import _build_cuda as b; b.build(sys.argv[1], True, b.MLP_SOURCE, sys.argv[2].split(','))" \
    /tmp/mlp_bwd_$name.fatbin "$flags" > $out/mlp_build_$name.txt 2>&1 &
done
wait
built=""
for v in $variants; do
  name=${v%%=*}
  if [ -s /tmp/mlp_bwd_$name.fatbin ] && ! grep -q "Error\|error" $out/mlp_build_$name.txt; then
    built="$built $name"; rm -f $out/mlp_build_$name.txt  # (empty: $OUT returns 8 files only)
  else
    echo "variant $name: build failed (${v#*=})"; tail -5 $out/mlp_build_$name.txt
  fi
done
echo "variants built:${built:- none} in $(( $(date +%s) - t0 )) s"

t0=$(date +%s)
for name in $built; do  # every test that may run the recompute backward, one process a build
  BRGEMM_MLP_FATBIN=/tmp/mlp_bwd_$name.fatbin timeout 150 $py -m pytest -q -p no:cacheprovider \
    -k "${MLP_VARIANTS_K:-not stored}" tests/test_cuda_mlp.py > $out/mlp_tests_$name.txt 2>&1 &
done
wait
passed=""
for name in $built; do
  summary=$(grep -E "passed|failed|skipped|error" $out/mlp_tests_$name.txt | tail -1)
  if grep -qE "[0-9]+ passed" <<< "$summary" && ! grep -qE "failed|error" <<< "$summary"; then
    passed="$passed $name"; echo "variant $name: tests: $summary"
  else
    echo "variant $name: tests not passed (not timed): ${summary:-no summary (timeout?)}"
    grep -E "^(FAILED|ERROR)" $out/mlp_tests_$name.txt | head -5
  fi
done
echo "variants whose tests passed:${passed:- none} (tests in $(( $(date +%s) - t0 )) s)"

[ -n "$passed" ] || { echo "nothing to time"; exit 0; }
t0=$(date +%s)
compile=${MLP_VARIANTS_COMPILE:-max-autotune-no-cudagraphs}
if [ "$compile" = none ]; then copt=--no-compile; else copt="--compile-mode $compile"; fi
timeout ${MLP_VARIANTS_TIMEOUT:-240} $py -m benchmarks.gpu_mlp_variants $copt \
  $(for name in $passed; do echo "$name=/tmp/mlp_bwd_$name.fatbin"; done) 2>&1
echo "variants timing: exit $? in $(( $(date +%s) - t0 )) s"
