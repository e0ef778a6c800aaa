"""The CUDA backend's TMA path (kernels/cuda/tma_tile.cuh, brgemm/backend/
_cuda_tma.py): which phases qualify (runs anywhere), and on an sm_90a GPU
the same results as the cp.async path, bit for bit, and as float64 within
the f32 accumulation's bound, on random FC plans and GEMM-shaped ones."""
import dataclasses

import numpy as np
import pytest

from brgemm.backend import _cuda_tma
from cuda_support import check_fc, fc_inputs, nan_outputs, random_fc_plan
from primitives import fc, gemm


def operands_of(p):
    """_cuda_tma.phase_operands of a plan, every call taken as a tensor-core one."""
    from brgemm.backend import cuda
    paths = np.ones(len(p.calls), np.uint8)
    phases = cuda._phase_shapes(p.blocks, p.calls, paths, p.task_begin, p.phase_begin, 1, 2)
    a, b = p.byte_offsets()
    return _cuda_tma.phase_operands(p.blocks, p.calls, a, b, [int(x) for x in p.phase_begin],
                                    [p.extent[n] for n in p.tensors],
                                    [ph["kernel"] for ph in phases])


def test_which_phases_qualify():
    """Runs anywhere: every bf16 FC pass on the library's cuda blocks
    qualifies (one tensor each for A and B, whole rows); k not a multiple of
    64, several calls per task, or A blocks that wrap a row of the view do not."""
    for N, C, K in ((256, 1024, 1024), (256, 768, 3072), (1024, 1024, 1024)):
        g = fc.geometry(N, C, K, path="cuda")
        for pass_ in ("fwd", "bwd", "upd"):
            (ops,) = operands_of(fc.plan(g, pass_, "bf16"))
            assert ops is not None and ops["a"] != ops["b"], (N, C, K, pass_)
    cfg = {"fwd": {"spec": "IJk", "bm": 128, "bn": 128, "bk": 32, "kc": 512}}
    assert operands_of(gemm.plan(512, 512, 512, "bf16", cfg)) == [None]  # k 32, 16 calls a task
    cfg["fwd"].update(bk=64, kc=512)
    (ops,) = operands_of(gemm.plan(512, 384, 512, "bf16", cfg))
    assert ops == dict(a=0, b=1, lda=512, ldb=384, a_rows=512, b_rows=512)
    p = gemm.plan(512, 384, 512, "bf16", cfg)
    p.blocks[0] = dataclasses.replace(p.blocks[0], lda=480)  # k 448 + 64 > 480: a row wraps
    assert operands_of(p) == [None]


cuda_only = pytest.mark.skipif("cuda" not in __import__("brgemm").backends(),
                               reason="no CUDA device here")


def pin_cp_async(monkeypatch, ln):
    """From here on, one-phase plans launch on cp.async with the tiles,
    clusters and parts of the TMA Launch ln (on TMA the small-problem path
    chooses by a model of its own, so the two paths' choices may differ)."""
    from brgemm.backend import cuda
    base = {tma: entry for (entry, _), tma in _cuda_tma.TMA_ENTRY.items()}[ln.entry]
    monkeypatch.setattr(cuda, "_launch_shape", lambda phase, allow_tc: ln._replace(entry=base))


