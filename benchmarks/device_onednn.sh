#!/usr/bin/env bash
# Conv, FC and LSTM against oneDNN on the lent GPU machine's host CPU (a Xeon
# with AVX-512, AVX512-BF16 and AMX), 2 threads pinned to 2 cores: f32, then
# bf16 with oneDNN capped at our ISA (ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16) and
# with AMX allowed. Arguments pick the parts (conv fc lstm lstm_bf16, or one
# dtype: conv_f32 fc_f32 conv_bf16 fc_bf16, bf16 at equal ISA; default conv fc lstm).
# Expects .devcarry (benchmarks/device_carry.sh fills it) with the onednn-cpu-gomp and
# onednn-devel-cpu-gomp wheels (oneDNN 3.2, GNU OpenMP) in .devcarry/whl: the
# machine has no network and PyPI's onednn 3.13 needs Intel's SYCL runtime
# wheels (over 300 MB), more than a run may carry.
set -uo pipefail
. "$(dirname "$0")/device_setup.sh"
device_onednn_setup
device_build_cpu
run() { taskset -c 2,3 $py -m benchmarks "$@" --threads 2; }
parts=${*:-conv fc lstm}
for what in $parts; do
  case $what in
    conv|fc)
      run $what 2>&1 | tee $out/${what}_f32.txt
      ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 run $what --dtype bf16 2>&1 | tee $out/${what}_bf16_isa.txt
      run $what --dtype bf16 --quick 2>&1 | tee $out/${what}_bf16_amx.txt ;;
    conv_f32|fc_f32)
      run ${what%_f32} 2>&1 | tee $out/${what}.txt ;;
    conv_bf16|fc_bf16)
      ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 run ${what%_bf16} --dtype bf16 2>&1 | tee $out/${what}_isa.txt ;;
    lstm)
      run lstm 2>&1 | tee $out/lstm_f32.txt ;;
    lstm_bf16)
      $py -m pytest -q -p no:cacheprovider tests/test_onednn_harness.py 2>&1 | tail -3
      ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 run lstm --dtype bf16 2>&1 | tee $out/lstm_bf16_isa.txt
      run lstm --dtype bf16 --quick 2>&1 | tee $out/lstm_bf16_amx.txt ;;
  esac
done
