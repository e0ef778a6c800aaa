"""The kernel benchmark's bf16 block against oneDNN's own kernels on the same
product, one thread: is our kernel's % of peak what the vendor reaches too?

Our side: 64x64x64 x16 with B packed once (benchmarks.kernel's packed row),
through the Python API and from C. oneDNN's side: an inner product forward
y[N, 64] = x[N, 1024] W[64, 1024]^T in bf16 (oneDNN's own formats, weights
reordered once), N = 64 (one such product per execute) and N = 256 (four, W
shared), timed by oneDNN's execute loop in C. Each repetition measures the
path's peak first (benchmarks.common.path_peak), then every side, and each
rate is a % of that repetition's peak, so the lent Xeon's slow spells (its
AMX peak probe reads 0.9 to 2.3 TFLOP/s) cancel. Medians over repetitions.

    OMP_NUM_THREADS=1 taskset -c 2 python -m benchmarks.kernel_onednn [--reps 9]
"""
import argparse
import statistics
import time

import numpy as np

import brgemm
from benchmarks import kernel
from benchmarks.common import path_peak, set_threads
from benchmarks.onednn import Job

M = N = K = 64
COUNT = 16
C_IN = K * COUNT  # the inner product's reduction: the kernel's k x count


def _rate(flops, run, calls):
    t0 = time.perf_counter()
    run(calls)
    return flops * calls / (time.perf_counter() - t0) * 1e-9


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.kernel_onednn")
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--seconds", type=float, default=0.1, help="per side and repetition")
    args = parser.parse_args(argv)
    set_threads(1)  # ours and oneDNN's, proven (its verbose report)
    rng = np.random.default_rng()
    A, B, C = kernel.block_data(M, N, K, COUNT, "bf16", rng)
    kern = brgemm.Kernel(M, N, K, dtype="bf16")
    Bp = kern.pack_b(B)
    flops = 2.0 * M * N * K * COUNT
    jobs = {}
    for rows in (64, 256):
        x = rng.standard_normal((rows, C_IN)).astype(np.float32)
        w = rng.standard_normal((N, C_IN)).astype(np.float32)
        jobs[rows] = Job.ip("fwd", x, w, None, dtype="bf16")
    print(f"one thread, {brgemm.info()['bf16_path']}; peak = the path's measured one-core peak "
          f"before each of {args.reps} repetitions; oneDNN: {jobs[64].impl}")

    def ours_api(calls):
        for _ in range(calls):
            kern(A, Bp, C)

    def ours_c(calls):
        kern.time_native(A, Bp, C, calls)

    def batches(job):
        # executes in batches of 100, each waited for: the SYCL build of oneDNN
        # (PyPI's 3.13) queues them, and a long queue slows every execute down
        def run(calls):
            for done in range(0, calls, 100):
                job.run(min(100, calls - done))
        return run

    sides = {"ours, API": (flops, ours_api), "ours, from C": (flops, ours_c)}
    for rows, job in jobs.items():
        sides[f"oneDNN ip N={rows}"] = (flops * rows / M, batches(job))
    guess = {name: max(10, int(args.seconds * 1e12 / f)) for name, (f, _) in sides.items()}
    for name, (f, run) in sides.items():  # warm-up: JIT, caches, clocks
        run(guess[name] // 5 + 1)
    pct = {name: [] for name in sides}
    peaks = []
    for _ in range(args.reps):
        peak, unit = path_peak(kern.path, 0.05)
        peaks.append(peak)
        for name, (f, run) in sides.items():
            pct[name].append(100 * _rate(f, run, guess[name]) / peak)
    print(f"peak ({unit}) median {statistics.median(peaks):.0f} GFLOP/s, "
          f"range {min(peaks):.0f}-{max(peaks):.0f}")
    # each side over ours through the API in the same repetition: a slow spell
    # between the peak probe and a side moves its % but not this ratio
    print(f"{'side':<22}{'% of peak':>10}{'min':>7}{'max':>7}{'/ ours API':>11}")
    for name, xs in pct.items():
        ratio = statistics.median(x / o for x, o in zip(xs, pct["ours, API"]))
        print(f"{name:<22}{statistics.median(xs):>9.1f}%{min(xs):>6.1f}%{max(xs):>6.1f}%"
              f"{ratio:>11.2f}")


if __name__ == "__main__":
    main()
