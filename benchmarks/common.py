"""What every benchmark shares: shape files, timing, peak, tables."""
import os
import pathlib
import statistics
import time

import numpy as np

from benchmarks import CORES

SHAPES_DIR = pathlib.Path(__file__).resolve().parent / "shapes"


ALIASES = {"resnet50": "resnet50_conv", "gnmt": "gnmt_lstm", "fc": "fc_sizes"}


def read_shapes(name):
    """Rows of a shape file (benchmarks/shapes/<name>.txt, or an alias): ints then a name."""
    path = SHAPES_DIR / f"{ALIASES.get(name, name)}.txt"
    if not path.exists():
        known = sorted(p.stem for p in SHAPES_DIR.glob("*.txt")) + sorted(ALIASES)
        raise SystemExit(f"--set: no shape set {name!r} (known: {', '.join(known)})")
    rows = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].split()
        if line:
            rows.append((tuple(int(v) for v in line[:-1]), line[-1]))
    return rows


def quick_shapes(name, quick, names):
    """The rows of shape set `name`; with quick, only those named in `names`."""
    rows = read_shapes(name)
    return [r for r in rows if r[1] in names] if quick else rows


def compare(vs, onednn, torch):
    """The rows of the oneDNN comparison and then the PyTorch one, as --vs asks
    (onednn, torch: functions that run them)."""
    return (onednn() if "onednn" in vs else []) + (torch() if "torch" in vs else [])


def differs(what, ours, theirs, dtype, against, bf16_tol=2e-2):
    """Ours against the other side's result before timing: None where the
    largest difference relative to the largest magnitude is within 1e-4 for
    f32 and bf16_tol for bf16 (both sides round to bf16, at different points),
    else what differs, by how much."""
    ours = np.asarray(ours, np.float32)
    err = np.abs(ours - theirs).max() / (np.abs(theirs).max() + 1e-30)
    if err > (1e-4 if dtype == "f32" else bf16_tol):
        return f"{what}: ours and {against} differ by {err:.2e} (relative to max)"
    return None


def check_close(what, ours, theirs, dtype, against, bf16_tol=2e-2):
    """differs(), raised as an AssertionError."""
    why = differs(what, ours, theirs, dtype, against, bf16_tol)
    if why:
        raise AssertionError(why)


def arbitrate(name, what, ours, theirs, want, dtype, against="torch.nn", bf16_tol=3e-2):
    """Ours and the other side's results (in the order of `what`'s names)
    against `want`, the same computation in float64 on the same rounded
    inputs: ours must agree (else AssertionError); the first of theirs that
    does not is printed as a note and returned (None: all agree), and the
    caller times both all the same."""
    for w, got, ref in zip(what, ours, want):
        check_close(f"{name} {w}", got, ref, dtype, "float64", bf16_tol)
    for w, got, ref in zip(what, theirs, want):
        why = differs(f"{name} {w}", got, ref, dtype, "float64", bf16_tol)
        if why:
            note = why.replace("ours", against, 1)
            print(f"  note: {note}; timed all the same", flush=True)
            return note
    return None


def set_threads(threads, onednn=True):
    """Same thread count (and cores) for us (OpenMP), PyTorch and oneDNN, and proof of it:
    our executor's count from C, oneDNN's from its own verbose report (run in
    a child process with the same environment; skipped with onednn=False, when
    only PyTorch is compared). Returns the count."""
    import re
    import subprocess
    import sys

    from brgemm import machine as brgemm_machine
    threads = threads or len(CORES)
    if threads > len(CORES):
        raise SystemExit(f"--threads: {threads} asked, this process may run on {len(CORES)} cores")
    # oneDNN 3.13 runs on TBB, which sizes its pool from the CPU affinity mask:
    # keep the process (and the oneDNN probe below) on `threads` cores
    pin(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)  # for child processes
    brgemm_machine.set_cpu_threads(threads)  # the runtime read the variable when it loaded
    ours = brgemm_machine.cpu_threads()
    if not onednn:
        print(f"threads: ours {ours} (OpenMP)")
        if ours != threads:
            raise SystemExit(f"thread counts differ: asked {threads}, ours {ours}")
        return threads
    probe = ("import numpy as np; from benchmarks.onednn import Job; "
             "Job.ip('fwd', np.ones((4, 4), np.float32), np.ones((4, 4), np.float32), None).run()")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         env={**os.environ, "ONEDNN_VERBOSE": "1"}).stdout
    nthr = re.search(r"nthr:(\d+)", out)
    isa = re.search(r"cpu,isa:([^\n]+)", out)
    theirs = int(nthr.group(1)) if nthr else None
    print(f"threads: ours {ours} (OpenMP), oneDNN {theirs} (its verbose report; "
          f"isa: {isa.group(1) if isa else '?'})")
    if ours != threads or theirs != threads:
        why = (" (the OpenMP binding, OMP_PROC_BIND or OMP_PLACES, put this thread on one "
               "core, and a oneDNN on TBB sizes its pool from that thread's mask: run unbound "
               "to compare with it)" if bound_threads() else "")
        raise SystemExit(f"thread counts differ: asked {threads}, ours {ours}, oneDNN {theirs}"
                         + why)
    return threads


