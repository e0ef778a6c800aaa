"""What the tuner buys: gemm's default config against the tuned one, per shape.

    python -m benchmarks.tune [--budget S] [--threads N]

For each shape: run the tuner (primitives.tune, `budget` seconds, nothing
written), then re-time the default and the tuned config's plans interleaved,
REPS repetitions each (so drift on a shared machine hits both alike), each
repetition a loop of replays lasting about SECONDS; GFLOP/s = 2*M*N*K / the
median time of one replay.
"""
import argparse
import os
import statistics
import time

import numpy as np

from brgemm.machine import cpu_arch
from primitives.tune import fmt_config, tune
from primitives import gemm

SHAPES = [(256, 256, 256), (512, 1024, 512), (64, 2048, 1024), (1000, 100, 300)]
REPS = 5
SECONDS = 0.05


def _loop_time(p, n, threads, data):
    t0 = time.perf_counter()
    for _ in range(n):
        p.run(threads=threads, **data)
    return (time.perf_counter() - t0) / n


def compare(M, N, K, default, tuned, threads=None, rng=None):
    """Median seconds of one replay of the default and the tuned plan, timed interleaved."""
    rng = rng or np.random.default_rng()
    data = dict(A=rng.standard_normal((M, K)).astype(np.float32),
                B=rng.standard_normal((K, N)).astype(np.float32), C=np.empty((M, N), np.float32))
    plans = [gemm.plan(M, N, K, config={"fwd": cfg}) for cfg in (default, tuned)]
    for p in plans:                                     # warm-up: JIT, pages, threads
        p.run(threads=threads, **data)
    n = max(1, int(SECONDS / max(_loop_time(plans[0], 3, threads, data), 1e-7)))
    times = [[], []]
    for _ in range(REPS):
        for t, p in zip(times, plans):
            t.append(_loop_time(p, n, threads, data))
    return statistics.median(times[0]), statistics.median(times[1])


def run(budget=20.0, threads=None, shapes=SHAPES):
    nthreads = threads or os.environ.get("OMP_NUM_THREADS") or os.cpu_count()
    print(f"gemm: default vs tuned config; tuner budget {budget:g} s per shape; {nthreads} "
          f"threads ({os.cpu_count()} cores), libxsmm target {cpu_arch()}; re-timed "
          f"interleaved, {REPS} reps each, median; GFLOP/s = 2*M*N*K / time")
    rows = []
    for M, N, K in shapes:
        r = tune("gemm", "fwd", {"M": M, "N": N, "K": K}, budget, threads=threads, progress=None)
        t_def, t_tuned = compare(M, N, K, r.default, r.best, threads)
        flops = 2.0 * M * N * K
        rows.append((f"{M}x{N}x{K}", fmt_config(r.default), flops / t_def * 1e-9,
                     fmt_config(r.best), flops / t_tuned * 1e-9, t_def / t_tuned,
                     f"{len(r.timed)}/{r.n_candidates}"))
        print(f"  {M}x{N}x{K}: timed {len(r.timed)} of {r.n_candidates} in {r.elapsed:.1f} s; "
              f"tuner's own speedup {r.speedup:.2f}x", flush=True)
    head = ("shape", "default config", "GFLOP/s", "tuned config", "GFLOP/s", "tuned/default",
            "timed")
    widths = [max(len(head[i]), *(len(_cell(r[i])) for r in rows)) for i in range(len(head))]
    print()
    print("| " + " | ".join(h.ljust(w) for h, w in zip(head, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print("| " + " | ".join(_cell(c).ljust(w) for c, w in zip(r, widths)) + " |")
    return rows


def _cell(v):
    return f"{v:.2f}" if isinstance(v, float) else str(v)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tune", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=float, default=20.0,
                        help="tuner seconds per shape (default 20)")
    parser.add_argument("--threads", type=int, default=None,
                        help="threads of every replay (default: the library's)")
    args = parser.parse_args(argv)
    if not args.budget > 0:
        parser.error(f"argument --budget: expected a positive number, got {args.budget}")
    if args.threads is not None and args.threads < 1:
        parser.error(f"argument --threads: expected a positive int, got {args.threads}")
    run(args.budget, args.threads)


if __name__ == "__main__":
    main()
