"""The stored-activation training's weight-gradient plan (primitives/mlp_cuda_grads.py)
replayed on the CPU backend, against float64: the same recorded nest the GPU runs
on backend "cuda" (tests/test_cuda_mlp.py checks it there). Random layer counts,
widths, batch sizes and multiprocessor counts; x read in place or from h."""
import ml_dtypes
import numpy as np
import pytest

from primitives import mlp_cuda_grads


def new_seed():
    seed = int(np.random.SeedSequence().entropy % 2**31)
    print("seed", seed)
    return seed


@pytest.mark.parametrize("case", range(6))
def test_partials_sum_to_float64(case):
    seed = new_seed()
    rng = np.random.default_rng(seed)
    L, W = int(rng.integers(1, 5)), int(rng.choice([16, 32, 64, 128]))
    T = int(rng.choice([16, 64]))
    pad = T * int(rng.integers(1, 40))
    sms, reads_x = int(rng.integers(1, 140)), bool(rng.random() < 0.5)
    bf16 = ml_dtypes.bfloat16
    dz = rng.standard_normal((L, pad, W)).astype(bf16)
    h = rng.standard_normal((L, pad, W)).astype(bf16)
    dzt = dz.reshape(L, pad // T, T, W).transpose(0, 1, 3, 2).copy()  # [L][tiles][W][T]
    plan, partials = mlp_cuda_grads.plan(L, W, pad, T, sms, reads_x)
    assert 1 <= partials <= pad // T
    dwp = np.full(partials * L * W * W, np.nan, np.float32)  # every element must be written
    t = {"dzt": dzt.reshape(-1), "dwp": dwp}
    if "h" in plan.tensors:
        t["h"] = h.reshape(-1)
    if reads_x:
        t["x"] = np.ascontiguousarray(h[0])
    plan.run(backend="cpu", **t)
    got = dwp.reshape(partials, L, W, W).astype(np.float64).sum(0)
    want = np.einsum("lnk,lnc->lkc", dz.astype(np.float64), h.astype(np.float64))
    # f32 sums of `pad` bf16 products (exact in f32) and the partials: gamma_pad of |dz|^T |h|
    gamma = (pad + partials) * 2.0**-24 / (1 - (pad + partials) * 2.0**-24)
    bound = gamma * np.einsum("lnk,lnc->lkc", np.abs(dz.astype(np.float64)),
                             np.abs(h.astype(np.float64))) + 1e-30
    assert np.all(np.abs(got - want) <= bound), (seed, np.max(np.abs(got - want) - bound))


def test_chunks_fill_the_gpu_twice():
    assert mlp_cuda_grads.chunk_tiles(5, 16384, 132) == -(-16384 // 53)
    assert mlp_cuda_grads.chunk_tiles(64, 10, 132) == 2       # 5 chunks: 2 tiles each
    assert mlp_cuda_grads.chunk_tiles(1, 3, 132) == 1         # never more chunks than tiles
