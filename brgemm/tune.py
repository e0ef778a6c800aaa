"""The tuner: time a primitive's legal configs for one shape, keep the fastest.

    python -m brgemm.tune gemm --shape M=256,N=256,K=256 --pass fwd --budget 20 --out tuned.toml
    BRGEMM_CONFIG=tuned.toml python my_model.py        # the primitives pick it up

The primitive (primitives.<name>) hands over a brgemm.tuning.Search: its
candidates, a cost model and a timer. The search, all within `budget` wall
seconds counted from the start (enumeration included):

  1. rank the candidates by the cost model and keep the best
     max(KEEP_MIN, KEEP_FRACTION of them): the model is crude but it orders
     the obviously bad (tiny blocks, idle cores) last;
  2. time the primitive's default first (the baseline, so a result always
     exists, even past the budget), then the survivors in cost order; before
     each timing, stop if the next one (estimated from the wall time of the
     timer calls so far) would not fit, leaving a reserve of at most
     CONFIRM_SHARE of the budget for steps 3 and 4;
  3. re-time the CONFIRM fastest and the default, interleaved, until each has
     ROUNDS timings (clock checked before each). The best is the lowest median
     among them, so a lucky single timing cannot win, and it must beat the
     default's median by MARGIN, else the default stays: a switch within
     timing noise is no gain;
  4. a minimum over finalists is optimistic (the winner's curse): time the
     winner and the default afresh, interleaved, up to ROUNDS pairs as the
     budget allows, report those medians, and keep the default unless the
     winner still beats it by MARGIN. Hence best_time <= default_time always.

The best config is merged into `out` with brgemm.config.write_config under
[<primitive>.<pass>."<shape>"], where BRGEMM_CONFIG / config= find it.

Note on layering: this is a tool on top of both packages; brgemm itself never
imports primitives, tune.py resolves them by name at run time.
"""
from __future__ import annotations

import argparse
import importlib
import math
import os
import pathlib
import pkgutil
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Callable, Mapping

from brgemm.config import PASSES, ConfigError, write_config

KEEP_MIN = 8            # survivors of the cost-model pruning: at least this many,
KEEP_FRACTION = 0.25    # or this fraction of the candidates, whichever is more
CONFIRM = 4             # re-time this many of the fastest (plus the default) ...
ROUNDS = 5              # ... until each has this many timings; the median counts
CONFIRM_SHARE = 0.35    # the survey leaves up to this part of the budget to steps 3 and 4
MARGIN = 0.02           # a config replaces the default only if >= 2% faster (median)


class TuneError(ValueError):
    """A bad argument to the tuner; `arg` names it ("primitive", "pass", "shape", ...)."""

    def __init__(self, arg: str, message: str):
        super().__init__(f"{arg}: {message}")
        self.arg, self.message = arg, message


@dataclass
class TuneResult:
    primitive: str
    pass_: str
    shape: dict[str, int]
    best: dict                              # the fastest config (median of its timings)
    best_time: float                        # seconds of one replay
    default: dict                           # the primitive's config before tuning
    default_time: float
    timed: list[tuple[dict, float]]         # every timed config, in timing order, median seconds
    n_candidates: int                       # legal configs the primitive offered
    n_survivors: int = 0                    # how many the pruning kept (default included)
    elapsed: float = 0.0                    # wall seconds of the whole run
    out: str | None = None                  # where best was written, if anywhere
    threads: int | None = None

    @property
    def speedup(self) -> float:
        return self.default_time / self.best_time


def print_to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def fmt_config(cfg: Mapping) -> str:
    return " ".join(f"{k}={v}" for k, v in cfg.items())


def fmt_seconds(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.1f} us"
    return f"{s * 1e3:.3f} ms" if s < 1 else f"{s:.3f} s"


