"""oneDNN itself, for same-run comparisons: a small C shim (onednn_job.c) over
oneDNN's C API, built with cffi on first use against the oneDNN in this
environment: PyPI onednn + onednn-devel (oneDNN 3.13, whose CPU runtime is
SYCL with TBB threads), or any oneDNN 3.x under ONEDNN_ROOT (the lent GPU
machine's host uses the 3.2 GNU-OpenMP wheels). Each Job is one primitive
with oneDNN's own best ('any') formats; inputs are reordered in when the job is
made and the output is reordered out on request, both outside timed regions."""
import hashlib
import importlib.util
import os
import pathlib
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
BUILD = HERE / "_build"
PASSES = {"fwd": 0, "bwd": 1, "upd": 2}
_lib = None


class Unavailable(RuntimeError):
    """oneDNN (library or headers) is not installed in this environment."""


def _locate():
    prefix = pathlib.Path(os.environ.get("ONEDNN_ROOT") or sys.prefix)  # where pip put its lib/
    header = prefix / "include" / "oneapi" / "dnnl" / "dnnl.h"
    lib = prefix / "lib" / "libdnnl.so"
    if not header.exists() or not lib.exists():
        raise Unavailable(f"oneDNN not found under {prefix} (need include/oneapi/dnnl/dnnl.h and "
                          "lib/libdnnl.so): pip install onednn onednn-devel, which ./setup.sh does")
    return prefix / "include", prefix / "lib"


def load():
    """The compiled shim (ffi, lib), built into benchmarks/onednn/_build when stale."""
    global _lib
    if _lib is not None:
        return _lib
    inc, libdir = _locate()
    # the SYCL build's CPU engine needs the SYCL CPU device: point the OpenCL
    # loader at it before libdnnl (and through it libsycl) loads
    from brgemm.machine import point_opencl_loader
    point_opencl_loader()
    sources = [HERE / "onednn_job.h", HERE / "onednn_job.c"]
    tag = hashlib.sha256(b"".join(p.read_bytes() for p in sources) + str(libdir).encode())
    name = f"_onednn_job_{tag.hexdigest()[:12]}"
    found = list(BUILD.glob(f"{name}*.so"))
    if not found:
        from cffi import FFI
        ffi = FFI()
        ffi.cdef(sources[0].read_text())
        ffi.set_source(name, '#include <stdint.h>\n#include "onednn_job.h"',
                       sources=[str(sources[1])], include_dirs=[str(HERE), str(inc)],
                       library_dirs=[str(libdir)], libraries=["dnnl"],
                       # DT_RPATH, not RUNPATH: libdnnl's own dependencies (TBB,
                       # libsycl) lie in the same folder and it names none
                       extra_link_args=[f"-Wl,--disable-new-dtags,-rpath,{libdir}"],
                       extra_compile_args=["-O2"])
        BUILD.mkdir(exist_ok=True)
        found = [pathlib.Path(ffi.compile(tmpdir=str(BUILD)))]
    spec = importlib.util.spec_from_file_location(name, found[0])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    _lib = (mod.ffi, mod.lib)
    return _lib


class Job:
    """One oneDNN primitive, ready to run: Job.ip(...) or Job.conv(...)."""

    def __init__(self, make, out_shape):
        ffi, lib = load()
        self._ffi, self._lib = ffi, lib
        ptr = ffi.new("onednn_job **")
        rc = make(ptr)
        self._job = ffi.gc(ptr[0], lib.onednn_destroy) if ptr[0] != ffi.NULL else None
        if rc != 0:
            raise RuntimeError(f"oneDNN: {ffi.string(lib.onednn_error()).decode()}")
        self.out_shape = out_shape
        self.impl = ffi.string(lib.onednn_impl(self._job)).decode()

    @staticmethod
    def _f32(a):
        return np.ascontiguousarray(a, dtype=np.float32) if a is not None else None

    @classmethod
    def ip(cls, pass_, x, w, dy, dtype="f32"):
        """Inner product: y = x w^T; inputs per pass as in onednn_job.h, f32 or bf16 values."""
        x, w, dy = cls._f32(x), cls._f32(w), cls._f32(dy)
        N, C = x.shape if x is not None else (dy.shape[0], w.shape[1])
        K = w.shape[0] if w is not None else dy.shape[1]
        out = {"fwd": (N, K), "bwd": (N, C), "upd": (K, C)}[pass_]
        keep = [x, w, dy]

        def make(ptr):
            ffi, lib = load()
            p = [ffi.from_buffer("float[]", a) if a is not None else ffi.NULL for a in keep]
            return lib.onednn_ip(ptr, PASSES[pass_], N, C, K, dtype == "bf16", *p)
        return cls(make, out)

    @classmethod
    def conv(cls, pass_, N, C, K, H, W, R, S, stride, pad, x=None, w=None, dy=None, dtype="f32"):
        """Convolution (NCHW / OIHW plain data in and out)."""
        keep = [cls._f32(x), cls._f32(w), cls._f32(dy)]
        (sh, sw), (ph, pw) = stride, pad
        P, Q = (H + 2 * ph - R) // sh + 1, (W + 2 * pw - S) // sw + 1
        out = {"fwd": (N, K, P, Q), "bwd": (N, C, H, W), "upd": (K, C, R, S)}[pass_]

        def make(ptr):
            ffi, lib = load()
            p = [ffi.from_buffer("float[]", a) if a is not None else ffi.NULL for a in keep]
            return lib.onednn_conv(ptr, PASSES[pass_], N, C, K, H, W, R, S, sh, sw, ph, pw,
                                   dtype == "bf16", *p)
        return cls(make, out)

    @classmethod
    def lstm(cls, pass_, x, h0, c0, w_ih, w_hh, b, dy=None, dhT=None, dcT=None, dtype="f32"):
        """LSTM in torch.nn.LSTM layouts (f32 values in and out). fwd outputs y; bwd
        outputs dx (and computes all the other gradients too, as a training step
        would). bf16: x, h, weights and y in bf16, the c state, bias and all
        gradients f32 (oneDNN's RNN data types)."""
        T, N, C = x.shape
        K = h0.shape[1]
        keep = [cls._f32(a) for a in (x, h0, c0, w_ih, w_hh, b, dy, dhT, dcT)]

        def make(ptr):
            ffi, lib = load()
            p = [ffi.from_buffer("float[]", a) if a is not None else ffi.NULL for a in keep]
            return lib.onednn_lstm(ptr, PASSES[pass_], T, N, C, K, dtype == "bf16", *p)
        return cls(make, (T, N, K) if pass_ == "fwd" else (T, N, C))

    def run(self, times=1):
        if self._lib.onednn_run(self._job, times) != 0:
            raise RuntimeError(f"oneDNN: {self._ffi.string(self._lib.onednn_error()).decode()}")

    def result(self):
        out = np.empty(self.out_shape, np.float32)
        if self._lib.onednn_result(self._job, self._ffi.from_buffer("float[]", out)) != 0:
            raise RuntimeError(f"oneDNN: {self._ffi.string(self._lib.onednn_error()).decode()}")
        return out
