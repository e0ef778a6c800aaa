"""The backend seam. A backend turns a checked kernel description into
something that runs the three forms on already-validated arrays; it never
sees a primitive. Backends register here by name and are imported lazily, so
a missing GPU runtime costs nothing until that backend is asked for.

A backend is a module brgemm.backend.<name> (and a name in KNOWN) with:

    unavailable_reason()   None where it runs here, else why not (a string)
    NativeKernel(form=, dtype_ab=, dtype_c=, m=, n=, k=, lda=, ldb=, ldc=,
                 alpha=, beta=, ...)   one kernel of the contract, with
                 .strd/.addr/.offs/.pack_b on arrays brgemm.kernel checked
    to_device(x)           x as the backend's resident array (NumPy on the CPU)
    PlanReplay(plan)       one brgemm.plan.Plan made runnable here: made on the
                 plan's first run on this backend and kept by the plan. It
                 reads the plan's tables (brgemm/plan.py's docstring), calls
                 plan.require(name, max_op=..., b_vnni=...) for what it
                 cannot run, and turns the rest into its own form once (the
                 CPU: JIT kernels and byte tables; a device: uploaded tables).
                 Attributes: device_array (the resident array class Plan.run
                 accepts besides NumPy, or None), takes_threads (whether
                 run's threads= means anything), optionally adopt(arrays)
                 (other libraries' device tensors as device_array),
                 optionally run_checked(arrays, threads) (Plan.check's tests
                 made natively, then the run: False, nothing run, where any
                 fails; Plan.check then says why); and run(arrays, threads):
                 arrays already checked by Plan.check.

Everything a plan needs checked is checked once, by the plan: its tables
when it is recorded, a run's arrays by Plan.check. A replay checks nothing
again in Python; native code still refuses what it cannot run (error codes)."""
import importlib

from brgemm import environ

KNOWN = ("cpu", "sycl", "cuda")
_loaded = {}


class BackendUnavailable(ValueError):
    """A known backend that cannot run on this machine (and why)."""


def _module(name):
    if name not in _loaded:
        try:
            mod = importlib.import_module(f"brgemm.backend.{name}")
            reason = mod.unavailable_reason()
        except ImportError as e:  # the backend's module or its runtime is missing
            mod, reason = None, f"{type(e).__name__}: {e}"
        _loaded[name] = (mod, reason)
    return _loaded[name]


def available() -> list[str]:
    """Names of the backends that can run here, in KNOWN order."""
    return [name for name in KNOWN if _module(name)[1] is None]


def resolve(backend=None) -> str:
    """The backend argument: a known, available name; None means BRGEMM_BACKEND, else "cpu"."""
    if backend is None:
        backend = environ.get("BRGEMM_BACKEND") or "cpu"
    if not isinstance(backend, str) or backend not in KNOWN:
        raise ValueError(f"backend: unknown {backend!r} (known: {', '.join(KNOWN)})")
    reason = _module(backend)[1]
    if reason is not None:
        raise BackendUnavailable(f"backend: {backend!r} is not available here: {reason}")
    return backend


def get(backend=None):
    """The backend module for `backend` (see resolve)."""
    return _module(resolve(backend))[0]
