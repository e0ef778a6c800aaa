"""What every randomized sweep shares: seeds, case counts, thread counts.

    BRGEMM_SWEEP_SEED=s   the base seed (default: fresh; printed either way)
    BRGEMM_SWEEP=N        a deeper run: about N cases per primitive, split over
                          its sweep tests by their share (default: the CI counts)
    BRGEMM_SWEEP_CASE=i   run only case i (with the seed a failure printed)

Case i of a test draws from its own generator, seeded by (base seed, test id,
i), so it is the same case whatever N is and whatever ran before it."""
import contextlib
import os
import zlib

import numpy as np

from brgemm.backend import cpu

_seed = None


def base_seed():
    global _seed
    if _seed is None:
        env = os.environ.get("BRGEMM_SWEEP_SEED")
        _seed = int(env) if env else int(np.random.SeedSequence().entropy % 2**32)
    return _seed


def deep():
    """The N of BRGEMM_SWEEP, or None for the CI run."""
    env = os.environ.get("BRGEMM_SWEEP")
    return int(env) if env else None


def test_id():
    """The running test's node id (pytest sets PYTEST_CURRENT_TEST)."""
    return os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0]


def cases(ci, share):
    """(i, rng, context) for each case: `ci` cases in CI, ceil(N * share) with
    BRGEMM_SWEEP=N; context says how to reproduce case i."""
    node = test_id()
    n = max(1, ci if deep() is None else -(-deep() * share // 1))
    only = os.environ.get("BRGEMM_SWEEP_CASE")
    seed = base_seed()
    print(f"sweep {node}: {n} cases, BRGEMM_SWEEP_SEED={seed}")
    for i in range(int(n)) if only is None else [int(only)]:
        rng = np.random.default_rng([seed, zlib.crc32(node.encode()), i])
        yield i, rng, (f"Reproduce: BRGEMM_SWEEP_SEED={seed} BRGEMM_SWEEP_CASE={i} "
                       f"python -m pytest '{node}'")


def threads_for(rng):
    """Mostly the default (all cores); sometimes 1, 2 or 3 OpenMP threads."""
    return [None, None, None, 1, 2, 3][rng.integers(6)]


@contextlib.contextmanager
def omp_threads(n):
    """Plans and layout copies run with n OpenMP threads inside (as
    OMP_NUM_THREADS=n would make them); None leaves the count alone."""
    if n is None:
        yield
        return
    before = cpu.lib.brgemm_cpu_plan_threads(0)
    cpu.lib.brgemm_cpu_set_threads(n)
    try:
        yield
    finally:
        cpu.lib.brgemm_cpu_set_threads(before)


def log_uniform(rng, lo, hi):
    """An int in [lo, hi], small values as likely as large ones (log scale)."""
    return int(min(hi, np.floor(np.exp(rng.uniform(np.log(lo), np.log(hi + 1))))))
