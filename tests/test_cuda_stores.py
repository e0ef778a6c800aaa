"""The TMA entries' epilogue stores (kernels/cuda/brgemm_plan.cu store_tile):
with vec_stores on, several C elements a thread for bf16 C and for f32 C
with ops in registers; on an sm_90a GPU the same bits as the per-element
epilogue (vec_stores off; the cp.async entries always), and float64
within the bound, on random GEMM-shaped plans: bf16 or f32 C, alpha, beta,
ops, blocks the tiles overhang, row strides and C offsets that allow
16-byte, 8-byte or only single-element stores."""
import numpy as np
import pytest

import brgemm
from brgemm import epilogue
from brgemm.recorder import Recorder
from cuda_support import fc_inputs, nan_outputs
from primitives import fc, gemm

pytestmark = pytest.mark.skipif("cuda" not in brgemm.backends(), reason="no CUDA device here")

ACTS = {"relu": lambda v: np.maximum(v, 0), "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
        "tanh": np.tanh}


def tensor_cores():
    from brgemm.backend import cuda
    if not cuda.has_tensor_cores():
        pytest.skip("this GPU has no wgmma path (sm_90a)")
    return cuda


def bf16_round(x):
    """x (float64) rounded to bf16 by way of f32, nearest even, as the kernel rounds."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16).astype(np.uint32)
    return u.view(np.float32).astype(np.float64)


@pytest.mark.parametrize("trial", range(8))
def test_vec_stores_gemm_plans(rng, monkeypatch, trial):
    """C = alpha * A @ B + beta * C, then (f32 C) bias, an activation and a
    bf16 copy, on blocks of 64-192 rows and columns; C's row stride N + 0, 4
    or 1 elements (16-byte, 8-byte, single stores), the copy's N + 0 or 3."""
    torch = pytest.importorskip("torch")
    cuda = tensor_cores()
    c_dtype, tma = ("bf16", "f32")[trial % 2], bool(trial // 2 % 2)
    bm, bn = int(rng.choice([64, 96, 128, 192])), int(rng.choice([64, 80, 128, 192]))
    M, N = bm * int(rng.integers(1, 4)), bn * int(rng.integers(1, 4))
    K = 64 * int(rng.integers(1, 7))
    ldc, ldy = N + int(rng.choice([0, 4, 1])), N + int(rng.choice([0, 3]))
    act = str(rng.choice(sorted(ACTS)))
    alpha, beta = float(rng.choice([1.0, 0.5])), float(rng.choice([0.0, 0.25, -1.0]))
    print(f"M={M} N={N} K={K} blocks {bm} x {bn} C {c_dtype} ldc {ldc} ldy {ldy} {act} "
          f"alpha {alpha} beta {beta} tma {tma}")
    rec = Recorder({"A": "bf16", "B": "bf16", "C": c_dtype, "bias": "f32", "Y": "bf16"})
    task = 0
    for i in range(0, M, bm):
        for j in range(0, N, bn):
            rec.at((0,), (task,))
            task += 1
            blk = gemm.Block(bm, bn, 64, lda=K, ldb=N, ldc=ldc, dtype="bf16", c_dtype=c_dtype,
                             alpha=alpha, beta=beta)
            ops = () if c_dtype == "bf16" else (
                epilogue.bias("bias", j), epilogue.Op(act), epilogue.store_bf16("Y", i * ldy + j, ldy))
            rec.gemm(blk, "A", [i * K + k for k in range(0, K, 64)], "B",
                     [k * N + j for k in range(0, K, 64)], "C", i * ldc + j, ops=ops)
    p = rec.finish()
    A = torch.randn(M, K, device="cuda").bfloat16()
    B = torch.randn(K, N, device="cuda").bfloat16()
    bias = torch.randn(N, device="cuda")
    C0 = torch.randn(M, ldc, device="cuda")
    C0 = C0.bfloat16() if c_dtype == "bf16" else C0
    Y0 = torch.randn(M, ldy, device="cuda").bfloat16()
    monkeypatch.setattr(cuda, "tma_loads", tma)
    monkeypatch.setattr(cuda, "max_cluster", 1 if tma else 8)  # the TMA path takes unsplit launches
    monkeypatch.setattr(cuda, "tma_parts", True)  # and tiles dealt over blocks too, here
    outs = []
    for vec in (False, True):
        monkeypatch.setattr(cuda, "vec_stores", vec)
        C, Y = C0.clone(), Y0.clone()
        p.run(backend="cuda", A=A, B=B, C=C, bias=bias, Y=Y)
        outs.append((C.float().cpu().numpy(), Y.float().cpu().numpy()))
    print(p.replay("cuda").tables.launch_details(True))
    assert p.replay("cuda").tables.launch_details(True)[0].entry.endswith("_tma") == tma
    for x, y in zip(*outs):
        np.testing.assert_array_equal(y, x)
    got, got_y = outs[1]
    c0 = C0.double().cpu().numpy()
    ref = alpha * (A.double() @ B.double()).cpu().numpy() + beta * c0[:, :N]
    mag = abs(alpha) * (A.double().abs() @ B.double().abs()).cpu().numpy() + abs(beta * c0[:, :N])
    if c_dtype == "f32":
        ref = ACTS[act](ref + bias.double().cpu().numpy())
        tol = 1e-5 * (mag + np.abs(bias.double().cpu().numpy())) + 1e-6
        y = bf16_round(ref)
        assert np.all(np.abs(got_y[:, :N] - y) <= 2.0 ** -7 * np.abs(y) + tol)
        np.testing.assert_array_equal(got_y[:, N:], Y0.float().cpu().numpy()[:, N:])
    else:
        tol = 2.0 ** -7 * (mag + np.abs(ref))
    assert np.all(np.abs(got[:, :N] - ref) <= tol)
    np.testing.assert_array_equal(got[:, N:], C0.float().cpu().numpy()[:, N:])  # untouched


@pytest.mark.parametrize("trial", range(4))
def test_vec_stores_fc_forward(rng, monkeypatch, trial):
    """A random FC forward with bias, ReLU and a bf16 copy (the ops in
    registers) on the library's CUDA blocks: the same bits with vec_stores on
    and off, cp.async and TMA."""
    torch = pytest.importorskip("torch")
    cuda = tensor_cores()
    N, C, K = (64 * int(rng.integers(1, 9)) for _ in range(3))
    tma = bool(trial % 2)
    print(f"N={N} C={C} K={K} tma {tma}")
    g = fc.geometry(N, C, K, path="cuda")
    p = fc.plan(g, "fwd", "bf16", has_bias=True, activation="relu", bf16_out=True)
    ins = fc_inputs(torch, g, p)
    monkeypatch.setattr(cuda, "tma_loads", tma)
    monkeypatch.setattr(cuda, "tma_parts", True)
    outs = []
    for vec in (False, True):
        monkeypatch.setattr(cuda, "vec_stores", vec)
        out = nan_outputs(torch, p)
        p.run(backend="cuda", **ins, **out)
        outs.append({name: t.float().cpu().numpy() for name, t in out.items()})
    print(p.replay("cuda").tables.launch_details(True))
    for name in p.written:
        assert not np.isnan(outs[1][name]).any(), name
        np.testing.assert_array_equal(outs[1][name], outs[0][name])
