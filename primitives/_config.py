"""Where primitives find their default configs, and the one call they make."""
import json
import os
import pathlib

from brgemm.config import load_config

DEFAULTS = pathlib.Path(__file__).resolve().parent / "configs"
_cache = {}


def _stamp(path):
    """What identifies a file's content cheaply: its path and modification time."""
    try:
        st = os.stat(path)
        return (str(path), st.st_mtime_ns, st.st_size)
    except (OSError, TypeError, ValueError):
        return (str(path), None, None)


def settings(primitive, pass_, shape, schema, config=None):
    """The effective settings of one pass for one shape (defaults < BRGEMM_CONFIG or config=).

    Parsing TOML costs about a millisecond, which the functional forms would pay
    on every call; results are cached by everything they depend on: the
    arguments, the override's source and both files' modification times."""
    override = config if config is not None else os.environ.get("BRGEMM_CONFIG") or None
    if isinstance(override, dict):
        source = ("dict", json.dumps(override, sort_keys=True, default=str))
    else:
        source = _stamp(override) if override is not None else None
    key = (primitive, pass_, tuple(sorted(shape.items())), json.dumps(schema, default=str),
           source, config is None, _stamp(DEFAULTS / f"{primitive}.toml"))
    hit = _cache.get(key)
    if hit is None:
        hit = load_config(primitive, pass_, shape, schema=schema, config=config,
                          defaults_dir=DEFAULTS)
        if len(_cache) > 1024:
            _cache.clear()
        _cache[key] = hit
    return dict(hit)
