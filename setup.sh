#!/usr/bin/env bash
# Sets up brgemm on Debian from nothing: apt packages (libxsmm-dev, a C
# compiler), a virtual environment at .venv, and the package built in place
# with its test, bench and sycl extras (PyTorch CPU, oneDNN, matplotlib; dpctl
# and the SYCL CPU runtime). Safe to re-run: it skips what is done and
# rebuilds only when the native sources or the packaging changed.
set -euo pipefail
cd "$(dirname "$0")"

# --- system packages ---------------------------------------------------------
missing=()
dpkg -s libxsmm-dev >/dev/null 2>&1 || missing+=(libxsmm-dev)
command -v gcc >/dev/null 2>&1 || missing+=(gcc)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
if command -v python3 >/dev/null 2>&1; then
  python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
  python3 -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
    || missing+=(python3-dev)
fi
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]} with apt-get"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# --- virtual environment and the package ------------------------------------
[ -x .venv/bin/python ] || python3 -m venv .venv
stamp=$(cat pyproject.toml setup.py brgemm/_build_cpu.py brgemm/_build_cuda.py kernels/cpu/* kernels/cuda/* | sha256sum | cut -c1-16)
if [ "$(cat .venv/.brgemm-stamp 2>/dev/null)" != "$stamp" ] \
   || ! .venv/bin/python -c 'import brgemm._brgemm_cpu' 2>/dev/null; then
  echo "setup: installing brgemm with its test, bench and sycl extras into .venv (first time: a few minutes)"
  .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test,bench,sycl]'
  echo "$stamp" > .venv/.brgemm-stamp
fi
