"""Configs: per-pass, per-shape settings (spec, block sizes) of a primitive, as TOML.

Defaults live in primitives/configs/<primitive>.toml; a user's file (the
`config=` argument, else the BRGEMM_CONFIG environment variable) overrides them:

    [fwd]                         # a pass: fwd, bwd or upd
    spec = "aBc"
    bm = 64
    [fwd."N=64,C=512,K=512"]      # one shape: any key of the pass, for that shape only
    spec = "Bac"
    [conv.fwd]                    # a primitive-qualified pass: lets one BRGEMM_CONFIG
    spec = "aBcd"                 # file hold settings for several primitives

Precedence, lowest first: default pass < default shape < override pass <
override shape (in each file an unqualified table, then its [<primitive>.<pass>]
twin). A shape key lists exactly the primitive's shape dimensions, "K=v"
joined by ",", in any order, no spaces. Values are str, int, float or bool and
are checked against the caller's schema: unknown keys, wrong types and
non-positive ints raise ConfigError naming the file, the table and the key.
"""
from __future__ import annotations

import copy
import json
import os
import pathlib
import re
import tomllib
from typing import Any, Mapping

from brgemm.lru import LRU

PASSES = ("fwd", "bwd", "upd", "pipeline")  # pipeline: fused nests (mlp)
# the kernel paths (Kernel.path on the CPU; "cuda" for NVIDIA GPUs), which may
# qualify a pass: ["bf16-amx".fwd]
PATHS = ("f32", "bf16-amx", "bf16-vnni", "bf16-via-f32", "cuda")
# what the CPU may add to its kernel path ("<path>@<cpu>", brgemm.info.kernel_path):
# ["f32@amx".fwd] applies after ["f32".fwd], on CPUs with AMX tiles (Xeons of
# Sapphire Rapids' generation on), whose caches and memory differ from the
# AVX-512 machines that the unqualified tables were tuned on; ["f32@avx2".fwd]
# likewise where libxsmm's kernels are AVX2 or narrower (no AVX-512)
CPUS = ("amx", "avx2")
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


class ConfigError(ValueError):
    """A config file or dict that is missing, malformed or does not fit the schema."""


def check_config(config):
    """The config argument of every primitive: None, a dict of tables, or the
    path of a TOML file (str or os.PathLike)."""
    if config is None or isinstance(config, Mapping):
        return config
    if not isinstance(config, (str, os.PathLike)):
        raise ConfigError(f"config: expected a dict, a path to a TOML file or None, "
                          f"got {type(config).__name__}")
    if not os.fspath(config):
        raise ConfigError("config: an empty path (pass None for the defaults)")
    return config


_parsed = LRU(16)  # file stamp -> its tables: a new shape re-reads no file
writes = 0  # files write_config wrote: readers that cache a file's stamp look again


def _read(path: os.PathLike | str, what: str) -> dict:
    try:
        st = os.stat(path)
        stamp = (os.fspath(path), st.st_mtime_ns, st.st_size, st.st_ino)
        data = _parsed.get(stamp)
        if data is None:
            data = _parsed.put(stamp, tomllib.loads(pathlib.Path(path).read_text()))
        return copy.deepcopy(data)
    except FileNotFoundError:
        raise ConfigError(f"{what}: file not found") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"{what}: {e}") from None


def _parse_shape(key: str) -> dict[str, int] | None:
    """'N=64,C=512' -> {'N': 64, 'C': 512}; None if it is not a well-formed shape key."""
    out = {}
    for item in key.split(","):
        name, eq, value = item.partition("=")
        if not (eq and name.isidentifier() and value.isascii() and value.isdigit()) or name in out:
            return None
        out[name] = int(value)
    return out