def shape_key(shape: Mapping[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in shape.items())


def available_primitives() -> list[str]:
    """Modules of the primitives package (not imported, so maybe without search())."""
    import primitives
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
    from primitives._config import settings
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


def _key(cfg):
    return tuple(sorted(cfg.items()))


def tune(primitive: str, pass_: str, shape: Mapping[str, int], budget: float,
         threads: int | None = None, out=None,
         progress: Callable[[str], None] | None = print_to_stderr) -> TuneResult:
    """Search `primitive`'s configs for `pass_` and `shape` within `budget` seconds;
    merge the best into the TOML file `out` (if given). See the module docstring."""
    start = time.perf_counter()
    say = progress or (lambda line: None)
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not budget > 0:
        raise TuneError("budget", f"expected a positive number of seconds, got {budget!r}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or threads < 1):
        raise TuneError("threads", f"expected a positive int, got {threads!r}")
    shape = dict(shape)
    mod, search = get_search(primitive, pass_, shape)
    default = dict(search.default)
    if out is not None:
        check_out(out, mod, primitive, pass_, shape, default)

    # 1. rank by the model, prune; the default goes first whatever its rank
    unique = {}
    for cfg in search.candidates:
        unique.setdefault(_key(cfg), dict(cfg))
    ranked = sorted(unique.values(), key=search.cost)      # stable: ties keep their order
    keep = ranked[:max(KEEP_MIN, math.ceil(KEEP_FRACTION * len(ranked)))]
    queue = [default] + [c for c in keep if _key(c) != _key(default)]
    say(f"tune {primitive}.{pass_} {shape_key(shape)}: {len(unique)} candidates, "
        f"timing up to {len(queue)} (default + best {len(queue) - 1} by cost model), "
        f"budget {budget:g} s")

    times: dict[tuple, list[float]] = {}    # config -> its timings (seconds per replay)
    walls: list[float] = []                 # wall seconds of each timer call (record + runs)

    configs = {_key(c): c for c in queue}  # key -> the config, in its own key order

    def measure(cfg, into=times):
        t0 = time.perf_counter()
        s = search.time(cfg, threads)
        walls.append(time.perf_counter() - t0)
        into.setdefault(_key(cfg), []).append(s)
        return s

    def next_wall():
        # the next call probably costs what the recent ones did; the median guards
        # against one cheap outlier, the recent mean against a trend to slower ones
        return max(statistics.median(walls), statistics.fmean(walls[-3:]))

    def fits(extra=0.0):
        return time.perf_counter() - start + next_wall() + extra <= budget

    # 2. the survey, in cost order
    best_s = math.inf
    for i, cfg in enumerate(queue):
        reserve = min(((ROUNDS - 1) * (CONFIRM + 1) + 2 * ROUNDS) * statistics.median(walls),
                      CONFIRM_SHARE * budget) if walls else 0.0
        if i > 0 and not fits(reserve):
            say(f"[{i + 1:>3}/{len(queue)}] budget: stopping before the next config "
                f"({budget - (time.perf_counter() - start):.2f} s left, next would take "
                f"~{next_wall():.2f} s + {reserve:.2f} s to confirm)")
            break
        s = measure(cfg)
        best_s = min(best_s, s)
        tag = " (default)" if i == 0 else ""
        say(f"[{i + 1:>3}/{len(queue)}] {fmt_config(cfg)}{tag}  {fmt_seconds(s)}  "
            f"best {fmt_seconds(best_s)}")
    surveyed = list(times)

    # 3. confirm: the fastest few and the default, interleaved, until ROUNDS timings each
    finalists = sorted(surveyed, key=lambda k: times[k][0])[:CONFIRM]
    if _key(default) not in finalists:
        finalists.append(_key(default))
    stopped = False
    for _ in range(ROUNDS - 1):
        for k in finalists:
            if len(times[k]) >= ROUNDS:
                continue
            if not fits(6 * statistics.median(walls)):   # room for 3 head-to-head pairs
                stopped = True
                break
            measure(configs[k])
        if stopped:
            break
    med = {k: statistics.median(v) for k, v in times.items()}
    best_key = min(finalists, key=lambda k: med[k])
    if med[best_key] > (1 - MARGIN) * med[_key(default)]:
        best_key = _key(default)                # not faster beyond noise: keep the default
    say(f"confirm: {len(finalists)} finalist{'s' * (len(finalists) > 1)} (the fastest and "
        "the default), re-timed interleaved"
        + (" (cut short by the budget)" if stopped else ""))
    for k in sorted(finalists, key=med.get):
        tag = " (default)" if k == _key(default) else ""
        say(f"  {fmt_config(configs[k])}{tag}  {fmt_seconds(med[k])}, "
            f"median of {len(times[k])}" + ("  <- best" if k == best_key else ""))

    # 4. head-to-head, fresh timings: the reported times
    dkey = _key(default)
    best_time, default_time = med[best_key], med[dkey]
    if best_key != dkey:
        fresh: dict[tuple, list[float]] = {}
        for _ in range(ROUNDS):
            if not fits(next_wall()):           # both of the pair, or neither
                break
            measure(configs[best_key], fresh)
            measure(default, fresh)
        if fresh:
            best_time, default_time = (statistics.median(fresh[k]) for k in (best_key, dkey))
            say(f"head-to-head, {len(fresh[dkey])} fresh timings each: best "
                f"{fmt_seconds(best_time)}, default {fmt_seconds(default_time)}")
            if best_time > (1 - MARGIN) * default_time:
                say("  the default stays: the winner's lead was selection luck")
                best_key, best_time = dkey, default_time

    best = configs[best_key]
    result = TuneResult(
        primitive=primitive, pass_=pass_, shape=shape,
        best=best, best_time=best_time, default=default, default_time=default_time,
        timed=[(configs[k], med[k]) for k in surveyed], n_candidates=len(unique),
        n_survivors=len(queue), threads=threads)
    if out is not None:
        write_config(out, f"{primitive}.{pass_}", shape, best)
        _verify(mod, primitive, pass_, shape, best, out)
        result.out = os.fspath(out)
    result.elapsed = time.perf_counter() - start
    return result


def _verify(mod, primitive, pass_, shape, best, out):
    """Load `out` back the way the primitive will, and check it yields `best`."""
    from primitives._config import settings
    got = settings(primitive, pass_, shape, _schema(mod, pass_, best), config=out)
    if {k: got.get(k) for k in best} != best:
        raise RuntimeError(f"{out}: wrote {best} for {primitive}.{pass_} {shape_key(shape)} "
                           f"but it loads back as {got}")


def summary(r: TuneResult) -> str:
    threads = "library default" if r.threads is None else str(r.threads)
    where = (f'wrote {r.out} [{r.primitive}.{r.pass_}."{shape_key(r.shape)}"]' if r.out
             else "not written (no --out)")
    same = "  (the default)" if _key(r.best) == _key(r.default) else ""
    return "\n".join([
        f"{r.primitive}.{r.pass_} {shape_key(r.shape)}, threads: {threads}",
        f"  default  {fmt_config(r.default)}  {fmt_seconds(r.default_time)}",
        f"  best     {fmt_config(r.best)}  {fmt_seconds(r.best_time)}{same}",
        f"  speedup  {r.speedup:.2f}x (default time / best time)",
        f"  timed {len(r.timed)} of {r.n_candidates} candidates "
        f"({r.n_survivors} left by the cost-model pruning, default included) in {r.elapsed:.1f} s",
        f"  {where}",
    ])


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
        prog="python -m brgemm.tune",
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
        print("python -m brgemm.tune: interrupted, nothing written", file=sys.stderr)
        sys.exit(130)
    print(summary(r))


if __name__ == "__main__":
    main()
