"""Does a call run slower right after oneDNN's? The main job's rounds rotate
[layer, oneDNN, functional] one place a round, so the functional call follows
oneDNN's in two rounds of three and the layer's plan in one: a slowdown
after oneDNN (its threads still awake on our cores, its data in our caches)
would read as a functional call slower than the layer. Here each round runs
oneDNN first and then the two sides in turn, alternating which goes second,
and each side's time right after oneDNN is set beside its time after the
other side (same rounds, medians; > 1: slower after oneDNN). f32, forward
passes of the quick conv layers (N = threads) and fc shapes.

    python -m benchmarks.probe_round_order [--threads T] [--rounds R]"""
import argparse
import statistics
import time

import numpy as np

from benchmarks import conv as bconv
from benchmarks import fc as bfc
from benchmarks.common import machine, quick_shapes, read_shapes, set_threads
from primitives import conv, fc


def _loops(fn, min_time=0.05):
    fn()
    t0 = time.perf_counter()
    fn()
    return max(1, int(min_time / max(time.perf_counter() - t0, 1e-9)))


def _timed(fn, loops):
    t0 = time.perf_counter()
    for _ in range(loops):
        fn()
    return (time.perf_counter() - t0) / loops


def order_row(name, dnn, ours, func, rounds):
    """Each side's median right after oneDNN over its median after the other
    side, and func/ours speed when func follows oneDNN, when ours does."""
    sides = {"ours": ours, "func": func}
    loops = {k: _loops(f) for k, f in sides.items()}
    loops["dnn"] = _loops(dnn)
    after = {(k, w): [] for k in sides for w in ("dnn", "other")}
    pair = {"func after dnn": [], "ours after dnn": []}
    for r in range(rounds):
        first, second = ("ours", "func") if r % 2 else ("func", "ours")
        _timed(dnn, loops["dnn"])
        t1 = _timed(sides[first], loops[first])
        t2 = _timed(sides[second], loops[second])
        after[(first, "dnn")].append(t1)
        after[(second, "other")].append(t2)
        t = {first: t1, second: t2}
        pair[f"{first} after dnn"].append(t["ours"] / t["func"])
    med = {k: statistics.median(v) for k, v in after.items()}
    print(f"{name:<17} ours {1e3 * med['ours', 'other']:7.3f} ms, after oneDNN "
          f"{med['ours', 'dnn'] / med['ours', 'other']:5.3f};  func "
          f"{1e3 * med['func', 'other']:7.3f} ms, after oneDNN "
          f"{med['func', 'dnn'] / med['func', 'other']:5.3f};  func/ours speed: func after "
          f"oneDNN {statistics.median(pair['func after dnn']):5.3f}, ours after oneDNN "
          f"{statistics.median(pair['ours after dnn']):5.3f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=20)
    a = ap.parse_args()
    threads = set_threads(a.threads, onednn=True)
    from benchmarks.onednn import Job  # after OMP_NUM_THREADS: one OpenMP runtime for both
    rng = np.random.default_rng()
    print(f"round order, f32 forward, {threads} threads, {machine()}, {a.rounds} rounds")
    for (C, K, H, W, R, S, st, pd), name in quick_shapes("resnet50_conv", True, bconv.QUICK):
        x, w, dy, g, vnni, t = bconv.layer(rng, threads, C, K, H, W, R, S, st, pd, "f32",
                                           np.float32)
        plan = conv.plan(g, "fwd", "f32", "fwd" in vnni)
        job = Job.conv("fwd", threads, C, K, H, W, R, S, (st, st), (pd, pd), x=x, w=w,
                       dtype="f32")
        order_row(name, job.run, lambda: plan.run(x=t["x"], w=t["w"], y=t["y"]),
                  lambda: conv.forward(x, w, st, pd), a.rounds)
    for (N, C, K), name in read_shapes("fc_sizes")[:3]:
        x, w, dy, lin, xb, dyb = bfc.layer(rng, N, C, K, "f32")
        job = Job.ip("fwd", x, w, None, dtype="f32")
        order_row(name, job.run, lambda: lin.forward_blocked(xb), lambda: fc.forward(x, w),
                  a.rounds)


if __name__ == "__main__":
    main()
