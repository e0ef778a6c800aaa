"""The CUDA backend's own promises (the kernel contract and the primitives run
on it through the `backend` fixture elsewhere; one launch per phase, no
libxsmm, resident arrays and their errors in test_device_backends.py):
device tensors of PyTorch used in place (DLPack), CUDA-graph capture, the
tensor-core path against PyTorch, and clear errors for torch tensors.
Skipped where there is no GPU (CI); benchmarks/device_gpu.sh runs them."""
import numpy as np
import pytest

import brgemm
from primitives import gemm

if "cuda" not in brgemm.backends():
    pytest.skip("no CUDA device here", allow_module_level=True)

from brgemm.backend import cuda  # noqa: E402

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("PyTorch has no CUDA here", allow_module_level=True)


def rand(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def bound(A, B, rel):
    """Per-element tolerance: rel of sum |a| |b| (f32 accumulation)."""
    return rel * (np.abs(A.astype(np.float64)) @ np.abs(B.astype(np.float64))) + 1e-30


def gemm_cfg(bm, bn, bk, kc, spec="IJk"):
    return {"fwd": {"spec": spec, "bm": bm, "bn": bn, "bk": bk, "kc": kc}}


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_torch_tensors_in_place(rng, dtype):
    """PyTorch CUDA tensors go in through DLPack: C is written in place, the
    result matches torch.matmul on the same device."""
    M, N, K = (int(v) for v in rng.integers(1, 9, 3) * 32 + rng.integers(0, 2, 3) * 8)
    print(f"M={M} N={N} K={K} {dtype}")
    tdt = torch.float32 if dtype == "f32" else torch.bfloat16
    A = torch.randn(M, K, device="cuda").to(tdt)
    B = torch.randn(K, N, device="cuda").to(tdt)
    C = torch.full((M, N), float("nan"), device="cuda")
    p = gemm.plan(M, N, K, dtype, gemm_cfg(64, 64, 32, 4096))
    for _ in range(2):
        p.run(backend="cuda", A=A, B=B, C=C)
    torch.cuda.synchronize()
    a64, b64 = A.double().cpu().numpy(), B.double().cpu().numpy()
    ref = a64 @ b64
    tol = 1e-5 * (np.abs(a64) @ np.abs(b64)) + 1e-30
    assert np.all(np.abs(C.cpu().numpy() - ref) <= tol)
    # and PyTorch's f32 product of the same values is as close (no TF32 by default)
    got = torch.matmul(A.float(), B.float()).cpu().numpy()
    assert np.all(np.abs(C.cpu().numpy() - got) <= 2 * tol)


@pytest.mark.parametrize("trial", range(6))
def test_tensor_core_path_random_shapes(rng, trial):
    """bf16 plans on the wgmma path (k, n multiples of 8), ragged m and edges,
    several blocks per call, vs float64 of the same bf16 inputs."""
    if not cuda.has_tensor_cores():
        pytest.skip("this GPU has no wgmma path (sm_90a)")
    bm, bn = (int(rng.choice([64, 96, 128, 192])) for _ in range(2))
    bn -= bn % 8
    bk = int(rng.choice([16, 40, 64, 128]))
    M, N = int(rng.integers(1, 400)), int(rng.integers(1, 50)) * 8
    K = bk * int(rng.integers(1, 6))
    print(f"M={M} N={N} K={K} blocks {bm}x{bn}x{bk}")
    A = torch.randn(M, K, device="cuda").bfloat16()
    B = torch.randn(K, N, device="cuda").bfloat16()
    C = torch.full((M, N), float("nan"), device="cuda")
    p = gemm.plan(M, N, K, "bf16", gemm_cfg(bm, bn, bk, K))
    p.run(backend="cuda", A=A, B=B, C=C)
    torch.cuda.synchronize()
    a64, b64 = A.double().cpu().numpy(), B.double().cpu().numpy()
    err = np.abs(C.cpu().numpy() - a64 @ b64)
    tol = 1e-5 * (np.abs(a64) @ np.abs(b64)) + 1e-30
    print(f"worst err/tol {np.max(err / tol):.3f}")
    assert np.all(err <= tol)


def test_misaligned_tensors_take_the_generic_path(rng):
    """A bf16 tensor that starts 2 bytes off a 16-byte boundary cannot feed
    16-byte copies: the launch falls back to the generic path, same result."""
    M, N, K = 96, 64, 128
    A = torch.randn(M * K + 1, device="cuda").bfloat16()[1:].view(M, K)
    B = torch.randn(K, N, device="cuda").bfloat16()
    C = torch.full((M, N), float("nan"), device="cuda")
    assert A.data_ptr() % 16
    gemm.plan(M, N, K, "bf16", gemm_cfg(64, 64, 64, K)).run(backend="cuda", A=A, B=B, C=C)
    torch.cuda.synchronize()
    ref = A.double() @ B.double()
    assert bool(((C.double() - ref).abs() <= 1e-5 * (A.double().abs() @ B.double().abs())).all())


def test_vnni_b_blocks(rng):
    """A plan recorded with B tiles in VNNI pairs (as the CPU's AMX path keeps
    them) reads them as pairs on the GPU too (the generic path)."""
    from brgemm import plan as P
    from brgemm.vnni import vnni_tiles
    M, N, kb, count = 48, 40, 32, 3
    A = rand(rng, M, kb * count).astype(brgemm.bfloat16)
    B = rand(rng, count, kb, N).astype(brgemm.bfloat16)
    rec = P.Recorder({"A": "bf16", "B": "bf16", "C": "f32"})
    rec.at((), ())
    rec.gemm(P.Block(M, N, kb, lda=kb * count, ldb=N, ldc=N, dtype="bf16", beta=0.0, b_vnni=True),
             "A", [i * kb for i in range(count)], "B", [i * kb * N for i in range(count)], "C", 0)
    C = np.full((M, N), np.nan, np.float32)
    rec.finish().run(backend="cuda", A=A, B=vnni_tiles(B), C=C)
    a64 = A.astype(np.float64)
    ref = sum(a64[:, i * kb:(i + 1) * kb] @ B[i].astype(np.float64) for i in range(count))
    mag = sum(np.abs(a64[:, i * kb:(i + 1) * kb]) @ np.abs(B[i].astype(np.float64))
              for i in range(count))
    assert np.all(np.abs(C - ref) <= 1e-5 * mag)


def test_cuda_graph_capture(rng):
    """A replay on PyTorch's stream can be captured in a CUDA graph and
    replayed on new inputs."""
    M, N, K = 128, 192, 256
    A = torch.randn(M, K, device="cuda").bfloat16()
    B = torch.randn(K, N, device="cuda").bfloat16()
    C = torch.zeros(M, N, device="cuda")
    p = gemm.plan(M, N, K, "bf16", gemm_cfg(64, 64, 64, 128, "k|IJ"))
    p.run(backend="cuda", A=A, B=B, C=C)  # warm: tables uploaded outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        p.run(backend="cuda", A=A, B=B, C=C)
    A.copy_(torch.randn(M, K, device="cuda").bfloat16())
    C.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    ref = A.double() @ B.double()
    tol = 1e-5 * (A.double().abs() @ B.double().abs())
    assert bool(((C.double() - ref).abs() <= tol).all())


def test_bad_torch_tensors_are_named(rng):
    """PyTorch tensors that cannot be a plan's tensors, refused by name (the
    DeviceArray cases: test_device_backends.py)."""
    p = gemm.plan(8, 8, 8, "f32", None)
    A, B = rand(rng, 8, 8), rand(rng, 8, 8)
    with pytest.raises(TypeError, match="^C: expected a float32 or bfloat16 tensor"):
        p.run(backend="cuda", A=A, B=B, C=torch.zeros(8, 8, device="cuda", dtype=torch.float16))
    with pytest.raises(ValueError, match="^C: a plan reads tensors as flat buffers"):
        p.run(backend="cuda", A=A, B=B, C=torch.zeros(8, 16, device="cuda")[:, ::2])
    with pytest.raises(ValueError, match="^C: is on DLPack device"):
        p.run(backend="cuda", A=A, B=B, C=torch.zeros(8, 8))
    shared = torch.zeros(8, 8, device="cuda")
    with pytest.raises(ValueError, match="^C: overlaps A"):
        p.run(backend="cuda", A=shared, B=B, C=shared)
