"""fc's configs on this machine: each quick shape's layer plans (fwd, bwd, upd)
under the default config and a few candidates, timed interleaved, and the
candidates that beat the default at every thread count asked for, as TOML
tables for this machine's kernel path (brgemm.info.kernel_path, e.g.
["f32@amx".fwd."N=..,C=..,K=.."]): a short, checked search where a tuning
run does not fit (one lease on the lent machine), not a tuner.

    python -m benchmarks.fc_configs --threads 16 --save t16.json
    taskset -c 2,3 python -m benchmarks.fc_configs --threads 2 --with t16.json --out tuned.toml

Candidates, on the default blocking (bn, bc, bk stay: they are every pass's
layout): the loop order with the two parallel loops swapped (which operand
a thread keeps in cache while the other streams), and the reduction whole
against in chunks of 4 blocks. Each candidate's plan is timed against the
default's, REPS rounds interleaved, each round a loop of replays of about
SECONDS; a candidate is kept where its median is at least WIN faster in
this run and in the earlier runs given (--with: their --save files; one
thread count per process, each pinned as the benchmarks pin it)."""
import argparse
import json
import statistics
import time

import numpy as np

from benchmarks.common import machine, quick_shapes
from brgemm.config import write_config
from brgemm.info import kernel_path
from brgemm.layouts import to_blocks
from primitives import fc
from primitives._config import settings

REPS, SECONDS, WIN = 7, 0.03, 0.03
QUICK = ("square_1k", "square_1k_n1k", "square_4k")


def candidates(default, pass_):
    """The default's spec with its parallel loops swapped, and its chunk
    whole or 4 blocks: configs of one pass (spec, chunk), default first."""
    spec, chunk = default["spec"], default["chunk"]
    upper = [c for c in spec if c.isupper()]
    swapped = spec
    if len(upper) == 2 and "|" not in spec:
        a, b = upper
        swapped = spec.replace(a, "#").replace(b, a).replace("#", b)
    out = [dict(spec=spec, chunk=chunk)]
    for s, ch in ((swapped, chunk), (spec, 4 if chunk > 8 else 1024),
                  (swapped, 4 if chunk > 8 else 1024)):
        if dict(spec=s, chunk=ch) not in out:
            out.append(dict(spec=s, chunk=ch))
    return out


def _runner(N, C, K, pass_, cfg, threads, rng):
    """A function that replays one pass of an fc.Linear whose `pass_` config is cfg."""
    shape = {"N": N, "C": C, "K": K}
    path = kernel_path("f32")
    others = {p: settings("fc", p, shape, fc.SCHEMA[p], path=path) for p in fc.SCHEMA}
    others[pass_] = {**others[pass_], **cfg}
    lin = fc.Linear(C, K, config=others, rng=rng)
    g = lin.prepare(N)
    x = rng.standard_normal((N, C)).astype(np.float32)
    dy = rng.standard_normal((N, K)).astype(np.float32)
    xb, dyb = to_blocks(x, g.bn, g.bc), to_blocks(dy, g.bn, g.bk)
    lin.forward_blocked(xb)
    lin.update_blocked(dyb)  # fills lin.xt, which upd reads
    return {"fwd": lambda: lin.plans["fwd"].run(threads=threads, x=xb, w=lin.w, y=lin.y, b=lin.b),
            "bwd": lambda: lin.plans["bwd"].run(threads=threads, dy=dyb, wt=lin.wt, dx=lin.dx),
            "upd": lambda: lin.plans["upd"].run(threads=threads, xt=lin.xt, dy=dyb,
                                                dw=lin.dw)}[pass_]


def _loop(fn, n):
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def time_all(fns):
    """Median seconds of one call of each fn, REPS rounds interleaved."""
    for fn in fns:
        fn()
    n = max(1, int(SECONDS / max(_loop(fns[0], 1), 1e-6)))
    times = [[] for _ in fns]
    for _ in range(REPS):
        for t, fn in zip(times, fns):
            t.append(_loop(fn, n))
    return [statistics.median(t) for t in times], \
        [(max(t) - min(t)) / statistics.median(t) for t in times]


def run(threads, out=None, save=None, earlier=()):
    rng = np.random.default_rng(0)
    path = kernel_path("f32")
    print(f"fc configs, f32, layer plans, {machine()}, kernel path {path!r}, {threads} "
          f"threads; median of {REPS} interleaved rounds")
    speeds, wins = {}, []
    for (N, C, K), name in quick_shapes("fc_sizes", True, QUICK):
        shape = {"N": N, "C": C, "K": K}
        for pass_ in ("fwd", "bwd", "upd"):
            default = settings("fc", pass_, shape, fc.SCHEMA[pass_], path=path)
            cands = candidates(default, pass_)
            med, spread = time_all([_runner(N, C, K, pass_, c, threads, rng) for c in cands])
            for c, m, s in zip(cands, med, spread):
                key = f"{name} {pass_} {c_str(c)}"
                speeds[key] = med[0] / m
                print(f"{name:14s} {pass_}  {c_str(c):18s} {1e3 * m:8.3f} ms  "
                      f"x{med[0] / m:5.2f}  spread {100 * s:3.0f}%", flush=True)
            every = [[speeds[f"{name} {pass_} {c_str(c)}"]] + [e.get(f"{name} {pass_} {c_str(c)}", 0)
                                                              for e in earlier] for c in cands]
            best = max(range(1, len(cands)), key=lambda i: min(every[i]), default=None)
            if best is not None and min(every[best]) >= 1 + WIN:
                wins.append((pass_, shape, cands[best], every[best]))
    if save:
        with open(save, "w") as f:
            json.dump(speeds, f)
    print(f"\nkept (at least {100 * WIN:.0f}% faster in this run and the earlier ones):")
    for pass_, shape, cfg, sp in wins:
        print(f'["{path}".{pass_}."N={shape["N"]},C={shape["C"]},K={shape["K"]}"] '
              f'{c_str(cfg)}  x{" x".join(f"{s:.2f}" for s in sp)}')
        if out:
            write_config(out, pass_, shape, cfg)
    return wins


def c_str(cfg):
    return f'{cfg["spec"]} chunk {cfg["chunk"]}'


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fc_configs", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, required=True, help="threads of every replay")
    parser.add_argument("--out", help="a TOML file the kept candidates are merged into")
    parser.add_argument("--save", help="a JSON file for this run's speeds (for --with)")
    parser.add_argument("--with", dest="earlier", action="append", default=[],
                        help="an earlier run's --save file, whose speeds must agree")
    args = parser.parse_args(argv)
    earlier = []
    for path in args.earlier:
        with open(path) as f:
            earlier.append(json.load(f))
    run(args.threads, args.out, args.save, earlier)


if __name__ == "__main__":
    main()
