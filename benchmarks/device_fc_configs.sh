#!/usr/bin/env bash
# fc's config candidates on the lent machine's host CPU (benchmarks.fc_configs):
# the layer plans at 16 threads, then at 2 threads pinned to 2 cores, keeping
# what won in both; then the fc functional forms at 2 threads against PyTorch
# with the kept tables (BRGEMM_CONFIG; the defaults where none was kept).
# Expects .devcarry (device_carry.sh); run from the repository root. Each part
# has a time limit (CONFIGS_LIMIT seconds) so the whole fits a short lease.
set -uo pipefail
. "$(dirname "$0")/device_setup.sh"
device_machine
device_build_cpu
limit=${CONFIGS_LIMIT:-25}
pin="taskset -c 2,3"
timeout $limit $py -m benchmarks.fc_configs --threads $(nproc) --save /tmp/t16.json 2>&1 \
  | tee $out/configs.txt
timeout $limit $pin $py -m benchmarks.fc_configs --threads 2 --with /tmp/t16.json \
  --out $out/tuned.toml 2>&1 | tee -a $out/configs.txt
cat $out/tuned.toml 2>/dev/null
cfg=$out/tuned.toml; [ -f $cfg ] || cfg=""
echo "== fc, BRGEMM_CONFIG=${cfg:-(defaults)}"
BRGEMM_CONFIG=$cfg timeout $limit $pin $py -m benchmarks fc --quick --vs torch --threads 2 2>&1 \
  | grep -v '^threads:' | tee -a $out/functional.txt
for what in ${CONFIGS_ALSO:-}; do  # e.g. lstm: more functional runs at 2 threads
  timeout $limit $pin $py -m benchmarks $what --quick --vs torch --threads 2 2>&1 \
    | grep -v '^threads:' | tee -a $out/functional.txt
done
