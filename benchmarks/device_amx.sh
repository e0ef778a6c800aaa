#!/usr/bin/env bash
# The AMX path of the bf16 kernel on the lent machine's Xeon host: build, the
# AMX cases and every kernel and primitive test with AMX active, the kernel
# benchmark (AMX peak, one core), then bf16 layers against oneDNN 3.2 with AMX
# allowed, 2 threads (and 16 with AMX16=1). Arguments pick the layers
# (default: fc conv lstm; "none" for none). TESTS=0 skips the tests,
# PART_TIMEOUT caps each layer run (seconds), KERNEL_VARIANTS and L1_BUDGETS add kernel runs,
# TIMEOUT_<part> and TIMEOUT16_<part> cap one part at 2 and 16 threads,
# KERNEL=0 skips the kernel benchmark, TEST_FILES replaces the test list
# (TESTS_LIMIT: their cap in seconds, default 200; TEST_OPTS: pytest's options,
# default -x; e.g. "-n 8" with OMP_NUM_THREADS=2 runs the whole suite in 8
# workers of 2 threads through pytest-xdist, which the lent machine has),
# VARIANT_TESTS reruns the AMX cases under tunables (below), PROFILE=1 adds
# benchmarks.amx_profile (PROFILE_ARGS: its arguments)
# (where a call's time goes, kernel variants) on one core. PASSES (e.g. "upd")
# limits the layer runs to those passes; UPD_VARIANTS names BRGEMM_CONFIG files
# (benchmarks/amx_upd/*.toml), each one more conv weight-update run at 2
# threads (and 16 with AMX16=1), logged together in upd_variants.txt.
# BLOCK=1: the kernel benchmark's block as FC shapes (benchmarks/shapes/
# amx_block.txt), ours against oneDNN's own AMX kernels at one thread on core 2.
# LAYER_VARIANTS: kernel tunables (joined by commas, as VARIANT_TESTS), each
# one more 2-thread run of each layer part right after its default run (of the
# parts in VARIANT_PARTS, default all), logged together in layer_variants.txt.
# Expects .devcarry as device_cpu.sh and device_onednn.sh do; run from the
# repository root.
set -uo pipefail
. "$(dirname "$0")/device_setup.sh"
[ "${*:-fc conv lstm}" = none ] && [ "${BLOCK:-0}" != 1 ] || device_onednn_setup  # oneDNN for layers only
device_machine
device_build_cpu
$py -c 'import brgemm; from brgemm import machine; print(brgemm.info(), "amx peak", machine.amx_peak(0.3))'
test_files=${TEST_FILES:-tests/amx_cases.py tests/test_kernel.py tests/test_kernel_errors.py \
  tests/test_kernel_fuzz.py tests/test_kernel_bound.py tests/test_kernel_timing.py tests/test_plan.py \
  tests/test_layouts.py tests/test_layouts_image.py tests/test_fc.py tests/test_conv.py tests/test_conv_bias.py \
  tests/test_conv_span.py tests/test_conv_aligned.py tests/test_conv_nchw_x.py tests/test_config.py \
  tests/test_lstm.py tests/test_nn.py tests/test_nn_convert.py}
[ "${TESTS:-1}" = 1 ] && timeout ${TESTS_LIMIT:-200} $py -m pytest -q ${TEST_OPTS:--x} -p no:cacheprovider $test_files > $out/tests.txt 2>&1
tests_rc=$?
tests_summary=$(tail -1 $out/tests.txt 2>/dev/null)
echo "tests exit $tests_rc"; tail -15 $out/tests.txt
# VARIANT_TESTS: the AMX cases again under kernel tunables, one run per word
# (assignments joined by commas, e.g. BRGEMM_AMX_T1=1,BRGEMM_AMX_BTILES=1)
for v in ${VARIANT_TESTS:-}; do
  echo "== amx_cases with $v: $(env ${v//,/ } timeout 60 $py -m pytest -q -x -p no:cacheprovider \
    tests/amx_cases.py -k 'edges or random or depths or packing or whole' 2>&1 | tail -1)" | tee -a $out/tests.txt
