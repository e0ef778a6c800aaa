"""The tuner's command line: time a primitive's legal configs for one shape, keep the fastest.

    python -m primitives.tune gemm --shape M=256,N=256,K=256 --pass fwd --budget 20 --out tuned.toml
    BRGEMM_CONFIG=tuned.toml python my_model.py        # the primitives pick it up

The primitive (primitives.<name>) hands over a brgemm.tuning.Search from its
search(pass_, shape); brgemm.tuning.run_search times it within the budget (its
docstring says how). The best config is merged into `out` with
brgemm.config.write_config under [<primitive>.<pass>."<shape>"], where
BRGEMM_CONFIG / config= find it, and read back the way the primitive will.
"""
from __future__ import annotations

import argparse
import importlib
import math
import os
import pathlib
import pkgutil
import sys
import time
from typing import Callable, Mapping

import primitives
from brgemm.config import PASSES, ConfigError, write_config
from brgemm.tuning import (TuneError, TuneResult, fmt_config, print_to_stderr, run_search,
                           shape_key, summary)
from primitives._config import settings

__all__ = ["TuneError", "TuneResult", "tune", "get_search", "fmt_config", "main"]


def available_primitives() -> list[str]:
    """Modules of the primitives package (not imported, so maybe without search())."""
    return sorted(m.name for m in pkgutil.iter_modules(primitives.__path__)
                  if not m.name.startswith("_"))


def load_primitive(name: str):
    """primitives.<name>, which must have search(pass_, shape)."""
    if not name.isidentifier():
        raise TuneError("primitive", f"{name!r} is not a module name "
                        f"(available: {', '.join(available_primitives())})")
    try:
        mod = importlib.import_module(f"primitives.{name}")
    except ModuleNotFoundError as e:
        if e.name != f"primitives.{name}":
            raise                                   # the module exists but its imports fail
        raise TuneError("primitive", f"unknown primitive {name!r} "
                        f"(available: {', '.join(available_primitives())})") from None
    if not callable(getattr(mod, "search", None)):
        raise TuneError("primitive", f"primitives.{name} has no search(pass_, shape): "
                        "it cannot be tuned")
    return mod


class _ReadShape(dict):
    """A shape dict that notes which dimensions the primitive read."""

    def __init__(self, *a):
        super().__init__(*a)
        self.read = set()

    def __getitem__(self, k):
        self.read.add(k)
        return super().__getitem__(k)

    def get(self, k, default=None):
        self.read.add(k)
        return super().get(k, default)


def get_search(name: str, pass_: str, shape: Mapping[str, int]):
    """(module, Search) for this primitive, pass and shape; TuneError on bad arguments."""
    mod = load_primitive(name)
    if pass_ not in PASSES:
        raise TuneError("pass", f"{pass_!r} is not one of {', '.join(PASSES)}")
    for k, v in shape.items():  # ranges are the primitive's to check (padding may be 0)
        if not k.isidentifier() or isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise TuneError("shape", f"{k}={v!r}: expected a name = a non-negative int")
    dims = getattr(mod, "SHAPE", None)  # the dimensions its shape keys name, if it says
    if dims is not None:
        missing, extra = [d for d in dims if d not in shape], [k for k in shape if k not in dims]
        if missing or extra:
            raise TuneError("shape", f"{name} takes exactly {', '.join(dims)}: "
                            + (f"{', '.join(map(repr, missing))} missing" if missing else
                               f"no dimension {', '.join(map(repr, extra))}"))
    seen = _ReadShape(shape)
    try:
        search = mod.search(pass_, seen)
    except ConfigError:
        raise                                       # a bad BRGEMM_CONFIG file: says which
    except KeyError as e:
        raise TuneError("shape", f"{name} needs dimension {e.args[0]!r} "
                        f"(got {', '.join(shape) or 'none'})") from None
    except ValueError as e:                         # e.g. a pass the primitive lacks
        raise TuneError("pass" if str(e).startswith("pass") else "shape",
                        f"{name} says: {e}") from None
    # The shape key written to the TOML file must name exactly the primitive's
    # dimensions, or the primitive would reject the file: refuse extras.
    extra = [k for k in shape if k not in seen.read]
    if extra and seen.read:
        raise TuneError("shape", f"{name} has no dimension {', '.join(map(repr, extra))} "
                        f"(its dimensions: {', '.join(sorted(seen.read))})")
    if not search.candidates and not search.default:
        raise TuneError("shape", f"{name} offers no configs for {shape_key(shape)}")
    return mod, search


def _schema(mod, pass_, cfg):
    """The primitive's SCHEMA (per pass if it keeps one per pass), else cfg's own types."""
    schema = getattr(mod, "SCHEMA", None)
    if isinstance(schema, Mapping) and isinstance(schema.get(pass_), Mapping):
        schema = schema[pass_]
    return schema if isinstance(schema, Mapping) else {k: type(v) for k, v in cfg.items()}


