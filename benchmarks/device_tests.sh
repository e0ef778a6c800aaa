#!/usr/bin/env bash
# The whole test suite on the lent machine's Xeon host (AVX-512, AMX: the only
# AMX CPU we have), one pytest process per test file, JOBS (default 8) at a
# time with OMP_NUM_THREADS=2 each. Not pytest-xdist: the suite draws random
# shapes into its test ids, so its workers would collect different tests. The
# CPU extension and oneDNN's harness are built once first (parallel builds of
# the harness would race). Largest files first, so the long ones start early.
# TEST_FILES replaces the list. FILE_LIMIT caps each file (seconds, default 400). Logs: $OUT/tests/<file>.txt;
# a line per file on stdout; all logs come back as $OUT/tests.tgz (a call
# returns only a few files). Expects .devcarry (device_carry.sh); run from the
# repository root.
set -uo pipefail
. "$(dirname "$0")/device_setup.sh"
device_onednn_setup
device_build_cpu
$py -c 'from benchmarks import onednn; onednn.load()' || exit 1
mkdir -p $out/tests
export py out FILE_LIMIT=${FILE_LIMIT:-400}
echo ${TEST_FILES:-$(ls -S tests/test_*.py tests/amx_cases.py)} | tr ' ' '\n' | xargs -P ${JOBS:-8} -I{} bash -c '
  n=$(basename {} .py)
  OMP_NUM_THREADS=2 timeout $FILE_LIMIT $py -m pytest -q -rf -p no:cacheprovider {} \
    > $out/tests/$n.txt 2>&1
  echo "$n (exit $?): $(tail -1 $out/tests/$n.txt)"'
grep -h "^FAILED\|^ERROR" $out/tests/*.txt | head -40
tar czf $out/tests.tgz -C $out tests && rm -r $out/tests