def pin(threads):
    """Keep this thread (and the processes it starts) on the first `threads`
    of CORES, unless the OpenMP runtime bound it to its place (bound_threads):
    re-pinning it would undo that."""
    if not bound_threads():
        os.sched_setaffinity(0, list(CORES[:threads]))


def bound_threads():
    """Whether the OpenMP runtime binds its threads to places (OMP_PROC_BIND
    other than false, or OMP_PLACES or GOMP_CPU_AFFINITY alone): it then bound
    this thread to the first place as it loaded, and re-pinning this thread
    would undo that."""
    bind = os.environ.get("OMP_PROC_BIND", "").strip().lower()
    if bind:
        return bind != "false"
    return bool(os.environ.get("OMP_PLACES") or os.environ.get("GOMP_CPU_AFFINITY"))


def interleaved_samples(fns, reps=7, min_time=0.05, rotate=False):
    """Seconds per call of each fn in each of `reps` rounds, timed round-robin
    so that drift hits all alike: samples[i][r] is fn i in round r. rotate:
    each round starts one fn later, so that no fn always runs right after the
    same other one (and finds the caches as that one left them)."""
    loops = []
    for fn in fns:  # warm-up, and a loop count that makes each sample >= min_time
        fn()
        t0 = time.perf_counter()
        fn()
        loops.append(max(1, int(min_time / max(time.perf_counter() - t0, 1e-9))))
    samples = [[] for _ in fns]
    for r in range(reps):
        for j in range(len(fns)):
            i = (j + r) % len(fns) if rotate else j
            t0 = time.perf_counter()
            for _ in range(loops[i]):
                fns[i]()
            samples[i].append((time.perf_counter() - t0) / loops[i])
    return samples


def report_sides(title, sides, flops, reps, base):
    """A probe's table: each of `sides` (name -> fn) timed in rotated rounds
    (interleaved_samples): its median ms, its time over side `base`'s paired by
    round (paired_ratio; > 1: slower), its spread, and GFLOP/s where `flops`
    names it."""
    names = list(sides)
    samples = interleaved_samples([sides[n] for n in names], reps=reps, rotate=True)
    by = dict(zip(names, samples))
    print(f"{title}: {reps} rotated rounds; ms (median), over '{base}' (paired), spread")
    for n in names:
        s = by[n]
        med = statistics.median(s)
        rate = f"  {flops[n] / med / 1e9:8.1f} GFLOP/s" if n in flops else ""
        print(f"  {n:<30}{1e3 * med:9.3f}{paired_ratio(s, by[base]):8.3f}"
              f"{100 * spread_of(s):6.0f}%{rate}", flush=True)


def spread_of(s):
    """(max - min) / median of one fn's samples."""
    return (max(s) - min(s)) / statistics.median(s)


# rounds of the main job's tables (ours, oneDNN and the functional form per
# row, rotated): its func/ours is a paired median over them, and with 5 a
# slow spell of a shared machine moved single rows by up to a third between
# runs (benchmarks/RESULTS.md, issue 17)
MAIN_ROUNDS = 9


def interleaved(fns, reps=7, min_time=0.05, rounds=False):
    """Median seconds per call of each fn (interleaved_samples, rotated, so
    that no fn always runs right after the same other one, oneDNN's call say,
    whose TBB workers may still be awake on our cores), and each one's spread;
    rounds: the samples as well (for paired_ratio)."""
    samples = interleaved_samples(fns, reps, min_time, rotate=True)
    out = [statistics.median(s) for s in samples], [spread_of(s) for s in samples]
    return (*out, samples) if rounds else out


def paired_ratio(num, den):
    """The median over rounds of num[r] / den[r]: two fns' speed ratio from the
    same rounds, so that a slow spell of the machine, which lasts about a
    round, slows both sides of a ratio rather than one."""
    return statistics.median(n / d for n, d in zip(num, den))


def func_over_ours(samples, ours, func):
    """The functional call's speed over the layer path's, paired by round
    (paired_ratio): samples from interleaved(..., rounds=True), ours the
    indices of the layer's passes that the functional call does (summed per
    round), func the functional call's index."""
    return paired_ratio([sum(r) for r in zip(*(samples[i] for i in ours))], samples[func])


