"""Where the time of a bf16 AMX kernel call goes, on one core (run on an AMX host).

    python -m benchmarks.amx_profile [--reps N]

1. Ceilings: tdpbf16ps peak (six accumulators), the kernel's 2x2 step from
   registers (four accumulators) and with its tile loads from L1.
2. The Python call path: a 2x2x2 block (all overhead; and its binding's
   share, the C call's alone, and the tile config load and release that
   every API call pays), and on the 64x64x64 x16 block the API call against the same call from C, packed B and B
   packed per call (the difference is the packing).
3. Kernel variants from C, B packed: each step's tiles loaded by the step
   before or by itself (BRGEMM_AMX_PIPE), prefetch distance (BRGEMM_AMX_PF),
   bytes of blocks per pass over C (BRGEMM_AMX_L1), every other macro block
   backwards (BRGEMM_AMX_REVERSE), interleaved, median % of the peak measured
   in the same repetition."""
import argparse
import os
import statistics
import time

import numpy as np

import brgemm
from brgemm import machine

SHAPES = [(64, 64, 64, 16), (28, 64, 64, 9), (7, 64, 64, 18), (196, 64, 64, 4)]
# (BRGEMM_AMX_PIPE, BRGEMM_AMX_PF, BRGEMM_AMX_L1, BRGEMM_AMX_REVERSE); the first is the default
VARIANTS = [("0", "0", "0", "1"), ("1", "0", "0", "1"), ("0", "0", "0", "0"),
            ("0", "0", "32768", "1"), ("0", "1", "0", "1")]
TUNABLES = ("BRGEMM_AMX_PIPE", "BRGEMM_AMX_PF", "BRGEMM_AMX_L1", "BRGEMM_AMX_REVERSE")


def _data(m, n, k, count, rng):
    A = brgemm.aligned_empty((count, m, k), brgemm.bfloat16)
    B = brgemm.aligned_empty((count, k, n), brgemm.bfloat16)
    A[...] = rng.standard_normal(A.shape)
    B[...] = rng.standard_normal(B.shape)
    return A, B, np.zeros((m, n), np.float32)


def _per_call(fn, seconds=0.05):
    """Seconds per call of fn, over at least `seconds`."""
    calls, t = 16, 0.0
    while True:
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t = time.perf_counter() - t0
        if t > seconds:
            return t / calls
        calls *= 4


def _timed_per_call(time_reps, seconds=0.05):
    """Seconds per call from time_reps(reps) (seconds for reps calls), over at least `seconds`."""
    reps = 16
    while True:
        t = time_reps(reps)
        if t > seconds:
            return t / reps
        reps *= 4


def _kernel(m, n, k, variant, A, P, C):
    """A Kernel whose native kernel for (A, P, C) is made with these tunables."""
    os.environ.update(zip(TUNABLES, variant))  # read when the native kernel is made
    try:
        kern = brgemm.Kernel(m, n, k, dtype="bf16")
        kern.time_native(A, P, C, 1)
        return kern
    finally:
        for name in TUNABLES:
            del os.environ[name]


def run(reps=5):
    rng = np.random.default_rng()
    print(brgemm.info())
    peak = machine.amx_peak(0.2)
    print(f"ceilings GF/s: peak {peak:.1f}, 2x2 from registers {machine.amx_step(False, 0.2):.1f}, "
          f"2x2 with tile loads from L1 {machine.amx_step(True, 0.2):.1f}")

    A, B, C = _data(2, 2, 2, 1, rng)
    kern = brgemm.Kernel(2, 2, 2, dtype="bf16")
    P = kern.pack_b(B)
    print(f"2x2x2 x1 block, Python API: {_per_call(lambda: kern(A, P, C)) * 1e6:.2f} us/call packed, "
          f"{_per_call(lambda: kern(A, B, C)) * 1e6:.2f} us/call unpacked")
    # the packed call's layers: the binding's call (three pointers from NumPy,
    # then C), and the C function alone on pointers made beforehand
    binding = _timed_per_call(lambda reps: kern.time_native(A, P, C, reps, loop="binding"))
    alone = _timed_per_call(lambda reps: kern.time_native(A, P, C, reps, loop="pointers"))
    print(f"  of which the binding (pointers + C) {binding * 1e6:.2f}"
          f" us, the C call alone {alone * 1e6:.2f} us;"
          f" a tile config load {machine.amx_config_seconds(False, 0.05) * 1e6:.3f} us, with a release after"
          f" it {machine.amx_config_seconds(True, 0.05) * 1e6:.3f} us")

    m, n, k, count = SHAPES[0]
    A, B, C = _data(m, n, k, count, rng)
    kern = brgemm.Kernel(m, n, k, dtype="bf16")
    P = kern.pack_b(B)
    flops = 2.0 * m * n * k * count
    rows = {"API packed": lambda: kern(A, P, C), "API per call": lambda: kern(A, B, C)}
    t = {name: [] for name in list(rows) + ["C packed", "C per call", "peak"]}
    for _ in range(reps):
        t["peak"].append(machine.amx_peak(0.05))
        for name, fn in rows.items():
            t[name].append(_per_call(fn))
        calls = 2000 if peak else 1
        t["C packed"].append(kern.time_native(A, P, C, calls) / calls)
        t["C per call"].append(kern.time_native(A, B, C, calls) / calls)
    pk = statistics.median(t.pop("peak")) or float("nan")  # no peak on the software tiles
    print(f"{m}x{n}x{k} x{count}: ideal {flops / pk * 1e-3:.2f} us at the peak {pk:.0f} GF/s")
    for name, ts in t.items():
        us = statistics.median(ts) * 1e6
        print(f"  {name:<14}{us:8.2f} us/call {flops / us * 1e-3:8.1f} GF/s {flops / us * 1e-1 / pk:6.1f}% of peak")

    print("variants from C, B packed: % of the peak (median); P next step's tiles loaded by the "
          "step before, PF prefetch distance, L1 bytes per pass, R every other macro block backwards")
    print(f"{'block':<18}" + "".join(f"{f'P{p} PF{pf} L1 {l1} R{r}':>22}"
                                     for p, pf, l1, r in VARIANTS))
    for m, n, k, count in SHAPES:
        A, B, C = _data(m, n, k, count, rng)
        P = brgemm.Kernel(m, n, k, dtype="bf16").pack_b(B)
        ks = [_kernel(m, n, k, v, A, P, C) for v in VARIANTS]
        flops = 2.0 * m * n * k * count
        calls = max(50, int(0.03 * 1e12 / flops)) if peak else 1
        pct = [[] for _ in VARIANTS]
        for _ in range(reps):
            pk = machine.amx_peak(0.03) or float("nan")
            for i, kern in enumerate(ks):
                pct[i].append(100 * flops * calls / kern.time_native(A, P, C, calls)
                              * 1e-9 / pk)
        print(f"{m}x{n}x{k} x{count:<6}" + "".join(f"{statistics.median(p):>21.1f}%" for p in pct),
              flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=3)
    run(parser.parse_args().reps)
