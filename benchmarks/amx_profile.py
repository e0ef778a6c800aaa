"""Where the time of a bf16 AMX kernel call goes, on one core (run on an AMX host).

    python -m benchmarks.amx_profile [--reps N] [--parts 2 3 4]

1. Ceilings: tdpbf16ps peak (six accumulators), the kernel's 2x2 step from
   registers (four accumulators) and with its tile loads from L1, and the
   latter with a turn between macro blocks every 2, 8 or 32 steps (C tiles
   stored and reloaded, all at once or tile by tile).
2. The Python call path on a 2x2x2 block (all overhead): the API call, the
   binding's call (pointers from the arrays, then C), the foreign call alone,
   and the tile config load and release that every call pays.
3. The 64x64x64 x16 block, B packed: the API call against the same call from
   C, back to back, and with what the Python call path does between two calls
   imitated in C (a wait as long as the 2x2x2 block's Python overhead, then
   with lines of other memory written first), with the tiles released after
   each call (the default) and kept configured (BRGEMM_AMX_KEEP=1). So the
   API's loss splits into Python itself and what its pause does to the core.
4. Kernel variants from C and through the API, B packed (each packed by its
   own kernel): T1 load hints (BRGEMM_AMX_T1: 1 the operand the next macro
   block does not share, 2 B, 3 A), B packed in strips of 16 columns
   (BRGEMM_AMX_BTILES), passes over chunks of blocks small enough that the
   shared operand of the next macro block stays in L1 (BRGEMM_AMX_L1: bytes of
   A and B per pass), the ping-pong passes over 16 x 32 macro blocks
   (BRGEMM_AMX_SWAP), interleaved, median % of the peak measured in the same
   repetition; or the variants named by --variants (words of NAME=VALUE
   assignments joined by commas, BRGEMM_AMX_ left out: "GROUP=65536,TURN=1";
   "default" for none), e.g. the groups of blocks (BRGEMM_AMX_GROUP: bytes of A
   and B per group) and the turns tile by tile (BRGEMM_AMX_TURN).
5. Streams: one macro block over 64 blocks with A from L1 or L2 and B from
   L2, under each T1 hint and step order (BRGEMM_AMX_ORDER): the cost of
   tile loads from L2 without turns. (Loading each step's tiles a step ahead, BRGEMM_AMX_PIPE,
   software prefetches, BRGEMM_AMX_PF, and the forward-only walk,
   BRGEMM_AMX_REVERSE=0, lost or tied: benchmarks/RESULTS.md.)"""
import argparse
import os
import statistics
import time

import numpy as np

import brgemm
from brgemm import machine
from benchmarks.kernel import block_data

SHAPES = [(64, 64, 64, 16), (28, 64, 64, 9), (7, 64, 64, 18), (196, 64, 64, 4)]
TUNABLES = ("BRGEMM_AMX_T1", "BRGEMM_AMX_BTILES", "BRGEMM_AMX_L1", "BRGEMM_AMX_SWAP")
# the first is the default for B packed ahead, the second the schedule before it;
# L1 65536: passes over 4 blocks of 64x64x64 (SWAP: its passes' bytes, 0 = 64 KiB)
VARIANTS = [("2", "1", "0", "0"), ("0", "0", "0", "0"), ("1", "1", "0", "0"),
            ("0", "1", "0", "0"), ("2", "0", "0", "0"), ("2", "1", "65536", "0"),
            ("0", "1", "0", "1"), ("0", "1", "32768", "1"), ("0", "1", "98304", "1")]
TOUCH = (16384, 65536)  # bytes written between two calls from C: an L1's worth, more


def _data(m, n, k, count, rng):
    return block_data(m, n, k, count, "bf16", rng)


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


def _kernel(m, n, k, env, A, B, C):
    """A Kernel and B packed by it, its native kernels made with these tunables
    (read when a native kernel is made), the API's call on (A, B, C) included."""
    os.environ.update(env)
    try:
        kern = brgemm.Kernel(m, n, k, dtype="bf16")
        P = kern.pack_b(B)
        kern.time_native(A, P, C, 1)
        kern(A, P, C)
        return kern, P
    finally:
        for name in env:
            del os.environ[name]


def _pct(flops, seconds, peak):
    return 100 * flops / seconds * 1e-9 / peak