done
[ "${PROFILE:-0}" = 1 ] && OMP_NUM_THREADS=1 taskset -c 2 timeout ${TIMEOUT_profile:-120} $py -m benchmarks.amx_profile ${PROFILE_ARGS:-} 2>&1 | tee $out/amx_profile.txt
# the kernel benchmark as built, then once per word of KERNEL_VARIANTS (tunables
# joined by commas, as VARIANT_TESTS) and of L1_BUDGETS (BRGEMM_AMX_L1 values:
# bytes of A and B per pass; 0: one pass)
variants="default ${KERNEL_VARIANTS:-}"
for l1 in ${L1_BUDGETS:-}; do variants="$variants BRGEMM_AMX_L1=$l1"; done
i=0
for v in $variants; do
  [ "${KERNEL:-1}" = 1 ] || break
  echo "kernel benchmark $i: $v" | tee $out/kernel_bench_$i.txt
  [ $v = default ] && v=""
  env ${v//,/ } OMP_NUM_THREADS=1 taskset -c 2 timeout 120 $py -m benchmarks kernel --dtype bf16 \
    --quick 2>&1 | tee -a $out/kernel_bench_$i.txt
  i=$((i + 1))
done
if [ "${BLOCK:-0}" = 1 ]; then
  OMP_NUM_THREADS=1 taskset -c 2 timeout ${TIMEOUT_block:-90} $py -m benchmarks fc --set amx_block \
    --dtype bf16 --threads 1 2>&1 | tee $out/block_bf16_t1.txt
fi
parts=${*:-fc conv lstm}
pass_args=""
for p in ${PASSES:-}; do pass_args="$pass_args --pass $p"; done
for what in $parts; do
  [ "$what" = none ] && continue
  t2=TIMEOUT_$what t16=TIMEOUT16_$what
  t2=${!t2:-${PART_TIMEOUT:-150}}
  taskset -c 2,3 timeout $t2 $py -m benchmarks $what --dtype bf16 --quick --threads 2 $pass_args 2>&1 | tee -a $out/${what}_bf16_amx_t2.txt
  for v in ${LAYER_VARIANTS:-}; do
    case " ${VARIANT_PARTS:-$parts} " in *" $what "*) ;; *) continue ;; esac
    echo "== $what with $v" | tee -a $out/layer_variants.txt
    env ${v//,/ } taskset -c 2,3 timeout $t2 $py -m benchmarks $what --dtype bf16 --quick --threads 2 \
      $pass_args 2>&1 | tee -a $out/layer_variants.txt
  done
  if [ "${AMX16:-0}" = 1 ]; then
    timeout ${!t16:-$t2} $py -m benchmarks $what --dtype bf16 --quick --threads 16 $pass_args 2>&1 | tee -a $out/${what}_bf16_amx_t16.txt
  fi
done
for v in ${UPD_VARIANTS:-}; do
  echo "== BRGEMM_CONFIG=$v: $(tr '\n' ' ' < $v)" | tee -a $out/upd_variants.txt
  BRGEMM_CONFIG=$v taskset -c 2,3 timeout ${TIMEOUT_upd:-40} $py -m benchmarks conv --dtype bf16 --quick \
    --threads 2 --pass upd 2>&1 | tee -a $out/upd_variants.txt
  [ "${AMX16:-0}" = 1 ] && BRGEMM_CONFIG=$v timeout ${TIMEOUT16_upd:-40} $py -m benchmarks conv \
    --dtype bf16 --quick --threads 16 --pass upd 2>&1 | tee -a $out/upd_variants.txt
done
# the reply keeps only the end of the output (and 8 files): repeat what matters
echo "== summary"
[ "${TESTS:-1}" = 1 ] && echo "tests exit $tests_rc: $tests_summary"
grep -h '^== amx_cases' $out/tests.txt 2>/dev/null
grep -h "^kernel benchmark\|64x64x64 x16" $out/kernel_bench_*.txt 2>/dev/null
for f in $out/*_bf16_amx_t*.txt; do [ -e "$f" ] && echo "$(basename $f .txt): $(grep -h '^geomean ours' $f | tr '\n' ' ')"; done
[ -e $out/upd_variants.txt ] && grep -E '^== |^conv bf16|^geomean' $out/upd_variants.txt
[ -e $out/layer_variants.txt ] && grep -E '^== |^geomean ours' $out/layer_variants.txt
[ "${TESTS:-1}" = 1 ] || tests_rc=0
exit $tests_rc  # the tests' status, not the last optional grep's