@cuda_only
@pytest.mark.parametrize("trial", range(8))
def test_tma_path_matches_cp_async(rng, monkeypatch, trial):
    """Random FC passes (forward with bias, ReLU and a bf16 copy) on the TMA
    entries, alone or persistent, small-problem path or not: the same bits
    as the cp.async path's launch of the same tiles, and float64 within the
    bound."""
    torch = pytest.importorskip("torch")
    from brgemm.backend import cuda
    if not cuda.has_tensor_cores():
        pytest.skip("this GPU has no wgmma path (sm_90a)")
    monkeypatch.setattr(cuda, "max_cluster", 1)  # the TMA path takes unsplit launches
    monkeypatch.setattr(cuda, "tma_parts", True)  # and tiles dealt over blocks too, here
    monkeypatch.setattr(cuda, "small_tiles", (None, True)[trial % 2])
    monkeypatch.setattr(cuda, "split_tiles", (None, False)[trial // 2 % 2])
    persistent = bool(trial // 4)
    pass_ = ("fwd", "bwd", "upd")[trial % 3]
    print(f"persistent {persistent}")
    g, p = random_fc_plan(rng, pass_, 4)
    ins = fc_inputs(torch, g, p)
    outs, entries = [], []
    for tma in (True, False):  # TMA first, then its tiles on cp.async
        monkeypatch.setattr(cuda, "tma_loads", tma)
        monkeypatch.setattr(cuda, "tma_persistent", persistent)
        if not tma:
            pin_cp_async(monkeypatch, entries[0])
        out = nan_outputs(torch, p)
        p.run(backend="cuda", **ins, **out)
        outs.insert(0, out)
        entries.insert(0, p.replay("cuda").tables.launch_details(True)[0])
    torch.cuda.synchronize()
    print(entries)
    assert entries[1].entry == entries[0].entry + "_tma"
    assert entries[1][1:] == entries[0][1:]
    for name in p.written:
        np.testing.assert_array_equal(outs[1][name].float().cpu().numpy(),
                                      outs[0][name].float().cpu().numpy())
    check_fc(g, pass_, ins, outs[1])


def check_gemm_plan(monkeypatch, M, N, K, bm, bn, c_dtype):
    """C = 0.5 A @ B + 0.25 C as a GEMM-shaped plan of bm x bn blocks of
    64-deep k (m and n need not be multiples of the tile: the boxes read rows
    and columns past the block, whose results are dropped) on the TMA path:
    bit for bit as the cp.async path on the same tiles and clusters, and
    float64 within the bound. Returns the TMA launch."""
    torch = pytest.importorskip("torch")
    from brgemm.backend import cuda
    from brgemm.recorder import Recorder
    print(f"M={M} N={N} K={K} blocks {bm} x {bn} C {c_dtype}")
    rec = Recorder({"A": "bf16", "B": "bf16", "C": c_dtype})
    task = 0
    for i in range(0, M, bm):
        for j in range(0, N, bn):
            rec.at((0,), (task,))
            task += 1
            blk = gemm.Block(bm, bn, 64, lda=K, ldb=N, ldc=N, dtype="bf16",
                             c_dtype=c_dtype, alpha=0.5, beta=0.25)
            rec.gemm(blk, "A", [i * K + k for k in range(0, K, 64)], "B",
                     [k * N + j for k in range(0, K, 64)], "C", i * N + j)
    p = rec.finish()
    A = torch.randn(M, K, device="cuda").bfloat16()
    B = torch.randn(K, N, device="cuda").bfloat16()
    C0 = torch.randn(M, N, device="cuda")
    C0 = C0.bfloat16() if c_dtype == "bf16" else C0
    monkeypatch.setattr(cuda, "tma_parts", True)  # few tasks: tiles may be dealt over blocks
    outs, launch = [], None
    for tma in (True, False):  # TMA first, then its tiles and clusters on cp.async
        monkeypatch.setattr(cuda, "tma_loads", tma)
        C = C0.clone()
        p.run(backend="cuda", A=A, B=B, C=C)
        outs.insert(0, C.float().cpu().numpy())
        ln = p.replay("cuda").tables.launch_details(True)[0]
        print(ln)
        if tma:
            assert ln.entry.endswith("_tma")
            pin_cp_async(monkeypatch, ln)
            launch = ln
    np.testing.assert_array_equal(outs[1], outs[0])
    ref = 0.5 * (A.double() @ B.double()).cpu().numpy() + 0.25 * C0.double().cpu().numpy()
    tol = (2.0 ** -7 if c_dtype == "bf16" else 1e-5) * (
        0.5 * (A.double().abs() @ B.double().abs()).cpu().numpy() + np.abs(ref)) + 1e-30
    assert np.all(np.abs(outs[1] - ref) <= tol)
    return launch


@cuda_only
@pytest.mark.parametrize("c_dtype", ["f32", "bf16"])
def test_tma_gemm_plans(rng, monkeypatch, c_dtype):
    """Random GEMM-shaped plans of one block shape, f32 or bf16 C, alpha and
    beta, on the TMA path: as the cp.async path (check_gemm_plan)."""
    from brgemm.backend import cuda
    if not cuda.has_tensor_cores():
        pytest.skip("this GPU has no wgmma path (sm_90a)")
    bm, bn = int(rng.choice([64, 96, 128, 192])), int(rng.choice([64, 80, 128, 192]))
    M, N = bm * int(rng.integers(1, 5)), bn * int(rng.integers(1, 5))
    check_gemm_plan(monkeypatch, M, N, 64 * int(rng.integers(1, 9)), bm, bn, c_dtype)


@cuda_only
@pytest.mark.parametrize("shape, want", [
    ((1024, 1024, 1024), ("tc_tma", 1, 2, (128, 64))),       # tiles dealt over two blocks
    ((256, 1024, 1024), ("tc_split_tma", 2, 4, (64, 64))),   # 64-row tiles in clusters, dealt
    ((3072, 768, 256), ("tc_small_tma", 1, 2, (64, 128)))])  # over one round: two blocks an SM
def test_tma_small_path_launches(monkeypatch, shape, want):
    """The launches the TMA model of the small-problem path takes on the H200
    (FC benchmark shapes as GEMM plans of 128 x 128 blocks, bf16 C): as the
    cp.async path on the same tiles, and float64."""
    from brgemm.backend import cuda
    if not cuda.has_tensor_cores() or cuda.device().sm_count != 132:
        pytest.skip("the launches asked for are the H200's (132 SMs, sm_90a)")
    assert check_gemm_plan(monkeypatch, *shape, 128, 128, "bf16") == want


# forced small-problem launches in clusters: (tile rows, columns, cluster, entry)
SPLIT_LAUNCHES = [(64, 64, 2, "tc_small"), (64, 128, 2, "tc_small"), (64, 64, 4, "tc_small"),
                  (128, 128, 2, "tc_split"), (128, 64, 4, "tc_split"), (64, 64, 2, "tc_split")]


@cuda_only
@pytest.mark.parametrize("trial", range(6))
def test_tma_split_matches_cp_async(rng, monkeypatch, trial):
    """Clustered launches that split each tile's k-steps (tma_split): the TMA
    entries in clusters give the same bits as the cp.async launch of the same
    tiles and clusters, on random FC passes (forward with bias, ReLU and a
    bf16 copy), vectorized stores or not."""
    torch = pytest.importorskip("torch")
    from brgemm.backend import cuda
    if not cuda.has_tensor_cores():
        pytest.skip("this GPU has no wgmma path (sm_90a)")
    launch = SPLIT_LAUNCHES[trial]
    pass_ = ("fwd", "bwd", "upd")[trial % 3]
    vec = bool(rng.integers(2))
    print(f"launch {launch} vec_stores {vec}")
    g, p = random_fc_plan(rng, pass_, 2)
    ins = fc_inputs(torch, g, p)
    monkeypatch.setattr(cuda, "split_tiles", launch)
    monkeypatch.setattr(cuda, "vec_stores", vec)
    monkeypatch.setattr(cuda, "tma_split", True)
    monkeypatch.setattr(cuda, "tma_parts", True)
    outs, entries = [], []
    for tma in (False, True):
        monkeypatch.setattr(cuda, "tma_loads", tma)
        out = nan_outputs(torch, p)
        p.run(backend="cuda", **ins, **out)
        outs.append({name: t.float().cpu().numpy() for name, t in out.items()})
        entries.append(p.replay("cuda").tables.launch_details(True)[0])
    torch.cuda.synchronize()
    print(entries)
    if entries[0].cluster == 1:
        pytest.skip("the small-problem path does not apply to this plan")
    assert entries[1].entry.endswith("split_tma") and entries[1][1:] == entries[0][1:]
    for name in p.written:
        assert not np.isnan(outs[1][name]).any(), name
        np.testing.assert_array_equal(outs[1][name], outs[0][name])