def _pass_tables(data: Mapping, src: str, primitive: str, pass_: str) -> list[tuple[str, dict]]:
    """Check the file's layout; return its (table name, table) for this primitive's pass."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{src}: not a table of passes")
    for top, table in data.items():
        if top in PASSES:
            if not isinstance(table, Mapping):
                raise ConfigError(f"{src}: [{top}]: must be a table")
            continue
        # Anything else must be a primitive table holding only pass tables;
        # a table with plain values or shape keys is a misspelled pass.
        if (not isinstance(table, Mapping)
                or any(not isinstance(v, Mapping) or "=" in k for k, v in table.items())):
            raise ConfigError(f"{src}: unknown pass {top!r} (allowed: {', '.join(PASSES)})")
        for sub, subtable in table.items():
            if sub not in PASSES:
                raise ConfigError(f"{src}: [{top}]: unknown pass {sub!r} "
                                  f"(allowed: {', '.join(PASSES)})")
    out = []
    if pass_ in data:
        out.append((pass_, data[pass_]))
    if pass_ in data.get(primitive, {}):
        out.append((f"{primitive}.{pass_}", data[primitive][pass_]))
    return out


def _check(values: Mapping, src: str, table: str, schema: Mapping[str, Any]) -> dict:
    out = {}
    for key, v in values.items():
        where = f"{src}: [{table}]: key {key!r}"
        if key not in schema:
            raise ConfigError(f"{src}: [{table}]: unknown key {key!r} "
                              f"(allowed: {', '.join(sorted(schema))})")
        types = schema[key] if isinstance(schema[key], tuple) else (schema[key],)
        if isinstance(v, int) and not isinstance(v, bool) and float in types and int not in types:
            v = float(v)                  # TOML writes 2.0 as 2 all too easily
        if not isinstance(v, types) or (isinstance(v, bool) and bool not in types):
            names = " or ".join(t.__name__ for t in types)
            raise ConfigError(f"{where}: {v!r} is a {type(v).__name__}, expected {names}")
        if isinstance(v, int) and not isinstance(v, bool) and v <= 0:
            raise ConfigError(f"{where}: {v} is not positive")
        out[key] = v
    return out


def _path_tables(data: Mapping, path: str | None, pass_: str) -> list[tuple[str, dict]]:
    """The file's ["<path>".<pass>] table, when the kernel runs that path here;
    for a path with a CPU qualifier, "<base>@<cpu>", the base path's table first."""
    out = []
    for key in ([path.partition("@")[0]] if path and "@" in path else []) + [path]:
        table = data.get(key) if key else None
        if isinstance(table, Mapping) and isinstance(table.get(pass_), Mapping):
            out.append((f'"{key}".{pass_}', table[pass_]))
    return out


def _layers(data: Mapping, src: str, primitive: str, pass_: str,
            shape: Mapping[str, int], schema: Mapping[str, Any], path: str | None = None
            ) -> tuple[dict, dict, dict, dict]:
    """(pass values, values of the table for `shape`, the same two of the
    path-qualified tables) of one file, checked."""
    applied = {path, path.partition("@")[0]} if path else set()
    for other in PATHS + tuple(f"{p}@{cpu}" for p in PATHS for cpu in CPUS):
        if other not in applied:  # every path's tables are checked, on any machine
            _values(_path_tables(data, other, pass_)[-1:], src, shape, schema)
    return (*_values(_pass_tables(data, src, primitive, pass_), src, shape, schema),
            *_values(_path_tables(data, path, pass_), src, shape, schema))


def _values(tables, src: str, shape: Mapping[str, int],
            schema: Mapping[str, Any]) -> tuple[dict, dict]:
    general, specific = {}, {}
    for name, table in tables:
        plain = {k: v for k, v in table.items() if not isinstance(v, Mapping)}
        general.update(_check(plain, src, name, schema))
        matched = None
        for key, sub in table.items():
            if not isinstance(sub, Mapping):
                continue
            where = f'{src}: [{name}."{key}"]'
            dims = _parse_shape(key)
            if dims is None:
                raise ConfigError(f"{where}: cannot parse shape key {key!r} "
                                  "(expected e.g. \"N=64,C=512\", no spaces)")
            if set(dims) != set(shape):
                raise ConfigError(f"{where}: shape key names {', '.join(sorted(dims))}, "
                                  f"expected {', '.join(sorted(shape))}")
            values = _check(sub, src, f'{name}."{key}"', schema)
            if dims == dict(shape):
                if matched is not None:
                    raise ConfigError(f"{where}: same shape as [{name}.\"{matched}\"]")
                matched = key
                specific.update(values)
    return general, specific


