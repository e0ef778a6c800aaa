# Sourced by the device_*.sh scripts (not run on its own): what each of them
# does first on the lent machine, which has no network. Sets:
#   out       $OUT, else /tmp: where logs go
#   py        $PY, else python3 (PY: another interpreter with cffi, for a local dry run)
#   DEVCARRY  the carried folder (device_carry.sh fills it): .devcarry, or
#             ../../.devcarry from a .devwork/<name> copy
# and installs the carried cffi and pycparser wheels into /tmp/site (not with PY).
# device_onednn_setup unpacks the carried oneDNN 3.2 wheels (ONEDNN_ROOT);
# device_machine prints (and saves) the CPU and its vector extensions;
# device_build_cpu builds the CPU extension against the carried libxsmm
# (BUILT=1: not again, where an earlier script of the same call built it).
out=${OUT:-/tmp}
py=${PY:-python3}
DEVCARRY=${DEVCARRY:-.devcarry}
[ -d "$DEVCARRY" ] || DEVCARRY=../../.devcarry
if [ -z "${PY:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
    "$DEVCARRY"/whl/cffi*.whl "$DEVCARRY"/whl/pycparser*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1

device_onednn_setup() {
  # pip --target drops the oneDNN wheels' data files (lib/, include/): unpack them
  mkdir -p /tmp/dnnl && for w in "$DEVCARRY"/whl/onednn*.whl; do $py -m zipfile -e "$w" /tmp/dnnl_x; done
  cp -r /tmp/dnnl_x/*.data/data/* /tmp/dnnl/ || exit 1
  export ONEDNN_ROOT=/tmp/dnnl
}

device_machine() {
  { date -u
    lscpu | grep -E 'Model name|^CPU\(s\)|Thread|Core|Socket'
    grep -o 'avx512[a-z_0-9]*\|amx[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
  } | tee $out/machine.txt
}

device_build_cpu() {
  [ -n "${BUILT:-}" ] && ls brgemm/_brgemm_cpu*.so >/dev/null 2>&1 && return 0
  LIBXSMM_LIBDIR=$DEVCARRY/lib LIBXSMM_INCDIR=$DEVCARRY/include $py brgemm/_build_cpu.py \
    > $out/build.txt 2>&1 || { tail -30 $out/build.txt; exit 1; }
}
