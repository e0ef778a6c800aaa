#!/usr/bin/env bash
# The functional forms (conv, fc, lstm; f32, and bf16 with FUNCTIONAL_DTYPES="f32
# bf16") against PyTorch's own calls and our layer path on the lent GPU machine's host CPU (a 16-core Xeon), at 16
# threads and at 2 threads pinned to 2 cores, each call's steps timed in its
# order (benchmarks.stages; FUNCTIONAL_STAGES=0 skips them), plus the layout
# copies alone at 1, 2 and 16 threads. No GPU and no oneDNN needed (--vs torch). Expects
# .devcarry (see device_carry.sh: libxsmm, cffi and pycparser wheels); run from
# the repository root. Each part has a time limit so the whole fits a short lease.
set -uo pipefail
. "$(dirname "$0")/device_setup.sh"
device_machine
$py -c 'import torch; print("torch", torch.__version__)' | tee -a $out/machine.txt
device_build_cpu
limit=${FUNCTIONAL_LIMIT:-40}  # seconds per benchmark run
all=$(nproc)
if [ "${FUNCTIONAL_LAYOUTS:-1}" != 0 ]; then  # 0: skip the layout copies (a shorter lease)
  timeout $limit $py -m benchmarks layouts --threads $all 2>&1 | tee $out/layouts.txt
fi
for threads in $all 2; do
  pin=""; [ $threads = 2 ] && [ $all -ge 4 ] && pin="taskset -c 2,3"  # away from core 0
  if [ "${FUNCTIONAL_STAGES:-1}" != 0 ]; then  # where the functional calls' time goes
    only=""; case "${FUNCTIONAL_WHAT:-}" in conv|fc|lstm) only="--only $FUNCTIONAL_WHAT";; esac
    timeout $limit $pin $py -m benchmarks.stages --threads $threads $only 2>&1 | grep -v '^threads:' \
      | tee -a $out/stages.txt
  fi
  for dtype in ${FUNCTIONAL_DTYPES:-f32}; do  # e.g. "f32 bf16"
    for what in ${FUNCTIONAL_WHAT:-conv fc lstm}; do  # FUNCTIONAL_WHAT: fewer (a shorter lease)
      lim=$limit  # conv at 16 threads took 25 s whole (RESULTS.md), cut at 25 and 28 before
      [ $what = conv ] && [ $lim -lt 40 ] && lim=40
      timeout $lim $pin $py -m benchmarks $what --quick --vs torch --threads $threads \
        --dtype $dtype 2>&1 | grep -v '^threads:' | tee -a $out/functional.txt
    done
  done
done