def path_peak(path, seconds=0.2):
    """(GFLOP/s, unit): the measured peak of one core for the instruction a CPU
    kernel path runs on: AMX tdpbf16ps ("amx") for bf16-amx, AVX512-BF16 dot
    products ("bf16dot") for bf16-vnni, else f32 FMAs (f32, and bf16 widened
    to f32; the unit is the vector extension they ran on)."""
    from brgemm import machine as brgemm_machine
    if path.startswith("bf16-amx"):
        return brgemm_machine.amx_peak(seconds), "amx"
    if path.startswith("bf16-vnni"):
        return brgemm_machine.bf16_peak(seconds), "bf16dot"
    return brgemm_machine.fma_peak(seconds)


def layer_peak(dtype, threads, seconds=0.2):
    """path_peak of dtype's CPU kernel path here, times `threads`: a layer's %
    of peak is against its own unit."""
    from brgemm.info import kernel_path
    peak, unit = path_peak(kernel_path(dtype, "cpu") or "", seconds)
    return peak * threads, unit


def geomean(xs):
    xs = [x for x in xs if x > 0]
    return (statistics.geometric_mean(xs)) if xs else float("nan")


def machine():
    model = "unknown"
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return f"{model}, {os.cpu_count()} cores"


def pyplot():
    """matplotlib.pyplot drawing to files (Agg), or None with a note when the
    bench extra is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing (the bench extra): no PNG")
        return None
    return plt


def save_report(name, rows, key, label):
    """JSON of the rows and a PNG of rows[key] per shape and pass under benchmarks/results/."""
    import datetime
    import json
    out = pathlib.Path(__file__).resolve().parent / "results"
    out.mkdir(exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    meta = dict(machine=machine(), date=stamp, name=name)
    (out / f"{name}-{stamp}.json").write_text(json.dumps(dict(meta=meta, rows=rows), indent=1))
    plt = pyplot()
    if plt is None:
        return
    labels = [f"{r['shape']} {r.get('pass_', '')}".strip() for r in rows]
    fig, ax = plt.subplots(figsize=(max(6, 0.35 * len(rows)), 4))
    ax.bar(range(len(rows)), [r[key] for r in rows])
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(range(len(rows)), labels, rotation=75, fontsize=7)
    ax.set_ylabel(label)
    ax.set_title(f"{name}, {meta['machine']}")
    fig.tight_layout()
    fig.savefig(out / f"{name}-{stamp}.png", dpi=110)
    plt.close(fig)


def ratio_row(flops, t_ours, t_onednn, peak, **fields):
    """One table row: GFLOP/s of both sides, ours / oneDNN and ours as % of peak."""
    row = dict(fields, ours=flops / t_ours * 1e-9, onednn=flops / t_onednn * 1e-9)
    row["ratio"] = row["ours"] / row["onednn"]
    row["pct_peak"] = 100 * row["ours"] / peak
    return row


class VsTable:
    """The ours-against-oneDNN table: head() prints the header, line(row) one
    ratio_row (with its impl, and func_over_ours or func where the row has them)."""

    def __init__(self, name_width, pass_width, label="shape", func_gflops=False):
        self.nw, self.pw, self.func = name_width, pass_width, func_gflops
        self.label = label

    def head(self):
        head = (f"{self.label:<{self.nw}}{'pass':<{self.pw}}{'ours':>8}"
                + (f"{'func':>8}" if self.func else "")
                + f"{'oneDNN':>8}{'ours/oneDNN':>12}{'func/ours':>10}{'ours %pk':>9}{'spread':>8}"
                + "  oneDNN impl")
        print(head + "\n" + "-" * len(head))

    def line(self, r):
        def opt(key, width, fmt):
            return f"{r[key]:>{width}{fmt}}" if r.get(key) else f"{'-':>{width}}"
        print(f"{r['shape']:<{self.nw}}{r['pass_']:<{self.pw}}{r['ours']:>8.1f}"
              + (opt("func", 8, ".1f") if self.func else "")
              + f"{r['onednn']:>8.1f}{r['ratio']:>12.2f}" + opt("func_over_ours", 10, ".2f")
              + f"{r['pct_peak']:>8.1f}%{100 * r['spread']:>7.0f}%  {r['impl']}"
              + ("  (outputs differ)" if r.get("mismatch") else ""), flush=True)


def finish_report(name, rows, passes):
    """The geomean of ours / oneDNN per pass, then JSON and PNG (save_report).
    Rows whose outputs differed (a "mismatch" field: timed anyway) are left
    out of the geomeans and listed."""
    for p in passes:
        ratios = [r["ratio"] for r in rows if r["pass_"] == p and not r.get("mismatch")]
        if ratios:
            print(f"geomean ours/oneDNN {p}: {geomean(ratios):.2f}")
        left = [r["shape"] for r in rows if r["pass_"] == p and r.get("mismatch")]
        if left:
            print(f"  {p} left out of the geomean (outputs differ): {', '.join(left)}")
        funcs = [r["func_over_ours"] for r in rows if r["pass_"] == p and r.get("func_over_ours")]
        if funcs:
            print(f"geomean func/ours {p}: {geomean(funcs):.2f} (lowest {min(funcs):.2f})")
    save_report(name, rows, "ratio", "ours / oneDNN")
    return rows


# ---------------------------------------------------------------- functional forms

FUNC_HEAD = (f"{'shape':<20}{'pass':<8}{'func ms':>9}{'torch ms':>9}{'layer ms':>9}"
             f"{'func/torch':>11}{'func/layer':>11}{'kept/layer':>11}{'spread':>8}")


def torch_threads(threads):
    """PyTorch on the same thread count as ours, checked."""
    import torch
    torch.set_num_threads(threads)
    if torch.get_num_threads() != threads:
        raise SystemExit(f"thread counts differ: asked {threads}, PyTorch {torch.get_num_threads()}")
    return torch


def functional_setup(threads, dtype, quick, title):
    """PyTorch on our thread count, the NumPy and torch dtypes of `dtype`, and
    the repetitions per timing; prints the table's title (title(torch
    version), completed with the machine and repetitions) and header."""
    import brgemm
    torch = torch_threads(threads)
    npdt = np.float32 if dtype == "f32" else brgemm.bfloat16
    tdt = torch.float32 if dtype == "f32" else torch.bfloat16
    reps = 7 if quick else 9
    print(f"\n{title(torch.__version__)}; {machine()}; {reps} rotated rounds: times are "
          "medians, ratios medians of the rounds' paired ratios")
    print(FUNC_HEAD + "\n" + "-" * len(FUNC_HEAD))
    return torch, npdt, tdt, reps


def functional_row(name, pass_, func, torch_fn, layer, kept, reps, **fields):
    """Our functional form against PyTorch's own call and our layer path, same
    run, in rotated rounds; times are medians, ratios (> 1: the functional
    form is faster) medians of the rounds' paired ratios (paired_ratio). kept: the
    functional form with reuse= saying the weights are unchanged (their
    blocked copy kept, primitives.reuse)."""
    s_func, s_torch, s_layer, s_kept = interleaved_samples([func, torch_fn, layer, kept], reps=reps,
                                                            rotate=True)
    t_func, t_torch, t_layer, t_kept = (statistics.median(s) for s in (s_func, s_torch, s_layer,
                                                                        s_kept))
    row = dict(fields, shape=name, pass_=pass_, func_ms=1e3 * t_func, torch_ms=1e3 * t_torch,
               layer_ms=1e3 * t_layer, kept_ms=1e3 * t_kept,
               func_vs_torch=paired_ratio(s_torch, s_func),
               func_over_layer=paired_ratio(s_layer, s_func),
               kept_over_layer=paired_ratio(s_layer, s_kept),
               spread=max(spread_of(s) for s in (s_func, s_torch, s_layer, s_kept)))
    print(f"{name:<20}{pass_:<8}{row['func_ms']:>9.2f}{row['torch_ms']:>9.2f}{row['layer_ms']:>9.2f}"
          f"{row['func_vs_torch']:>11.2f}{row['func_over_layer']:>11.2f}"
          f"{row['kept_over_layer']:>11.2f}{100 * row['spread']:>7.0f}%", flush=True)
    return row


def finish_functional(name, rows, passes=("fwd", "fwd+bwd")):
    """Geomeans of func/torch and func/layer per pass (and the lowest func/layer),
    then JSON and PNG (save_report)."""
    for p in passes:
        rs = [r for r in rows if r["pass_"] == p]
        if rs:
            low = min(rs, key=lambda r: r["func_over_layer"])
            print(f"geomean {p}: func/torch {geomean([r['func_vs_torch'] for r in rs]):.2f}, "
                  f"func/layer {geomean([r['func_over_layer'] for r in rs]):.2f} "
                  f"(lowest {low['func_over_layer']:.2f}, {low['shape']}), "
                  f"kept/layer {geomean([r['kept_over_layer'] for r in rs]):.2f} "
                  f"(lowest {min(r['kept_over_layer'] for r in rs):.2f})")
    save_report(name, rows, "func_vs_torch", "functional / PyTorch (speed)")
    return rows
