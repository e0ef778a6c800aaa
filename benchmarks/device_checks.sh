#!/usr/bin/env bash
# A session's closing checks of main in one call on the lent machine (its
# device time is the scarcest thing we have): the GPU suite (device_gpu.sh,
# fatbins carried: CUDA_PREBUILT=1), the AMX tests and the bf16 kernel on one
# core (device_amx.sh none), the functional forms against PyTorch on the Xeon
# host at 16 and 2 threads (device_functional.sh), then GPU_BENCH (arguments
# of benchmarks.gpu, if set). Each part logs into its own folder; all of them
# come back as one archive, $OUT/checks.tgz (only a few files come back from a
# call; written after each part, so a call cut short keeps what ran). Expects .devcarry and the fatbins, as those scripts do; run from the
# repository root. PARTS (default "gpu amx functional") picks parts; part
# "layers" adds the bf16 layers against oneDNN with AMX at 2 threads
# (device_amx.sh AMX_LAYERS, default fc conv lstm; TIMEOUT_<part> caps each);
# part "modules", primitives.nn against torch.nn (python -m benchmarks
# modules --quick) at all cores and at 2 pinned ones (MODULES_LIMIT s each);
# FUNCTIONAL_DTYPES="f32 bf16" runs both parts in bf16 as well; part "vendor",
# benchmarks.probe_vendor_functional (our func/layer beside PyTorch's over
# oneDNN's, f32) at all cores and at 2 pinned ones (VENDOR_LIMIT s each); part
# "main", the README's main job (all --quick, against oneDNN 3.2) likewise
# (MAIN_LIMIT s each); part "columns", benchmarks.probe_columns likewise
# (COLUMNS_LIMIT s each); part "ceilings", benchmarks.probe_route_ceilings,
# forward and backward, likewise (CEILINGS_LIMIT s each); part "stages",
# benchmarks.stages (each functional call's steps; STAGES_WHAT, default conv
# fc) likewise (STAGES_LIMIT s each); part "tail", benchmarks.probe_pointwise_tail
# likewise (TAIL_LIMIT s each); part "train", python -m benchmarks train
# (TRAIN_ARGS, e.g. --quick) eager and with --compile, likewise (TRAIN_LIMIT s
# each); part "variants", benchmarks.probe_config_variants with VARIANTS_ARGS
# (--layers, --variants ..., JSON without spaces) for each pass of
# VARIANTS_PASSES (default fwd) likewise (VARIANTS_LIMIT s each).
set -uo pipefail
final=${OUT:-/tmp}
work=$(mktemp -d)
parts=${PARTS:-gpu amx functional}
t0=$(date +%s)
# at_both FN: FN at all cores, then at 2 pinned to cores 2-3 (away from core 0),
# with t (the thread count) and pin (the taskset prefix, or nothing) set for it
at_both() {
  for t in $(nproc) 2; do
    pin=""; [ $t = 2 ] && [ $(nproc) -ge 4 ] && pin="taskset -c 2,3"
    "$1"
  done
}
modules_run() {
  for d in ${FUNCTIONAL_DTYPES:-f32}; do
    timeout ${MODULES_LIMIT:-60} $pin $py -m benchmarks modules --quick --threads $t --dtype $d
  done
}
vendor_run() {
  timeout ${VENDOR_LIMIT:-150} $pin $py -m benchmarks.probe_vendor_functional --threads $t
}
main_run() { timeout ${MAIN_LIMIT:-150} $pin $py -m benchmarks all --quick --threads $t; }
columns_run() { timeout ${COLUMNS_LIMIT:-150} $pin $py -m benchmarks.probe_columns --threads $t; }
ceilings_run() {
  for p in fwd bwd; do
    timeout ${CEILINGS_LIMIT:-90} $pin $py -m benchmarks.probe_route_ceilings --threads $t --pass $p
  done
}
train_run() {  # the training benchmark, eager and under torch.compile
  for c in "" --compile; do
    timeout ${TRAIN_LIMIT:-120} $pin $py -m benchmarks train --threads $t ${TRAIN_ARGS:-} $c
  done
}
variants_run() {
  for p in ${VARIANTS_PASSES:-fwd}; do
    timeout ${VARIANTS_LIMIT:-90} $pin $py -m benchmarks.probe_config_variants --threads $t \
      --pass $p ${VARIANTS_ARGS:-}
  done
}
tail_run() { timeout ${TAIL_LIMIT:-60} $pin $py -m benchmarks.probe_pointwise_tail --threads $t; }
stages_run() {
  for what in ${STAGES_WHAT:-conv fc}; do
    timeout ${STAGES_LIMIT:-60} $pin $py -m benchmarks.stages --threads $t --only $what
  done
}
for part in $parts; do
  mkdir -p $work/$part; start=$(date +%s)
  case $part in
    gpu) OUT=$work/gpu CUDA_PREBUILT=1 SUITE_ONLY=1 SUITE_TIMEOUT=${SUITE_TIMEOUT:-170} BENCH=0 \
           bash benchmarks/device_gpu.sh ;;
    amx) OUT=$work/amx BUILT=1 bash benchmarks/device_amx.sh none ;;
    layers) OUT=$work/layers BUILT=1 TESTS=0 KERNEL=0 TIMEOUT_fc=${TIMEOUT_fc:-25} \
           TIMEOUT_conv=${TIMEOUT_conv:-40} TIMEOUT_lstm=${TIMEOUT_lstm:-40} \
           bash benchmarks/device_amx.sh ${AMX_LAYERS:-fc conv lstm} ;;
    modules) (OUT=$work/modules BUILT=1; . benchmarks/device_setup.sh && device_build_cpu &&
           at_both modules_run) ;;
    vendor) (OUT=$work/vendor BUILT=1; . benchmarks/device_setup.sh && device_onednn_setup &&
           device_build_cpu && at_both vendor_run) ;;
    main) (OUT=$work/main BUILT=1; . benchmarks/device_setup.sh && device_onednn_setup &&
           device_build_cpu && at_both main_run) ;;
    columns) (OUT=$work/columns BUILT=1; . benchmarks/device_setup.sh && device_build_cpu &&
           at_both columns_run) ;;
    ceilings) (OUT=$work/ceilings BUILT=1; . benchmarks/device_setup.sh && device_build_cpu &&
           at_both ceilings_run) ;;
    stages) (OUT=$work/stages BUILT=1; . benchmarks/device_setup.sh && device_build_cpu &&
           at_both stages_run) ;;
    tail) (OUT=$work/tail BUILT=1; . benchmarks/device_setup.sh && device_build_cpu &&
           at_both tail_run) ;;
    variants) (OUT=$work/variants BUILT=1; . benchmarks/device_setup.sh && device_onednn_setup &&
           device_build_cpu && at_both variants_run) ;;
    train) (OUT=$work/train BUILT=1; . benchmarks/device_setup.sh && device_build_cpu &&
           at_both train_run) ;;
    functional) OUT=$work/functional BUILT=1 FUNCTIONAL_LAYOUTS=0 FUNCTIONAL_STAGES=0 \
           FUNCTIONAL_LIMIT=${FUNCTIONAL_LIMIT:-30} bash benchmarks/device_functional.sh ;;
  esac > $work/$part/log.txt 2>&1
  echo "== $part: exit $? in $(( $(date +%s) - start )) s"
  grep -E "passed|failed|^FAILED|geomean|^rows with|s/epoch|^machine" $work/$part/log.txt | tail -20
  tar czf $final/checks.tgz -C $work .  # after each part: a call cut short keeps what ran
done
if [ -n "${GPU_BENCH:-}" ]; then
  mkdir -p $work/bench
  PYTHONPATH=/tmp/site:$PWD timeout ${GPU_BENCH_TIMEOUT:-90} python3 -m benchmarks.gpu $GPU_BENCH \
    > $work/bench/log.txt 2>&1
  echo "== bench: exit $?"; grep -v "^  \|Warning" $work/bench/log.txt | tail -30
fi
tar czf $final/checks.tgz -C $work .
echo "all parts: $(( $(date +%s) - t0 )) s"
