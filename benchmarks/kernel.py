"""Single-thread kernel throughput against this machine's measured FMA peak.

For each block shape: GFLOP/s through the Python API (Kernel.__call__, all
checks included) and through the same JIT kernel called in a loop from C,
and both as % of the f32 FMA peak that a native probe measures in the same
run. Each repetition measures the peak right before timing the kernel, so
frequency drift on shared machines cancels out of the % column; the median
over repetitions is reported, with the spread."""
import os
import statistics
import time

import numpy as np

import brgemm
from benchmarks.common import path_peak
from brgemm import machine as brgemm_machine

# (m, n, k, count), row-major. The seed paper's 64x28x64 x9 block (a 3x3 conv
# row: 64 output channels x 28 pixels, 64 input channels, 9 taps) is written in
# libxsmm's column-major M x N x K; row-major that is m=28 pixels, n=64 channels.
SHAPES = [(64, 64, 64, 16), (28, 64, 64, 9), (32, 32, 32, 1)]
DTYPES = ["f32", "bf16"]


def block_data(m, n, k, count, dtype, rng):
    """Random A [count, m, k], B [count, k, n] of dtype and a zeroed f32 C [m, n]."""
    dt = np.float32 if dtype == "f32" else brgemm.bfloat16
    A = brgemm.aligned_empty((count, m, k), dt)
    B = brgemm.aligned_empty((count, k, n), dt)
    C = brgemm.aligned_empty((m, n), np.float32)
    A[...] = rng.standard_normal(A.shape)
    B[...] = rng.standard_normal(B.shape)
    C[...] = 0
    return A, B, C


def _calls_for(seconds, flops, guess_gflops=50.0):
    return max(10, int(seconds * guess_gflops * 1e9 / flops))


def measure(m, n, k, count, dtype, reps=7, seconds=0.2, rng=None, packed=False):
    """One row of the table: medians over `reps` of GFLOP/s and % of peak;
    packed: B packed once (Kernel.pack_b), as the layers keep their weights."""
    rng = rng or np.random.default_rng()
    A, B, C = block_data(m, n, k, count, dtype, rng)
    kern = brgemm.Kernel(m, n, k, dtype=dtype)
    flops = 2.0 * m * n * k * count
    calls = _calls_for(seconds, flops)
    for _ in range(calls // 10 + 1):  # warm-up: JIT, caches, clocks
        kern(A, B, C)
    api, nat, peaks = [], [], []
    if packed:  # B in the kernel's layout once (as the layers keep weights): no packing per call
        B = kern.pack_b(B)
        calls = _calls_for(seconds, flops, 1000.0)
    for _ in range(reps):
        # each path against the peak of the instruction it runs on (path_peak)
        peak, isa = path_peak(kern.path, 0.05)
        t0 = time.perf_counter()
        for _ in range(calls):
            kern(A, B, C)
        t_api = (time.perf_counter() - t0) / calls
        t_nat = kern.time_native(A, B, C, calls) / calls
        peaks.append(peak)
        api.append(flops / t_api * 1e-9)
        nat.append(flops / t_nat * 1e-9)
    peaks = [p or float("nan") for p in peaks]  # no probe for the tests' software tiles
    pct_api = [100 * g / p for g, p in zip(api, peaks)]
    pct_nat = [100 * g / p for g, p in zip(nat, peaks)]
    return dict(
        shape=f"{m}x{n}x{k} x{count}", dtype=dtype + ("/pk" if packed else ""), path=kern.path,
        isa=isa,
        peak=statistics.median(peaks), api=statistics.median(api), native=statistics.median(nat),
        pct_api=statistics.median(pct_api), pct_native=statistics.median(pct_nat),
        spread=(max(pct_api) - min(pct_api)),
        api_over_native=statistics.median(a / b for a, b in zip(api, nat)),
    )


def run(quick=False, dtypes=DTYPES):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    reps, seconds = (5, 0.1) if quick else (9, 0.3)
    rng = np.random.default_rng()
    print(f"brgemm kernel, one thread, libxsmm target {brgemm_machine.cpu_arch()}; "
          f"{reps} reps, median; peak = measured peak of one core for the path's "
          "instruction (f32 FMA, AVX512-BF16 dot for bf16-vnni, AMX tdpbf16ps for bf16-amx); "
          "bf16/pk: B packed once")
    head = (f"{'block (m x n x k x count)':<26}{'dtype':<9}{'path':<14}{'API GF/s':>9}"
            f"{'C GF/s':>8}{'API/C':>7}{'peak':>7}{'API %pk':>9}{'C %pk':>7}{'spread':>8}")
    print(head)
    rows = []
    cases = [(shape, dtype, False) for dtype in dtypes for shape in SHAPES]
    if "bf16" in dtypes:  # B packed once, as the layers keep their weights
        cases += [(shape, "bf16", True) for shape in SHAPES]
    for shape, dtype, packed in cases:
        r = measure(*shape, dtype, reps=reps, seconds=seconds, rng=rng, packed=packed)
        rows.append(r)
        print(f"{r['shape']:<26}{r['dtype']:<9}{r['path']:<14}{r['api']:>9.1f}{r['native']:>8.1f}"
              f"{r['api_over_native']:>7.3f}{r['peak']:>7.1f}{r['pct_api']:>8.1f}%"
              f"{r['pct_native']:>6.1f}%{r['spread']:>7.1f}%", flush=True)
    return rows