def check_out(out, mod, primitive, pass_, shape, default) -> None:
    """Fail before tuning, not after, if `out` cannot be written or merged into."""
    path = pathlib.Path(out)
    if path.is_dir():
        raise TuneError("out", f"{out}: is a directory")
    if not path.parent.is_dir():
        raise TuneError("out", f"{out}: directory {path.parent} does not exist")
    if not os.access(path.parent, os.W_OK):
        raise TuneError("out", f"{out}: directory {path.parent} is not writable")
    if path.exists():       # it must already be a config the primitive accepts
        try:
            settings(primitive, pass_, shape, _schema(mod, pass_, default), config=out)
        except ConfigError as e:
            raise TuneError("out", f"cannot merge into it: {e}") from None


def tune(primitive: str, pass_: str, shape: Mapping[str, int], budget: float,
         threads: int | None = None, out=None,
         progress: Callable[[str], None] | None = print_to_stderr) -> TuneResult:
    """Search `primitive`'s configs for `pass_` and `shape` within `budget` seconds;
    merge the best into the TOML file `out` (if given). See the module docstring."""
    start = time.perf_counter()
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not budget > 0:
        raise TuneError("budget", f"expected a positive number of seconds, got {budget!r}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or threads < 1):
        raise TuneError("threads", f"expected a positive int, got {threads!r}")
    shape = dict(shape)
    mod, search = get_search(primitive, pass_, shape)
    if out is not None:
        check_out(out, mod, primitive, pass_, shape, dict(search.default))

    try:
        result = run_search(search, budget, threads, progress, start)
    except ValueError as e:  # a count past the machine's cap, refused by the first replay
        if not str(e).startswith("threads: "):
            raise
        raise TuneError("threads", str(e)[len("threads: "):]) from None
    result.primitive, result.pass_, result.shape = primitive, pass_, shape
    best = result.best
    if out is not None:
        write_config(out, f"{primitive}.{pass_}", shape, best)
        _verify(mod, primitive, pass_, shape, best, out)
        result.out = os.fspath(out)
    result.elapsed = time.perf_counter() - start
    return result


def _verify(mod, primitive, pass_, shape, best, out):
    """Load `out` back the way the primitive will, and check it yields `best`."""
    got = settings(primitive, pass_, shape, _schema(mod, pass_, best), config=out)
    if {k: got.get(k) for k in best} != best:
        raise RuntimeError(f"{out}: wrote {best} for {primitive}.{pass_} {shape_key(shape)} "
                           f"but it loads back as {got}")


# ---------------------------------------------------------------- CLI

def parse_shape(text: str) -> dict[str, int]:
    """'M=256,N=256,K=256' -> {'M': 256, 'N': 256, 'K': 256}."""
    out = {}
    for item in text.split(","):
        name, eq, value = item.strip().partition("=")
        name, value = name.strip(), value.strip()
        if not (eq and name.isidentifier()):
            raise argparse.ArgumentTypeError(
                f"{item!r} is not NAME=VALUE (expected e.g. M=256,N=256,K=256)")
        if not (value.isascii() and value.isdigit()):
            raise argparse.ArgumentTypeError(f"{item!r}: {value!r} is not a non-negative int "
                                             "(expected e.g. M=256,N=256,K=256)")
        if name in out:
            raise argparse.ArgumentTypeError(f"{name} given twice")
        out[name] = int(value)
    return out


def _positive(kind):
    def parse(text):
        try:
            v = kind(text)
        except ValueError:
            v = None
        if v is None or not v > 0 or (kind is float and not math.isfinite(v)):
            what = "int" if kind is int else "number of seconds"
            raise argparse.ArgumentTypeError(f"expected a positive {what}, got {text!r}")
        return v
    parse.__name__ = kind.__name__          # argparse names the type in some messages
    return parse


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m primitives.tune",
        description="Time a primitive's configs for one shape and write the fastest to a "
                    "TOML file that BRGEMM_CONFIG (or config=) accepts.")
    parser.add_argument("primitive", help="module name in primitives/, e.g. gemm")
    parser.add_argument("--shape", required=True, type=parse_shape,
                        help="the shape, NAME=VALUE pairs joined by commas, e.g. M=256,N=256,K=256")
    parser.add_argument("--pass", dest="pass_", default="fwd", choices=PASSES,
                        help="the pass to tune (default fwd)")
    parser.add_argument("--budget", type=_positive(float), default=20.0,
                        help="wall seconds for the whole search (default 20)")
    parser.add_argument("--threads", type=_positive(int), default=None,
                        help="threads of the timed replays (default: the library's)")
    parser.add_argument("--out", help="TOML file to merge the best config into "
                                      "(default: print only)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    try:
        r = tune(args.primitive, args.pass_, args.shape, args.budget, threads=args.threads,
                 out=args.out, progress=None if args.quiet else print_to_stderr)
    except TuneError as e:
        name = e.arg if e.arg == "primitive" else f"--{e.arg}"
        parser.error(f"argument {name}: {e.message}")
    except ConfigError as e:                # BRGEMM_CONFIG, or --out's existing contents
        parser.error(str(e))
    except KeyboardInterrupt:
        print("python -m primitives.tune: interrupted, nothing written", file=sys.stderr)
        sys.exit(130)
    print(summary(r))


if __name__ == "__main__":
    main()
