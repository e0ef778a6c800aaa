"""The backend seam. A backend turns a checked kernel description into
something that runs the three forms on already-validated arrays; it never
sees a primitive. Backends register here by name and are imported lazily, so
a missing GPU runtime costs nothing until that backend is asked for."""
import importlib
import os

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
        backend = os.environ.get("BRGEMM_BACKEND") or "cpu"
    if not isinstance(backend, str) or backend not in KNOWN:
        raise ValueError(f"backend: unknown {backend!r} (known: {', '.join(KNOWN)})")
    reason = _module(backend)[1]
    if reason is not None:
        raise BackendUnavailable(f"backend: {backend!r} is not available here: {reason}")
    return backend


def get(backend=None):
    """The backend module for `backend` (see resolve)."""
    return _module(resolve(backend))[0]