def load_config(primitive: str, pass_: str, shape: Mapping[str, int], *,
                schema: Mapping[str, type | tuple], config=None,
                defaults_dir: os.PathLike | str, path: str | None = None) -> dict:
    """The settings of `primitive`'s `pass_` for `shape`: defaults, then the
    override. path: the kernel path the primitive runs on here (e.g.
    "bf16-amx"); each file's ["<path>".<pass>] tables (and their shape tables)
    then come after its other tables, so an AMX machine's settings leave the
    AVX2 and AVX-512 machines' alone."""
    if pass_ not in PASSES:
        raise ConfigError(f"unknown pass {pass_!r} (allowed: {', '.join(PASSES)})")
    file = pathlib.Path(defaults_dir) / f"{primitive}.toml"
    layers = list(_layers(_read(file, str(file)), str(file), primitive, pass_, shape, schema,
                          path))
    override = None
    if isinstance(check_config(config), Mapping):
        src, override = "config dict", config
    elif config is not None:
        src = f"config={os.fspath(config)}"
        override = _read(config, src)
    elif os.environ.get("BRGEMM_CONFIG"):      # an empty variable counts as unset
        src = f"BRGEMM_CONFIG={os.environ['BRGEMM_CONFIG']}"
        override = _read(os.environ["BRGEMM_CONFIG"], src)
    if override is not None:
        layers += _layers(override, src, primitive, pass_, shape, schema, path)
    out: dict = {}
    for layer in layers:
        out.update(layer)
    return out


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)              # 1.0, 1e-05, inf, nan: all valid TOML floats
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)   # JSON string escapes are TOML's
    raise ConfigError(f"cannot write {v!r} ({type(v).__name__}): only str, int, float, bool")


def _toml_key(k: str) -> str:
    return k if _BARE_KEY.fullmatch(k) else json.dumps(k, ensure_ascii=False)


def _dump(table: Mapping, prefix: tuple[str, ...] = ()) -> str:
    """TOML text of nested dicts: plain values of a table first, then its sub-tables."""
    plain = [f"{_toml_key(k)} = {_toml_value(v)}\n"
             for k, v in table.items() if not isinstance(v, Mapping)]
    text = ""
    if prefix and (plain or not any(isinstance(v, Mapping) for v in table.values())):
        text = f"\n[{'.'.join(map(_toml_key, prefix))}]\n"
    text += "".join(plain)
    for k, v in table.items():
        if isinstance(v, Mapping):
            text += _dump(v, prefix + (k,))
    return text


def write_config(path: os.PathLike | str, primitive_pass: str, shape: Mapping[str, int],
                 values: Mapping[str, Any]) -> None:
    """Merge `values` into the table of `shape` under "fwd" or "<primitive>.fwd" in `path`."""
    *prim, pass_ = primitive_pass.split(".")
    if pass_ not in PASSES or len(prim) > 1 or (prim and not prim[0].isidentifier()):
        raise ConfigError(f"primitive_pass {primitive_pass!r}: expected '<pass>' or "
                          f"'<primitive>.<pass>' with pass one of {', '.join(PASSES)}")
    key = ",".join(f"{k}={v}" for k, v in shape.items())
    if _parse_shape(key) != dict(shape):
        raise ConfigError(f"shape {dict(shape)!r}: names must be identifiers, values ints >= 0")
    path = pathlib.Path(path)
    data = _read(path, str(path)) if path.exists() else {}
    table = data
    for name in (*prim, pass_):
        table = table.setdefault(name, {})
    merged = {}
    for k in [k for k, v in table.items() if isinstance(v, Mapping) and _parse_shape(k) == dict(shape)]:
        merged.update(table.pop(k))     # the same shape spelled in another order
    merged.update(values)
    for v in merged.values():
        _toml_value(v)                  # fail before touching the file
    table[key] = merged
    # Write a sibling then rename, so a tuner killed mid-write leaves the old file.
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(_dump(data).lstrip("\n"))
    os.replace(tmp, path)
    global writes
    writes += 1
