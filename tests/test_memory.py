"""Memory stays flat with ever new shapes: every cache is bounded (brgemm/lru.py)
and a dropped kernel returns its JIT code (kernels/cpu/jit.c). Measured in a
fresh interpreter from /proc/self/statm; BRGEMM_MEMORY_SHAPES=N runs N shapes."""
import os
import subprocess
import sys
import textwrap

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROBE = """
import sys
import numpy as np
import brgemm
from primitives import fc

f32 = np.float32
rng = np.random.default_rng(int(sys.argv[1]))
shapes_total = int(sys.argv[2])
seen = set()


def rss_mb():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20


def fresh(lo, hi, n):
    out = []
    while len(out) < n:
        s = tuple(int(v) for v in rng.integers(lo, hi, 3))
        if s not in seen:
            seen.add(s)
            out.append(s)
    return out


def one_shot(m, n, k):  # a new Kernel and its JIT code per shape
    A, B = np.full((2, m, k), 0.5, f32), np.full((2, k, n), 2.0, f32)
    C = np.zeros((m, n), f32)
    brgemm.brgemm(A, B, C)
    assert np.all(C == 2 * k)


def linear(N, C, K):  # geometry, settings, a plan and its kernels per shape
    fc.forward(np.ones((N, C), f32), np.ones((K, C), f32))


kern = brgemm.Kernel(4, 4, 4)
buf = np.zeros(4 * 40000, f32)
A4 = np.ones((1, 4, 4), f32)


def strided(s):  # one Kernel, a JIT kernel per C row stride
    kern(A4, A4, np.lib.stride_tricks.as_strided(buf, (4, 4), (4 * s, 4)))


for s in fresh(1, 48, 300):  # fill every cache past its bound
    one_shot(*s)
for s in fresh(48, 96, 400):
    linear(*s)
for s in fresh(190, 200, 40):  # the result pools full of arrays as large as any below
    linear(*s)
for s in range(4, 200):
    strided(s)
marks, calls = [rss_mb()], 0
n_fc = shapes_total // 10
for half in range(2):
    for i, s in enumerate(fresh(1, 128, (shapes_total - n_fc) // 2)):
        one_shot(*s)
        one_shot(*s)
        strided(200 + len(seen) % 30000)
        calls += 3
    for s in fresh(96, 200, n_fc // 2):
        linear(*s)
        linear(*s)
        calls += 2
    marks.append(rss_mb())
print("calls", calls, "shapes", shapes_total, "rss_mb", " ".join(f"{m:.1f}" for m in marks))
"""


def test_rss_stays_flat_over_new_shapes():
    seed = int(np.random.SeedSequence().entropy % 2**32)
    shapes = int(os.environ.get("BRGEMM_MEMORY_SHAPES", "5000"))
    print(f"seed={seed} shapes={shapes}")
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(PROBE), str(seed), str(shapes)],
                       cwd=ROOT, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    print(p.stdout, p.stderr[-3000:])
    assert p.returncode == 0
    calls = int(p.stdout.split("calls")[1].split()[0])
    warm, half, end = map(float, p.stdout.split("rss_mb")[1].split())
    assert calls >= 2 * shapes
    # with the caches full, new shapes evict old ones: what the first half of
    # them grew (allocator arenas settling) the second half does not repeat.
    # Unbounded, the same run grew by about 100 MB (issue 13).
    assert end - warm < 16, (warm, half, end)
    assert end - half < 6, (warm, half, end)
