"""The tuner's generic part: what a primitive hands over (a Search: its
legal configs for one shape and pass, a cost model to rank them, a way to
time one by replaying its plan) and the search over them (run_search).

The search, all within `budget` wall seconds counted from the start
(enumeration included):
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

Which primitives can be tuned, their config files and the command line
live with the primitives (primitives/tune.py); brgemm knows none of them.
"""
from __future__ import annotations

import math
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Callable, Mapping

KEEP_MIN = 8            # survivors of the cost-model pruning: at least this many,
KEEP_FRACTION = 0.25    # or this fraction of the candidates, whichever is more
CONFIRM = 4             # re-time this many of the fastest (plus the default) ...
ROUNDS = 5              # ... until each has this many timings; the median counts
CONFIRM_SHARE = 0.35    # the survey leaves up to this part of the budget to steps 3 and 4
MARGIN = 0.02           # a config replaces the default only if >= 2% faster (median)


@dataclass
class Search:
    primitive: str                      # e.g. "gemm", "fc"
    pass_: str                          # "fwd", "bwd" or "upd"
    shape: dict[str, int]               # the shape key, e.g. {"M": 64, "N": 64, "K": 64}
    default: dict                       # the config the primitive uses today for this shape
    candidates: list[dict]              # legal configs (each a full set of the pass's keys)
    cost: Callable[[dict], float]       # model estimate, seconds; lower is better
    time: Callable[[dict, int], float]  # measured seconds of one replay with `threads` threads


def best_time(run, reps=3):
    """Seconds of the fastest of `reps` calls of run(), after one warm-up call:
    what a Search's timer reports for a config."""
    run()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return best


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


def _key(cfg):
    return tuple(sorted(cfg.items()))


class _Timings:
    """The timings of one search and its clock: measure() times a config and
    keeps the wall time of the call; fits() says whether one more such call
    (plus `extra` seconds) still ends within the budget."""

    def __init__(self, search, threads, budget, start):
        self.search, self.threads, self.budget, self.start = search, threads, budget, start
        self.times: dict[tuple, list[float]] = {}   # config -> its timings (seconds per replay)
        self.walls: list[float] = []                # wall seconds of each timer call (record + runs)

    def measure(self, cfg, into=None):
        into = self.times if into is None else into
        t0 = time.perf_counter()
        s = self.search.time(cfg, self.threads)
        self.walls.append(time.perf_counter() - t0)
        into.setdefault(_key(cfg), []).append(s)
        return s

    def next_wall(self):
        # the next call probably costs what the recent ones did; the median guards
        # against one cheap outlier, the recent mean against a trend to slower ones
        return max(statistics.median(self.walls), statistics.fmean(self.walls[-3:]))

    def fits(self, extra=0.0):
        return time.perf_counter() - self.start + self.next_wall() + extra <= self.budget

    def left(self):
        return self.budget - (time.perf_counter() - self.start)


def run_search(search: Search, budget: float, threads: int | None = None,
               progress: Callable[[str], None] | None = print_to_stderr,
               start: float | None = None) -> TuneResult:
    """Time `search`'s configs within `budget` wall seconds counted from `start`
    (default: now) and return the fastest; the four steps are the module
    docstring's."""
    start = time.perf_counter() if start is None else start
    say = progress or (lambda line: None)
    default = dict(search.default)
    n_unique, queue = _rank(search, default)
    say(f"tune {search.primitive}.{search.pass_} {shape_key(search.shape)}: {n_unique} "
        f"candidates, timing up to {len(queue)} (default + best {len(queue) - 1} by cost "
        f"model), budget {budget:g} s")
    t = _Timings(search, threads, budget, start)
    configs = {_key(c): c for c in queue}  # key -> the config, in its own key order
    _survey(t, queue, say)
    surveyed = list(t.times)
    best_key, med = _confirm(t, configs, surveyed, _key(default), say)
    best_key, best_time, default_time = _head_to_head(t, configs, best_key, med, default, say)
    result = TuneResult(
        primitive=search.primitive, pass_=search.pass_, shape=dict(search.shape),
        best=configs[best_key], best_time=best_time, default=default,
        default_time=default_time, timed=[(configs[k], med[k]) for k in surveyed],
        n_candidates=n_unique, n_survivors=len(queue), threads=threads)
    result.elapsed = time.perf_counter() - start
    return result


