#!/usr/bin/env bash
# Fills .devcarry/, what the device_*.sh scripts need on the lent GPU machine,
# which has no network: libxsmm's archives and headers (from this machine's
# Debian package), and wheels for that machine's Python 3.12 (cffi, pycparser;
# oneDNN 3.2 with GNU OpenMP, the CPU baseline there). Run here, from the
# repository root, once per checkout; .devcarry is ignored by git and named in
# the device call's `carry`.
set -euo pipefail
cd "$(dirname "$0")/.."
exclude=$(git rev-parse --git-path info/exclude)  # a worktree's .git is a file
grep -qx '/.devcarry/' "$exclude" 2>/dev/null || { mkdir -p "$(dirname "$exclude")"; echo /.devcarry/ >> "$exclude"; }
mkdir -p .devcarry/lib .devcarry/include .devcarry/whl
cp /usr/lib/libxsmm.a /usr/lib/libxsmmnoblas.a .devcarry/lib/
cp -r /usr/include/libxsmm* .devcarry/include/
py=.venv/bin/python; [ -x $py ] || py=python3
$py -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .devcarry/whl cffi==1.17.1 pycparser==2.22 onednn-cpu-gomp==2023.2.0 onednn-devel-cpu-gomp==2023.2.0 \
  2>&1 | grep -v '^WARNING: Location' || true
du -sh .devcarry