def small_call(rng):
    """Part 2; returns the API's Python overhead per call (seconds)."""
    A, B, C = _data(2, 2, 2, 1, rng)
    kern = brgemm.Kernel(2, 2, 2, dtype="bf16")
    P = kern.pack_b(B)
    api = _per_call(lambda: kern(A, P, C))
    print(f"2x2x2 x1 block, Python API: {api * 1e6:.2f} us/call packed, "
          f"{_per_call(lambda: kern(A, B, C)) * 1e6:.2f} us/call unpacked")
    binding = _timed_per_call(lambda reps: kern.time_native(A, P, C, reps, loop="binding"))
    alone = _timed_per_call(lambda reps: kern.time_native(A, P, C, reps, loop="pointers"))
    native = _timed_per_call(lambda reps: kern.time_native(A, P, C, reps))
    print(f"  of which the binding (pointers + C) {binding * 1e6:.2f} us, the foreign call alone"
          f" {alone * 1e6:.2f} us, from C {native * 1e6:.2f} us; a tile config load"
          f" {machine.amx_config_seconds(False, 0.05) * 1e6:.3f} us, with a release after it"
          f" {machine.amx_config_seconds(True, 0.05) * 1e6:.3f} us")
    return max(api - native, 0.0)


def big_call(rng, gap, reps):
    """Part 3: the API's loss on 64x64x64 x16, split."""
    m, n, k, count = SHAPES[0]
    A, B, C = _data(m, n, k, count, rng)
    flops = 2.0 * m * n * k * count
    kerns = {keep: _kernel(m, n, k, {"BRGEMM_AMX_KEEP": keep}, A, B, C) for keep in ("0", "1")}
    calls = 2000

    def native(keep, **between):
        kern, P = kerns[keep]
        return kern.time_native(A, P, C, calls, **between) / calls

    rows = {}
    for keep, tag in (("0", ""), ("1", ", tiles kept")):
        kern, P = kerns[keep]
        rows[f"API{tag}"] = lambda kern=kern, P=P: _per_call(lambda: kern(A, P, C))
        rows[f"Python loop on pointers{tag}"] = lambda kern=kern, P=P: _timed_per_call(
            lambda r: kern.time_native(A, P, C, r, loop="pointers"))
        rows[f"C back to back{tag}"] = lambda keep=keep: native(keep)
        rows[f"C, {gap * 1e6:.2f} us apart{tag}"] = lambda keep=keep: native(keep, gap=gap)
        for touch in TOUCH:
            rows[f"C, {touch // 1024} KiB written, apart{tag}"] = \
                lambda keep=keep, touch=touch: native(keep, gap=gap, touch=touch)
    t = {name: [] for name in rows}
    peaks = []
    for _ in range(reps):
        peaks.append(machine.amx_peak(0.05))
        for name, fn in rows.items():
            t[name].append(fn())
    pk = statistics.median(peaks) or float("nan")  # no peak on the software tiles
    print(f"{m}x{n}x{k} x{count}, B packed: ideal {flops / pk * 1e-3:.2f} us at the peak "
          f"{pk:.0f} GF/s; median of {reps}")
    for name, ts in t.items():
        s = statistics.median(ts)
        print(f"  {name:<40}{s * 1e6:8.2f} us/call {_pct(flops, s, pk):6.1f}% of peak")


def _named(words):
    """--variants' words as (name, tunables) pairs."""
    out = []
    for w in words:
        env = {} if w == "default" else dict(
            ("BRGEMM_AMX_" + a.split("=")[0], a.split("=")[1]) for a in w.split(","))
        out.append((w, env))
    return out


def variants(rng, reps, named=None):
    """Part 4."""
    if named is None:
        print("variants, B packed: % of the peak (median); T1 hints, BT B in strips, L1 bytes "
              "per pass, SW ping-pong passes")
        names = [f"T1 {t1} BT{bt} {int(l1) // 1024}K" + (" SW" if sw == "1" else "")
                 for t1, bt, l1, sw in VARIANTS]
        envs = [dict(zip(TUNABLES, v)) for v in VARIANTS]
    else:
        print("variants, B packed: % of the peak (median), C and API")
        names, envs = [n for n, _ in named], [e for _, e in named]
        for i, name in enumerate(names):
            print(f"  v{i}: {name}")
        names = [f"v{i}" for i in range(len(names))]
    print(f"{'block':<18}{'':>4}" + "".join(f"{x:>17}" for x in names))
    for m, n, k, count in SHAPES:
        A, B, C = _data(m, n, k, count, rng)
        ks = [_kernel(m, n, k, env, A, B, C) for env in envs]
        flops = 2.0 * m * n * k * count
        calls = max(50, int(0.03 * 1e12 / flops))
        pct_c, pct_api = [[] for _ in ks], [[] for _ in ks]
        for _ in range(reps):
            pk = machine.amx_peak(0.03) or float("nan")
            for i, (kern, P) in enumerate(ks):
                pct_c[i].append(_pct(flops, kern.time_native(A, P, C, calls) / calls, pk))
                if (m, n, k, count) == SHAPES[0]:
                    pct_api[i].append(_pct(flops, _per_call(lambda: kern(A, P, C), 0.03), pk))
        for where, pct in (("C", pct_c), ("API", pct_api)):
            if pct[0]:
                print(f"{f'{m}x{n}x{k} x{count}':<18}{where:>4}"
                      + "".join(f"{statistics.median(p):>16.1f}%" for p in pct), flush=True)
                print(f"{'':<18}{'max':>4}" + "".join(f"{max(p):>16.1f}%" for p in pct),
                      flush=True)


