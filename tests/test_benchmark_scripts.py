"""The benchmark scripts and probes stay runnable: each module under benchmarks/
imports (four probes had stopped importing after a rename in benchmarks.conv,
and only a device call would have found it), and benchmarks.stages' replay of
the pointwise forward's steps computes what conv.forward computes (its steps
had not followed the tail that conv's plan leaves to two copies)."""
import importlib
import pathlib

import numpy as np
import pytest

from brgemm.info import kernel_path
from primitives import conv

MODULES = sorted(p.stem for p in (pathlib.Path(__file__).parent.parent / "benchmarks").glob("*.py")
                 if p.stem != "__main__")


@pytest.mark.parametrize("name", MODULES)
def test_benchmark_module_imports(name):
    importlib.import_module(f"benchmarks.{name}")


def _pointwise_layer(rng, config):
    """A random 1x1 layer that conv's pointwise forward takes under config,
    whose images' pixels leave a tail (H W mod 16 > 0) where the config
    asks for one."""
    tail = config["fwd"]["pointwise_tail"]
    for _ in range(10000):
        H, W = (int(v) for v in rng.integers(4, 17, 2))
        N, C, K = int(rng.integers(1, 4)), 16 * int(rng.integers(1, 5)), int(rng.integers(8, 80))
        g = conv.geometry(N, C, K, H, W, 1, 1, (1, 1), (0, 0), config, path=kernel_path("f32"))
        if conv.pointwise(g, "f32", "cpu") and (H * W % 16 > 0) == tail:
            return g
    raise AssertionError("no pointwise layer drawn")


@pytest.mark.parametrize("tail", [True, False])
def test_stages_replays_the_pointwise_forward(tail):
    """The tail forced on or off by config=, whatever this machine's tables
    say (the AMX Xeon's turn it off)."""
    from benchmarks.stages import _pointwise_forward
    seed = int(np.random.SeedSequence().entropy % 2**32)
    print("seed", seed)
    rng = np.random.default_rng(seed)
    config = {"fwd": {"pointwise_tail": tail}}
    g = _pointwise_layer(rng, config)
    x = rng.standard_normal((g.N, g.C, g.H, g.W)).astype(np.float32)
    w = rng.standard_normal((g.K, g.C, 1, 1)).astype(np.float32)
    y = np.full((g.N, g.K, g.H, g.W), np.nan, np.float32)  # every element must be written
    steps = _pointwise_forward(x, w.reshape(g.K, g.C), g, y)
    assert ("x tail" in dict(steps)) == tail == bool(conv.pointwise_tail(g))
    for _, fn in steps:
        fn()
    want = np.einsum("kc,nchw->nkhw", w[:, :, 0, 0].astype(np.float64), x.astype(np.float64))
    bound = 1e-5 * np.einsum("kc,nchw->nkhw", np.abs(w[:, :, 0, 0]).astype(np.float64),
                             np.abs(x).astype(np.float64)) + 1e-30
    assert np.all(np.abs(y - want) <= bound), (g, np.nanmax(np.abs(y - want) / bound))
    np.testing.assert_array_equal(y, conv.forward(x, w, config=config))
