"""The layers' plans as they are built on "cuda" (their "cuda" config tables)
take the GPU's fast paths. Skipped where there is no GPU (CI);
benchmarks/device_gpu.sh runs them."""
import pytest

import brgemm

if "cuda" not in brgemm.backends():
    pytest.skip("no CUDA device here", allow_module_level=True)


@pytest.mark.parametrize("what", ["lstm", "conv"])
def test_layers_on_cuda_launch_on_tensor_cores(rng, what):
    """bf16 layers built on "cuda" record plans whose every GEMM phase takes a
    tensor-core entry point (a plan recorded for the CPU keeps B in VNNI pairs
    where the CPU reads them so, which the GPU runs on its generic path only)."""
    from brgemm.machine import cuda_launches
    from primitives import conv, lstm
    if what == "lstm":
        T, N = (int(v) for v in rng.integers(1, 5, 2))
        C, K = (int(v) for v in rng.integers(2, 9, 2) * 64)
        print(f"T={T} N={N * 16} C={C} K={K}")
        layer = lstm.LSTM(C, K, dtype="bf16", backend="cuda")
        layer.prepare(T, N * 16)
        plans = list(layer.plans.values())
    else:  # a 3x3 layer's weight update starts its pixel runs off 16-byte boundaries
        C, K = (int(v) for v in rng.integers(1, 5, 2) * 64)
        H = int(rng.integers(7, 29))
        print(f"C={C} K={K} H=W={H}")
        g1 = conv.geometry(2, C, K, H, H, 1, 1, (1, 1), (0, 0), path="cuda")
        g3 = conv.geometry(2, C, K, H, H, 3, 3, (1, 1), (1, 1), path="cuda")
        plans = [conv.plan(g1, pass_, "bf16") for pass_ in ("fwd", "bwd", "upd")] + [
            conv.plan(g3, pass_, "bf16") for pass_ in ("fwd", "bwd")]
    entries = {entry for p in plans for _, entry, _ in cuda_launches(p)}
    assert entries and "generic" not in entries, entries