def streams(rng, reps):
    """Part 5: one 32 x 32 macro block over 64 blocks (the flops of 64x64x64
    x16, no turns), A's block the same for all (np.broadcast_to: from L1) or
    its own each (256 KiB from L2), B's own each (256 KiB), B packed, under
    each T1 hint: what a tile load from L2 costs, with and without the hint."""
    m, n, k, count = 32, 32, 64, 64
    _, B, C = _data(m, n, k, count, rng)
    A_all = _data(m, n, k, count, rng)[0]
    A_one = np.broadcast_to(A_all[:1], A_all.shape)
    # (T1 mode, step order): each T1 hint A by A, and B's and both hints B by B
    # (BRGEMM_AMX_ORDER=1)
    modes = [("0", "0"), ("2", "0"), ("3", "0"), ("4", "0"), ("2", "1"), ("4", "1")]
    cases = [(a_name, A, mode) for a_name, A in (("A from L1", A_one), ("A from L2", A_all))
             for mode in modes]
    ks = [_kernel(m, n, k, {"BRGEMM_AMX_T1": t1, "BRGEMM_AMX_ORDER": order}, A, B, C) + (A,)
          for _, A, (t1, order) in cases]
    flops = 2.0 * m * n * k * count
    calls = max(50, int(0.03 * 1e12 / flops))
    pct = [[] for _ in ks]
    for _ in range(reps):
        pk = machine.amx_peak(0.03) or float("nan")
        for i, (kern, P, A) in enumerate(ks):
            pct[i].append(_pct(flops, kern.time_native(A, P, C, calls) / calls, pk))
    print(f"streams: {m}x{n}x{k} x{count}, B packed, % of the peak (median, max of {reps}); "
          "T1 0 none, 2 B, 3 A, 4 both; order 0 A by A, 1 B by B")
    for (a_name, _, (t1, order)), p in zip(cases, pct):
        print(f"  {a_name}, T1 {t1}, order {order}: {statistics.median(p):6.1f}% "
              f"{max(p):6.1f}%", flush=True)


def run(reps=5, parts=(1, 2, 3, 4, 5), named=None):
    rng = np.random.default_rng()
    print(brgemm.info())
    peak = machine.amx_peak(0.2)
    print(f"ceilings GF/s: peak {peak:.1f}, 2x2 from registers {machine.amx_step(False, 0.2):.1f}, "
          f"2x2 with tile loads from L1 {machine.amx_step(True, 0.2):.1f}")
    print("  with a turn every 2 / 8 / 32 steps, all at once: " + " / ".join(
        f"{machine.amx_turns(e, False, 0.1):.1f}" for e in (2, 8, 32)) + "; tile by tile: "
        + " / ".join(f"{machine.amx_turns(e, True, 0.1):.1f}" for e in (2, 8, 32)))
    if 2 in parts or 3 in parts:
        overhead = small_call(rng)
        if 3 in parts:
            big_call(rng, min(max(overhead, 0.5e-6), 1e-3), reps)
    if 4 in parts:
        variants(rng, reps, named)
    if 5 in parts:
        streams(rng, reps)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--parts", type=int, nargs="+", default=[1, 2, 3, 4, 5],
                        help="which of the parts above (1, the ceilings, always runs)")
    parser.add_argument("--variants", nargs="+", default=None,
                        help="part 4's variants: NAME=VALUE,... per word (BRGEMM_AMX_ left out)")
    args = parser.parse_args()
    run(args.reps, args.parts, args.variants and _named(args.variants))
