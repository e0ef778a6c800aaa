#!/usr/bin/env bash
# Before / after on the lent machine's host: each command named on the command
# line run in the base tree and in this one, in turns (base, new, base, new),
# so that both sides of a change meet the host's slow periods alike. The base
# tree is a copy of the tracked files at the commit before the change, put in
# .devwork/<name> and carried (BASE=.devwork/<name>); both trees are built
# against the carried libxsmm first. Output: $out/ab.txt.
#   BASE=.devwork/base bash benchmarks/device_ab.sh \
#     '$py -m benchmarks.probe_nchw_copies --threads 16' ...  ($py: the interpreter)
set -uo pipefail
. "$(dirname "$0")/device_setup.sh"
device_machine
here=$PWD
[ -d "${BASE:-}" ] || { echo "BASE: no such tree: ${BASE:-}" >&2; exit 1; }
device_build_cpu
(cd "$BASE" && DEVCARRY=$here/$DEVCARRY PYTHONPATH=/tmp/site:$PWD device_build_cpu) || exit 1
for cmd in "$@"; do
  for side in base new base new; do
    tree=$here; [ $side = base ] && tree=$here/$BASE
    echo "=== $side: $cmd" | tee -a $out/ab.txt
    (cd "$tree" && PYTHONPATH=/tmp/site:$tree py=$py bash -c "$cmd") 2>&1 | tee -a $out/ab.txt
  done
done
