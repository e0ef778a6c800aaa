"""Functional calls remembered by their arguments' signature.

A functional form checks its arguments, then derives its geometry, its path
and its plans from them (cached by `_config.cached`, behind a key built from
the arguments and a stamp of the settings files). Each step is cheap while
the interpreter's objects sit in the core's caches; after the previous call's
plans have streamed megabytes through them, every step runs from cold caches
and the call's Python costs several times as much, a tenth of a 1 ms call
(benchmarks/RESULTS.md, issue 17, thirty-fourth session). So a form splits
into the part that checks and decides and the part that runs, and keeps what
the first made under the call's signature: a repeat with the same signature
runs at once. The signature holds everything those checks and decisions read:
each array's type, shape and dtype (C-contiguous NumPy arrays only: the run
part reads them as laid out), the other arguments by type and value, the
backend the environment names, the threads a plan runs on, and (checked as
`_config` checks them) the settings files. Calls with config= or reuse=
are not remembered: their settings and kept weights are the caller's.
One memo per thread, a few signatures each."""
import threading
import time

import numpy as np

from brgemm import config as _files
from brgemm import environ
from brgemm.machine import cpu_threads
from primitives import _config

_SCALARS = frozenset((int, str, bool, float, type(None)))


def signature(arrays, scalars):
    """The memo key of a call on `arrays` (None where an optional one is left
    out) and the other arguments `scalars` (ints, strings, bools, None or
    tuples of ints), or None where it cannot be remembered (an array that is
    not a C-contiguous numpy.ndarray, an argument of another type)."""
    key = [environ.get("BRGEMM_BACKEND"), cpu_threads()]
    for a in arrays:
        if a is None:
            key.append(None)
        elif type(a) is np.ndarray and a.flags.c_contiguous:
            key.append((a.shape, a.dtype))
        else:
            return None
    for v in scalars:
        t = type(v)
        if t is tuple:
            if not all(type(e) is int for e in v):
                return None
        elif t not in _SCALARS:
            return None
        key.append((t, v))  # by type too: 1, 1.0 and True are equal keys
    return tuple(key)


class CallMemo:
    """One functional form's remembered calls: get() gives back the runner
    put() kept under a call's signature while the form's settings files are
    unchanged (re-stamped once RECHECK_NS have passed, or at once after
    write_config, a change of BRGEMM_CONFIG or _config.clear())."""

    def __init__(self, primitive, limit=16):
        self.primitive, self._limit = primitive, limit
        self._local = threading.local()

    def _state(self):
        s = self._local.__dict__
        if not s:
            s.update(entries={}, sources=None, checked=0, writes=-1, env=None, generation=-1)
        return s

    def get(self, arrays, scalars, config=None, reuse=None):
        """(key, runner) of a call on `arrays` and `scalars` (see signature):
        its key (None where it is not remembered: config= or reuse= given, or
        an argument signature declines) and the runner put() kept under it
        while the form's settings files are unchanged, else None."""
        if config is not None or reuse is not None:
            return None, None
        key = signature(arrays, scalars)
        if key is None:
            return None, None
        s = self._state()
        env, now = environ.get("BRGEMM_CONFIG"), time.monotonic_ns()
        if (now - s["checked"] >= _config.RECHECK_NS or s["writes"] != _files.writes
                or s["env"] != env or s["generation"] != _config.generation):
            sources = _config.sources(self.primitive, None)
            if sources != s["sources"] or s["generation"] != _config.generation:
                s["entries"].clear()
                s["sources"] = sources
            s.update(checked=now, writes=_files.writes, env=env, generation=_config.generation)
        return key, s["entries"].get(key)

    def put(self, key, run):
        """run, kept under key (from get; nothing kept where it is None)."""
        if key is not None:
            entries = self._state()["entries"]
            if len(entries) >= self._limit:
                del entries[next(iter(entries))]  # the oldest
            entries[key] = run
        return run
