"""What every benchmark shares: shape files, timing, peak, tables."""
import os
import pathlib
import statistics
import time

SHAPES_DIR = pathlib.Path(__file__).resolve().parent / "shapes"


def read_shapes(name):
    """Rows of a shape file (benchmarks/shapes/<name>.txt): ints then a name."""
    rows = []
    for line in (SHAPES_DIR / f"{name}.txt").read_text().splitlines():
        line = line.split("#", 1)[0].split()
        if line:
            rows.append((tuple(int(v) for v in line[:-1]), line[-1]))
    return rows


def set_threads(threads):
    """Same thread count for us (OpenMP), PyTorch and oneDNN; returns it."""
    threads = threads or len(os.sched_getaffinity(0))
    os.environ["OMP_NUM_THREADS"] = str(threads)
    return threads


def interleaved(fns, reps=7, min_time=0.05):
    """Median seconds per call of each fn, timed round-robin so drift hits all alike."""
    loops = []
    for fn in fns:  # warm-up, and a loop count that makes each sample >= min_time
        fn()
        t0 = time.perf_counter()
        fn()
        loops.append(max(1, int(min_time / max(time.perf_counter() - t0, 1e-9))))
    samples = [[] for _ in fns]
    for _ in range(reps):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            for _ in range(loops[i]):
                fn()
            samples[i].append((time.perf_counter() - t0) / loops[i])
    return [statistics.median(s) for s in samples], [(max(s) - min(s)) / statistics.median(s)
                                                     for s in samples]


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