def _rank(search, default):
    """1. rank by the model, prune; the default goes first whatever its rank.
    Returns the number of distinct candidates and the queue to time."""
    unique = {}
    for cfg in search.candidates:
        unique.setdefault(_key(cfg), dict(cfg))
    ranked = sorted(unique.values(), key=search.cost)      # stable: ties keep their order
    keep = ranked[:max(KEEP_MIN, math.ceil(KEEP_FRACTION * len(ranked)))]
    return len(unique), [default] + [c for c in keep if _key(c) != _key(default)]


def _survey(t, queue, say):
    """2. the survey, in cost order, leaving a reserve for steps 3 and 4."""
    best_s = math.inf
    for i, cfg in enumerate(queue):
        reserve = min(((ROUNDS - 1) * (CONFIRM + 1) + 2 * ROUNDS) * statistics.median(t.walls),
                      CONFIRM_SHARE * t.budget) if t.walls else 0.0
        if i > 0 and not t.fits(reserve):
            say(f"[{i + 1:>3}/{len(queue)}] budget: stopping before the next config "
                f"({t.left():.2f} s left, next would take "
                f"~{t.next_wall():.2f} s + {reserve:.2f} s to confirm)")
            break
        s = t.measure(cfg)
        best_s = min(best_s, s)
        tag = " (default)" if i == 0 else ""
        say(f"[{i + 1:>3}/{len(queue)}] {fmt_config(cfg)}{tag}  {fmt_seconds(s)}  "
            f"best {fmt_seconds(best_s)}")


def _confirm(t, configs, surveyed, dkey, say):
    """3. the fastest few and the default, interleaved, until ROUNDS timings
    each; returns the best key (the default unless beaten by MARGIN) and the
    medians."""
    times = t.times
    finalists = sorted(surveyed, key=lambda k: times[k][0])[:CONFIRM]
    if dkey not in finalists:
        finalists.append(dkey)
    stopped = False
    for _ in range(ROUNDS - 1):
        for k in finalists:
            if len(times[k]) >= ROUNDS:
                continue
            if not t.fits(6 * statistics.median(t.walls)):   # room for 3 head-to-head pairs
                stopped = True
                break
            t.measure(configs[k])
        if stopped:
            break
    med = {k: statistics.median(v) for k, v in times.items()}
    best_key = min(finalists, key=lambda k: med[k])
    if med[best_key] > (1 - MARGIN) * med[dkey]:
        best_key = dkey                         # not faster beyond noise: keep the default
    say(f"confirm: {len(finalists)} finalist{'s' * (len(finalists) > 1)} (the fastest and "
        "the default), re-timed interleaved"
        + (" (cut short by the budget)" if stopped else ""))
    for k in sorted(finalists, key=med.get):
        tag = " (default)" if k == dkey else ""
        say(f"  {fmt_config(configs[k])}{tag}  {fmt_seconds(med[k])}, "
            f"median of {len(times[k])}" + ("  <- best" if k == best_key else ""))
    return best_key, med


def _head_to_head(t, configs, best_key, med, default, say):
    """4. the winner and the default afresh, interleaved: the reported times,
    and the default again unless the winner still beats it by MARGIN."""
    dkey = _key(default)
    best_time, default_time = med[best_key], med[dkey]
    if best_key == dkey:
        return best_key, best_time, default_time
    fresh: dict[tuple, list[float]] = {}
    for _ in range(ROUNDS):
        if not t.fits(t.next_wall()):           # both of the pair, or neither
            break
        t.measure(configs[best_key], fresh)
        t.measure(default, fresh)
    if fresh:
        best_time, default_time = (statistics.median(fresh[k]) for k in (best_key, dkey))
        say(f"head-to-head, {len(fresh[dkey])} fresh timings each: best "
            f"{fmt_seconds(best_time)}, default {fmt_seconds(default_time)}")
        if best_time > (1 - MARGIN) * default_time:
            say("  the default stays: the winner's lead was selection luck")
            best_key, best_time = dkey, default_time
    return best_key, best_time, default_time


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
