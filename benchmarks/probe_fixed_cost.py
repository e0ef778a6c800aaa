"""Probe (issue 17): the functional forms' fixed cost per call. Each path
of conv.forward / conv.backward, fc.forward / fc.backward and lstm.forward
/ lstm.backward (f32, bf16 where a path needs it) on a tiny shape: the
whole call, the time inside its native calls (brgemm_cpu_* and bound plan
runs, caught by a profile hook) and how many it makes (each opens an
OpenMP parallel region); the call less its native time is Python's.
Paths as routed at 2 threads (fc's copying and tiles swap at other counts).
Last, a one-tile copy on one thread and on all: the difference is what one
OpenMP parallel region costs. --quick adds the quick benchmark shapes' calls.

    python -m benchmarks.probe_fixed_cost [--threads T] [--reps 9] [--only SUBSTR]
        [--quick] [--budget 0.3] [--trees DIR DIR ...]

--trees: the same cases in each checkout (its brgemm built), one child
process per tree and round, the trees in rotated order each round: before
and after a change timed interleaved. Each line: median us over rounds (each
round's figure a median of many calls), and with --trees each tree's whole
call over the first tree's, paired by round. Speeds only: no result is checked."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np


def cases(quick):
    """name -> fn: the tiny calls (and the quick shapes' with quick)."""
    import ml_dtypes

    from brgemm.layouts import to_blocks
    from primitives import conv, fc, lstm
    rng = np.random.default_rng(0)
    out = {}

    def add_conv(path, N, C, K, H, W, R, pd, dt=np.float32, dtype="f32"):
        x = rng.standard_normal((N, C, H, W)).astype(dt)
        w = rng.standard_normal((K, C, R, R)).astype(dt)
        dy = rng.standard_normal((N, K, H + 2 * pd - R + 1, W + 2 * pd - R + 1)).astype(dt)
        out[f"conv.fwd {path}"] = lambda: conv.forward(x, w, 1, pd, dtype=dtype)
        out[f"conv.bwd {path}"] = lambda: conv.backward(dy, x, w, 1, pd, dtype=dtype)

    def add_fc(path, N, C, K):
        x, w = rng.standard_normal((N, C), np.float32), rng.standard_normal((K, C), np.float32)
        b, dy = rng.standard_normal(K, np.float32), rng.standard_normal((N, K), np.float32)
        out[f"fc.fwd {path}"] = lambda: fc.forward(x, w, b)
        out[f"fc.bwd {path}"] = lambda: fc.backward(dy, x, w)

    def add_lstm(name, T, N, C, K):
        x = rng.standard_normal((T, N, C), np.float32)
        h0, c0 = rng.standard_normal((2, N, K), np.float32)
        w_ih, w_hh = rng.standard_normal((4 * K, C), np.float32), \
            rng.standard_normal((4 * K, K), np.float32)
        b, dy = rng.standard_normal(4 * K, np.float32), rng.standard_normal((T, N, K), np.float32)
        out[f"lstm.fwd {name}"] = lambda: lstm.forward(x, h0, c0, w_ih, w_hh, b)
        out[f"lstm.bwd {name}"] = lambda: lstm.backward(dy, h0, c0, x, h0, c0, w_ih, w_hh, b)

    add_conv("pointwise", 2, 16, 16, 4, 4, 1, 0)
    add_conv("nchw_x", 1, 16, 16, 4, 28, 3, 1)
    add_conv("columns", 1, 16, 32, 2, 2, 3, 1)
    add_conv("nchw", 2, 16, 16, 4, 4, 3, 2)
    add_conv("blocked", 2, 16, 20, 4, 4, 3, 1, ml_dtypes.bfloat16, "bf16")
    add_fc("reads_w", 2, 64, 64)
    add_fc("tiles", 16, 32, 32)
    add_fc("copying", 64, 32, 64)
    add_lstm("tiny", 2, 2, 16, 16)
    # one parallel region's cost: a one-tile copy on one thread, then on all
    m, t = np.ones((16, 16), np.float32), np.empty((1, 1, 16, 16), np.float32)
    out["copy 16x16, 1 thread"] = lambda: to_blocks(m, 16, 16, out=t, threads=1)
    out["copy 16x16, all threads"] = lambda: to_blocks(m, 16, 16, out=t)
    if quick:
        from benchmarks.common import quick_shapes, read_shapes
        from benchmarks.conv import QUICK as CONV
        from benchmarks.lstm import QUICK as LSTM
        from brgemm.machine import cpu_threads
        for (C, K, H, W, R, S, st, pd), name in quick_shapes("resnet50_conv", True, CONV):
            add_conv(name, cpu_threads(), C, K, H, W, R, pd)
        for (N, C, K), name in read_shapes("fc_sizes")[:2]:
            add_fc(name, N, C, K)
        for (T, N, C, K), name in quick_shapes("gnmt_lstm", True, LSTM):
            add_lstm(name, T, N, C, K)
    return out


def native_us(fn):
    """Microseconds fn spends in native calls (a profile hook around each) and their count."""
    stack, acc = [], [0, 0]

    def hook(frame, event, arg):
        if event == "c_call":
            name = getattr(arg, "__name__", "")
            stack.append(time.perf_counter_ns() if name.startswith(("brgemm_cpu", "bound"))
                         else None)
        elif event in ("c_return", "c_exception") and stack:
            t = stack.pop()
            if t is not None:
                acc[0] += time.perf_counter_ns() - t
                acc[1] += 1
    sys.setprofile(hook)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return acc[0] / 1e3, acc[1]


def measure(fns, budget=0.3):
    """name -> (whole us, native us, native calls): medians over calls for about `budget` s each."""
    res = {}
    for name, fn in fns.items():
        for _ in range(5):
            fn()
        t0 = time.perf_counter()
        fn()
        n = max(5, min(1500, int(budget / max(time.perf_counter() - t0, 1e-6))))
        whole, nat = [], []
        for _ in range(n):
            t = time.perf_counter_ns()
            fn()
            whole.append((time.perf_counter_ns() - t) / 1e3)
        for _ in range(max(5, n // 4)):
            nat.append(native_us(fn))
        res[name] = (statistics.median(whole), statistics.median(u for u, _ in nat), nat[-1][1])
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=9, help="rounds")
    ap.add_argument("--only", default="", help="cases whose name holds one of these (a,b,..)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--budget", type=float, default=0.3, help="seconds per case and round")
    ap.add_argument("--trees", nargs="*", default=None)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        from benchmarks.common import set_threads
        with open(os.devnull, "w") as quiet:
            sys.stdout, keep = quiet, sys.stdout
            set_threads(a.threads, onednn=False)
            sys.stdout = keep
        fns = {k: f for k, f in cases(a.quick).items() if any(o in k for o in a.only.split(","))}
        print(json.dumps(measure(fns, a.budget)))
        return
    trees = [os.path.abspath(t) for t in (a.trees or [os.getcwd()])]
    args = ["--threads", str(a.threads), "--only", a.only, "--budget", str(a.budget)] + \
        ["--quick"] * a.quick
    runs = {t: [] for t in trees}
    for r in range(a.reps):
        for j in range(len(trees)):
            t = trees[(j + r) % len(trees)]
            path = os.pathsep.join([t, os.environ.get("PYTHONPATH", "")])
            env = {**os.environ, "PYTHONPATH": path}
            out = subprocess.run([sys.executable, "-m", "benchmarks.probe_fixed_cost", "--child",
                                  *args], cwd=t, env=env, capture_output=True, text=True,
                                 check=True).stdout
            runs[t].append(json.loads(out.strip().splitlines()[-1]))
    print(f"{a.threads} threads, {a.reps} rounds; us: whole call, native part (calls), Python")
    print(f"{'call':<26}" + "".join(f"{os.path.basename(t)[:28]:>30}" for t in trees)
          + ("   whole / first (paired)" if len(trees) > 1 else ""))
    for name in runs[trees[0]][0]:
        line = f"{name:<26}"
        for t in trees:
            w, n, c = (statistics.median(run[name][i] for run in runs[t]) for i in range(3))
            line += f"{w:9.1f} {n:7.1f} ({c:2.0f}) {w - n:7.1f}"
        if len(trees) > 1:
            line += "".join(f"  {statistics.median(b[name][0] / f[name][0] for b, f in pairs):5.2f}"
                            for pairs in (zip(runs[t], runs[trees[0]]) for t in trees[1:]))
        print(line, flush=True)


if __name__ == "__main__":
    main()
