"""cffi builder for the CPU backend (setuptools runs it through `cffi_modules`).

The cdef is kernels/cpu/brgemm_cpu.h itself, minus its preprocessor lines, so
the C API and what Python sees cannot drift apart. libxsmm 1.17 from Debian
ships static archives only (built with -fPIC), linked into the extension.
"""
import importlib.util
import os
import pathlib

import numpy
from cffi import FFI

ROOT = pathlib.Path(__file__).resolve().parent.parent
CPU = ROOT / "kernels" / "cpu"
# Debian's locations by default; the variables point elsewhere (a machine
# where libxsmm-dev cannot be installed gets a copied libxsmm)
LIBXSMM_LIB = pathlib.Path(os.environ.get("LIBXSMM_LIBDIR", "/usr/lib"))
LIBXSMM_INC = os.environ.get("LIBXSMM_INCDIR")


def _cdef(header: pathlib.Path) -> str:
    """The header as cffi reads it (brgemm/_c_header.py, loaded by path: the
    package itself cannot be imported before its extension is built)."""
    spec = importlib.util.spec_from_file_location("_c_header", ROOT / "brgemm" / "_c_header.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.cdef_text(header)


def _archives():
    libs = [LIBXSMM_LIB / "libxsmm.a", LIBXSMM_LIB / "libxsmmnoblas.a"]
    missing = [str(p) for p in libs if not p.exists()]
    if missing:
        raise RuntimeError(
            f"libxsmm static libraries not found: {', '.join(missing)}. "
            "Install Debian's libxsmm-dev (./setup.sh does) or set LIBXSMM_LIBDIR."
        )
    return [str(p) for p in libs]


ffibuilder = FFI()
HEADERS = ("brgemm_cpu.h", "bound_call.h", "bound_plan.h")  # the C API and the cdef
ffibuilder.cdef("\n".join(_cdef(CPU / h) for h in HEADERS))
ffibuilder.set_source(
    "brgemm._brgemm_cpu",
    "".join(f'#include "{h}"\n' for h in HEADERS),
    # relative paths: setuptools refuses absolute ones
    # brgemm_amx.c holds AMX and AVX-512 code behind its own target pragma (run
    # only after CPUID says so); brgemm_amx_model.c is the same source over the
    # software tiles the tests use; epilogue_avx2.c and epilogue_avx512.c likewise
    # hold code for CPUs that epilogue.c checks for before calling it
    sources=[f"kernels/cpu/{name}.c" for name in ("brgemm_cpu", "brgemm_amx", "brgemm_amx_model",
                                                  "epilogue", "epilogue_avx2", "epilogue_avx512",
                                                  "plan", "layout", "jit",
                                                  "layout_image", "layout_vnni", "peak",
                                                  "timing", "bound_call", "bound_plan")],
    # bound_call.c and bound_plan.c read NumPy arrays' fields through NumPy's headers
    include_dirs=[str(CPU), numpy.get_include()] + ([LIBXSMM_INC] if LIBXSMM_INC else []),
    extra_objects=_archives(),
    libraries=["pthread", "rt", "dl", "m"],
    # -fno-trapping-math: without it GCC treats the clamps and int conversions
    # of the epilogue's exp as control flow and leaves its element loops scalar
    # (we never read floating-point exception flags)
    extra_compile_args=["-O3", "-std=gnu11", "-fopenmp", "-fno-trapping-math", "-Wall", "-Wextra",
                        "-Wno-unused-parameter"],
    extra_link_args=["-fopenmp"],  # the plan executor's threads: GNU OpenMP
)

if __name__ == "__main__":  # build in place without pip: python brgemm/_build_cpu.py
    os.chdir(ROOT)
    # under the name pip's build gives it (a limited-API module: .abi3.so), so
    # that the two builds replace each other; a module named for this one
    # interpreter (.cpython-3XX-*.so, as cffi names it by default) would be
    # imported first by that interpreter, and a later pip build would not
    # replace it (earlier in-place builds left such files: removed here)
    ffibuilder.compile(tmpdir=str(ROOT), verbose=False, target="_brgemm_cpu.abi3.so")
    for stale in (ROOT / "brgemm").glob("_brgemm_cpu.cpython-*.so"):
        stale.unlink()
