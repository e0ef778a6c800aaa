"""Where primitives find their default configs, and the calls they make."""
import json
import os
import pathlib
import time

from brgemm import config as _files
from brgemm import environ
from brgemm.config import check_config, load_config
from brgemm.lru import LRU

DEFAULTS = pathlib.Path(__file__).resolve().parent / "configs"
_cache = LRU(256)
_derived = LRU(512)


# A functional call stamps its config files, a stat each: a system call. Run
# between other work (a training step's other layers), it runs from cold
# caches and cost 26 us alone, 70 us with the rest of the stamping, on the
# EPYC; taken every 5 ms it was a tenth of a 1 ms call in the main job's
# setting (benchmarks/RESULTS.md, issue 17, thirty-fifth session). So a
# file's stamp is taken again only once RECHECK_NS have passed since it was
# last taken, or at once after write_config wrote any file: a change made
# otherwise (another process, an editor) is seen within a second.
RECHECK_NS = 1_000_000_000
_stamps = LRU(64)  # path -> (monotonic ns when taken, brgemm.config.writes then, stamp)


def _stamp(path):
    """What identifies a file's content cheaply: its path, modification time,
    size and inode (write_config replaces the file: a new one), taken again
    as RECHECK_NS says."""
    path = os.fspath(path)  # str or os.PathLike (check_config): by its string
    now, seen = time.monotonic_ns(), _stamps.get(path)
    if seen is not None and now - seen[0] < RECHECK_NS and seen[1] == _files.writes:
        return seen[2]
    try:
        st = os.stat(path)
        stamp = (path, st.st_mtime_ns, st.st_size, st.st_ino)
    except (OSError, ValueError):
        stamp = (path, None, None, None)
    _stamps.put(path, (now, _files.writes, stamp))
    return stamp


_defaults_files = {}  # primitive -> its defaults file's path, as a string


def sources(primitive, config):
    """Everything a primitive's settings depend on besides the shape: the
    override (config=, else BRGEMM_CONFIG) and the defaults file, by content stamp."""
    check_config(config)
    override = config if config is not None else environ.get("BRGEMM_CONFIG") or None
    if isinstance(override, dict):
        source = ("dict", json.dumps(override, sort_keys=True, default=str))
    else:
        source = _stamp(override) if override is not None else None
    defaults = _defaults_files.get(primitive)
    if defaults is None:  # built once: a pathlib join per call costs as much as the stat
        defaults = _defaults_files[primitive] = str(DEFAULTS / f"{primitive}.toml")
    return source, config is None, _stamp(defaults)


def settings(primitive, pass_, shape, schema, config=None, path=None):
    """The effective settings of one pass for one shape (defaults < BRGEMM_CONFIG or config=);
    path: the kernel path it runs on here, whose ["<path>".<pass>] tables apply.

    The functional forms would otherwise parse TOML on every call; results
    are cached by everything they depend on: the arguments, the override's
    source and both files' modification times."""
    key = (primitive, pass_, tuple(sorted(shape.items())), json.dumps(schema, default=str),
           sources(primitive, config), path)
    return dict(_cache.get_or_make(key, lambda: load_config(
        primitive, pass_, shape, schema=schema, config=config, defaults_dir=DEFAULTS, path=path)))


generation = 0  # clear()s so far: primitives.call_memo forgets its calls when it moves


def clear():
    """Forget every cached setting and derived state: for tests that plant a
    fault in a derivation (a stale entry would outlive the plant)."""
    global generation
    generation += 1
    _cache.clear()
    _derived.clear()
    _stamps.clear()


def cached(primitive, args, config, make):
    """make() -- what a primitive derives from `args` and its settings: a
    frozen geometry, or a functional call's plans and choices for its
    arguments -- cached as settings are: a functional call pays one stat per
    file instead of the settings lookups of every pass and the look-ups of
    each plan, which cost more than the call's own work on small layers.
    args: hashable, and naming what make() returns (its first item, say)."""
    return _derived.get_or_make((primitive, args, sources(primitive, config)), make)
