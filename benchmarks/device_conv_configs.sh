#!/usr/bin/env bash
# conv's config candidates on the lent machine's host CPU (benchmarks.conv_configs):
# the layer plans at 16 threads (N = 16), then at 2 threads pinned to 2 cores
# (N = 2), keeping what won in both, with PyTorch's calls timed beside; then
# the conv functional forms against PyTorch at both counts with the kept
# tables (BRGEMM_CONFIG; the defaults where none was kept). CONFIGS_SHAPES:
# the layers (default: the quick set); CONFIGS_LIMIT: seconds per part;
# CONFIGS_FUNCTIONAL: layers whose functional calls are also timed under the
# candidates at 16 threads (copies included; for reading, not kept).
# Expects .devcarry (device_carry.sh); run from the repository root.
set -uo pipefail
. "$(dirname "$0")/device_setup.sh"
device_machine
lscpu | grep -iE 'cache|numa|MHz' | tee -a $out/machine.txt
$py -c 'import torch; print("torch", torch.__version__)' | tee -a $out/machine.txt
device_build_cpu
limit=${CONFIGS_LIMIT:-90}
shapes=${CONFIGS_SHAPES:-res2a_branch2b,res3a_branch2b,res4a_branch2c,res5a_branch2b}
pin="taskset -c 2,3"
timeout $limit $py -m benchmarks.conv_configs --threads $(nproc) --shapes $shapes --torch \
  --save /tmp/t16.json 2>&1 | grep -v '^threads:' | tee $out/configs.txt
for f in ${CONFIGS_FUNCTIONAL:-}; do
  timeout $limit $py -m benchmarks.conv_configs --threads $(nproc) --shapes $f --functional \
    --torch 2>&1 | grep -v '^threads:' | tee -a $out/configs.txt
done
timeout $limit $pin $py -m benchmarks.conv_configs --threads 2 --shapes $shapes --torch \
  --with /tmp/t16.json --out $out/tuned.toml 2>&1 | grep -v '^threads:' | tee -a $out/configs.txt
cat $out/tuned.toml 2>/dev/null
cfg=$out/tuned.toml; [ -f $cfg ] || cfg=""
for threads in ${FUNCTIONAL_THREADS:-$(nproc) 2}; do  # FUNCTIONAL_THREADS: fewer (a shorter lease)
  p=""; [ $threads = 2 ] && p=$pin
  echo "== conv, $threads threads, BRGEMM_CONFIG=${cfg:-(defaults)}"
  BRGEMM_CONFIG=$cfg timeout ${FUNCTIONAL_LIMIT:-45} $p $py -m benchmarks conv --quick --vs torch \
    --threads $threads 2>&1 | grep -v '^threads:' | tee -a $out/functional.txt
done
