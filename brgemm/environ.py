"""The environment variables read on every call (BRGEMM_BACKEND, BRGEMM_CONFIG).

os.environ.get(name) walks three Python layers (Mapping.get, __getitem__, the
key's encoding) and, for an unset variable, raises and catches a KeyError in
each call: about a microsecond, twice per functional call. get() reads the
mapping os.environ keeps its contents in (CPython, POSIX), which every write
through os.environ (monkeypatch.setenv included) updates, so it sees exactly
what os.environ.get sees; elsewhere it is os.environ.get."""
import os
import sys

_data = getattr(os.environ, "_data", None)
_FAST = (sys.implementation.name == "cpython" and os.name == "posix" and isinstance(_data, dict)
         and all(isinstance(k, bytes) for k in list(_data)[:1]))
_keys = {}  # name -> its key in _data


def get(name, default=None):
    """os.environ.get(name, default)."""
    if not _FAST:
        return os.environ.get(name, default)
    key = _keys.get(name)
    if key is None:
        key = _keys[name] = os.fsencode(name)
    value = _data.get(key)
    return default if value is None else os.fsdecode(value)
