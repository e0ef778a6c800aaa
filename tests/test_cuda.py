"""The CUDA backend's own promises (the kernel contract and the primitives run
on it through the `backend` fixture elsewhere; one launch per phase, no
libxsmm, resident arrays and their errors in test_device_backends.py):
device tensors of PyTorch used in place (DLPack), CUDA-graph capture, the
tensor-core path against PyTorch, and clear errors for torch tensors.
Skipped where there is no GPU (CI); benchmarks/device_gpu.sh runs them."""
import numpy as np
import pytest

import brgemm
from primitives import fc, gemm
from cuda_support import check_fc, fc_inputs, nan_outputs, random_fc_plan

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


def launch_shapes(p):
    """(entry point, cluster size) of each phase of a plan that ran on "cuda"."""
    return p._replays["cuda"].tables.launches(True)


@pytest.mark.parametrize("cluster", [2, 3, 5, 8])
def test_split_reductions_over_clusters(rng, monkeypatch, cluster):
    """Few tasks with long reductions run as clusters that share each tile's
    k-steps and sum their partial tiles in rank order: the same result as
    float64 within f32 accumulation, bit for bit the same on every run, also
    with ragged rows and columns, several calls per task (beta 1), on either
    entry point for 64-row tiles."""
    if not cuda.has_tensor_cores():
        pytest.skip("this GPU has no wgmma path (sm_90a)")
    chosen = cuda._entry_and_cluster  # the entry point as chosen, the cluster size forced
    monkeypatch.setattr(cuda, "_entry_and_cluster", lambda phase, allow_tc:
                        (chosen(phase, allow_tc)[0], cluster))
    monkeypatch.setattr(cuda, "small_tiles", [None, True, False][rng.integers(3)])
    monkeypatch.setattr(cuda, "split_tiles", False)  # its own launch: test_small_problem_path
    bm = int(rng.choice([64, 128]))
    M = int(rng.integers(1, bm + 1)) + bm * int(rng.integers(0, 2))
    N = int(rng.integers(1, 17)) * 8
    bk = int(rng.choice([64, 128]))
    K = bk * 2 * int(rng.integers(4, 12))
    kc = K if rng.integers(2) else K // 2  # two accumulating calls per task
    print(f"M={M} N={N} K={K} bm={bm} bk={bk} kc={kc} small_tiles={cuda.small_tiles}")
    A = torch.randn(M, K, device="cuda").bfloat16()
    B = torch.randn(K, N, device="cuda").bfloat16()
    p = gemm.plan(M, N, K, "bf16", gemm_cfg(bm, 128, bk, kc))
    p._replays.pop("cuda", None)  # launch choices are remembered per replay: start afresh
    outs = []
    for _ in range(2):
        C = torch.full((M, N), float("nan"), device="cuda")
        p.run(backend="cuda", A=A, B=B, C=C)
        outs.append(C)
    torch.cuda.synchronize()
    print(launch_shapes(p))
    assert all(c == cluster for _, c in launch_shapes(p))
    a64, b64 = A.double().cpu().numpy(), B.double().cpu().numpy()
    got = outs[0].cpu().numpy()
    err = np.abs(got - a64 @ b64)
    tol = 1e-5 * (np.abs(a64) @ np.abs(b64)) + 1e-30
    print(f"worst err/tol {np.max(err / tol):.3f}")
    assert np.all(err <= tol)
    np.testing.assert_array_equal(outs[1].cpu().numpy(), got)


def test_split_reductions_with_epilogue_ops(rng, monkeypatch):
    """A split forward layer with bias and ReLU in its epilogue and a bf16 copy
    of y: each rank finishes its rows with the ops, as one block would."""
    if not cuda.has_tensor_cores():
        pytest.skip("this GPU has no wgmma path (sm_90a)")
    monkeypatch.setattr(cuda, "max_cluster", int(rng.integers(2, 9)))
    N, C, K = int(rng.integers(1, 65)), 64 * int(rng.integers(16, 40)), 64
    print(f"N={N} C={C} K={K} max_cluster={cuda.max_cluster}")
    g = fc.geometry(N, C, K, config={"fwd": {"spec": "NKc", "chunk": 1 << 20}},
                    blocks=(64, 64, 64))
    p = fc.plan(g, "fwd", "bf16", has_bias=True, activation="relu", bf16_out=True)
    x = torch.randn(g.Nb, g.Cb, g.bn, g.bc, device="cuda").bfloat16()
    w = torch.randn(g.Kb, g.Cb, g.bc, g.bk, device="cuda").bfloat16()
    b = torch.randn(K, device="cuda")
    y = torch.full((g.Nb, g.Kb, g.bn, g.bk), float("nan"), device="cuda")
    y16 = torch.zeros(g.Nb, g.Kb, g.bn, g.bk, device="cuda").bfloat16()
    p.run(backend="cuda", x=x, w=w, b=b, y=y, y16=y16)
    torch.cuda.synchronize()
    assert any(c > 1 for _, c in launch_shapes(p))
    xs = x.double().permute(0, 2, 1, 3).reshape(g.Nb * g.bn, g.Cb * g.bc).cpu().numpy()
    ws = w.double().reshape(g.Cb * g.bc, g.bk).cpu().numpy()  # Kb is 1
    ref = np.maximum(xs @ ws + b.double().cpu().numpy(), 0)
    tol = 1e-5 * (np.abs(xs) @ np.abs(ws)) + 1e-30 + 2.0 ** -23 * np.abs(ref)
    got = y.reshape(g.Nb * g.bn, g.bk).cpu().numpy()
    assert np.all(np.abs(got - ref) <= tol)
    np.testing.assert_array_equal(y16.reshape(g.Nb * g.bn, g.bk).float().cpu().numpy(),
                                  torch.from_numpy(got).bfloat16().float().numpy())


def random_plan(rng, tasks, c_dtype):
    """A phase of `tasks` one-call tasks on disjoint C blocks of random shapes,
    the first over 64 rows and 128 columns (rows past 128 and columns past
    256: several tiles a call; k not a multiple of 64; 1-3 blocks a call;
    padded strides; random alpha and beta); returns the plan and each call's
    (block, A offsets, B offsets, C offset)."""
    from brgemm import plan as P
    rec = P.Recorder({"A": "bf16", "B": "bf16", "C": c_dtype})
    calls, a_at, b_at, c_at = [], 0, 0, 0
    for t in range(tasks):
        m = int(rng.integers(65 if t == 0 else 1, 300))
        n = 8 * int(rng.integers(17 if t == 0 else 1, 41))
        kb, count = 8 * int(rng.integers(1, 25)), int(rng.integers(1, 4))
        lda, ldb, ldc = (v + 8 * int(rng.integers(0, 2)) for v in (kb, n, n))
        blk = P.Block(m, n, kb, lda=lda, ldb=ldb, ldc=ldc, dtype="bf16", c_dtype=c_dtype,
                      alpha=float(rng.choice([1.0, 0.5])), beta=float(rng.choice([0.0, 1.0, -0.5])))
        a_offs = [a_at + i * m * lda for i in range(count)]
        b_offs = [b_at + i * kb * ldb for i in range(count)]
        rec.at((0,), (t,))
        rec.gemm(blk, "A", a_offs, "B", b_offs, "C", c_at)
        calls.append((blk, a_offs, b_offs, c_at))
        a_at += count * m * lda
        b_at += count * kb * ldb
        c_at += -(-m * ldc // 8) * 8
    return rec.finish(), calls


@pytest.mark.parametrize("trial", range(6))
def test_wide_tiles_random_plans(rng, monkeypatch, trial):
    """A phase with C blocks over 64 rows and 128 columns runs on 128 x 256
    tiles: random shapes (ragged rows and columns, narrower blocks in the same
    phase), strides, counts, alpha, beta over C's old values, f32 or bf16 C;
    against float64, and C untouched outside the blocks."""
    if not cuda.has_tensor_cores():
        pytest.skip("this GPU has no wgmma path (sm_90a)")
    monkeypatch.setattr(cuda, "max_cluster", 1)  # split phases keep 128 x 128 tiles
    monkeypatch.setattr(cuda, "split_tiles", False)  # few one-call tasks: the small-problem path's
    c_dtype = ("f32", "bf16")[trial % 2]
    tasks = int(rng.integers(1, 24))
    print(f"tasks={tasks} C {c_dtype}")
    p, calls = random_plan(rng, tasks, c_dtype)
    A = torch.randn(max(p.extent["A"], 1), device="cuda").bfloat16()
    B = torch.randn(max(p.extent["B"], 1), device="cuda").bfloat16()
    C0 = torch.randn(max(p.extent["C"], 1), device="cuda")
    C0 = C0.bfloat16() if c_dtype == "bf16" else C0
    C = C0.clone()
    p.run(backend="cuda", A=A, B=B, C=C)
    torch.cuda.synchronize()
    print(launch_shapes(p))
    assert launch_shapes(p) == [("tc_wide", 1)]
    a, b = A.double().cpu().numpy(), B.double().cpu().numpy()
    ref, got = C0.double().cpu().numpy(), C.double().cpu().numpy()
    tol = np.zeros_like(ref)
    for blk, a_offs, b_offs, c_at in calls:
        m, n, k = blk.m, blk.n, blk.k
        acc, mag = np.zeros((m, n)), np.zeros((m, n))
        for ao, bo in zip(a_offs, b_offs):
            ab = np.lib.stride_tricks.as_strided(a[ao:], (m, k), (blk.lda * 8, 8))
            bb = np.lib.stride_tricks.as_strided(b[bo:], (k, n), (blk.ldb * 8, 8))
            acc += ab @ bb
            mag += np.abs(ab) @ np.abs(bb)
        rows = np.lib.stride_tricks.as_strided(ref[c_at:], (m, n), (blk.ldc * 8, 8))
        want = blk.alpha * acc + blk.beta * rows
        bound = 1e-5 * abs(blk.alpha) * mag + 2.0 ** -23 * np.abs(want) + 1e-30
        if c_dtype == "bf16":  # one rounding to bf16 at the store
            bound += 2.0 ** -8 * (np.abs(want) + bound)
        rows[...] = want  # (a view of ref)
        np.lib.stride_tricks.as_strided(tol[c_at:], (m, n), (blk.ldc * 8, 8))[...] = bound
    err = np.abs(got - ref)
    print(f"worst err/tol {np.max(err / np.maximum(tol, 1e-300)):.3f}")
    assert np.all(err <= tol)  # outside the blocks tol is 0: C as it was


@pytest.mark.parametrize("pass_", ["fwd", "upd"])
def test_wide_tiles_fc(rng, monkeypatch, pass_):
    """FC passes with 256-column output blocks on 128 x 256 tiles: the forward
    with bias, ReLU and a bf16 copy of y (the per-element epilogue), the
    weight update; against float64 of the blocked inputs."""
    if not cuda.has_tensor_cores():
        pytest.skip("this GPU has no wgmma path (sm_90a)")
    monkeypatch.setattr(cuda, "max_cluster", 1)
    monkeypatch.setattr(cuda, "split_tiles", False)  # few blocks: the small-problem path's
    blocks = (128, 128, int(rng.choice([192, 256])))
    N, C, K = (b * int(rng.integers(1, 4)) for b in blocks)
    print(f"N={N} C={C} K={K} blocks {blocks}")
    cfg = {p: {"spec": s, "chunk": 1 << 20} for p, s in (("fwd", "NKc"), ("upd", "KCn"))}
    g = fc.geometry(N, C, K, config=cfg, blocks=blocks)
    if pass_ == "fwd":
        p = fc.plan(g, "fwd", "bf16", has_bias=True, activation="relu", bf16_out=True)
        x = torch.randn(g.Nb, g.Cb, g.bn, g.bc, device="cuda").bfloat16()
        w = torch.randn(g.Kb, g.Cb, g.bc, g.bk, device="cuda").bfloat16()
        b = torch.randn(g.Kb * g.bk, device="cuda")
        out = torch.full((g.Nb, g.Kb, g.bn, g.bk), float("nan"), device="cuda")
        y16 = torch.zeros(g.Nb, g.Kb, g.bn, g.bk, device="cuda").bfloat16()
        p.run(backend="cuda", x=x, w=w, b=b, y=out, y16=y16)
        xd, wd = x.double().cpu().numpy(), w.double().cpu().numpy()
        ref = np.einsum("ncij,kcjl->nkil", xd, wd)
        mag = np.einsum("ncij,kcjl->nkil", np.abs(xd), np.abs(wd))
        ref = np.maximum(ref + b.double().cpu().numpy().reshape(g.Kb, 1, g.bk), 0)
    else:
        p = fc.plan(g, "upd", "bf16")
        xt = torch.randn(g.Cb, g.Nb, g.bc, g.bn, device="cuda").bfloat16()
        dy = torch.randn(g.Nb, g.Kb, g.bn, g.bk, device="cuda").bfloat16()
        out = torch.full((g.Kb, g.Cb, g.bc, g.bk), float("nan"), device="cuda")
        p.run(backend="cuda", xt=xt, dy=dy, dw=out)
        xd, dyd = xt.double().cpu().numpy(), dy.double().cpu().numpy()
        ref = np.einsum("cnij,nkjl->kcil", xd, dyd)
        mag = np.einsum("cnij,nkjl->kcil", np.abs(xd), np.abs(dyd))
    torch.cuda.synchronize()
    print(launch_shapes(p))
    assert launch_shapes(p) == [("tc_wide", 1)]
    got = out.cpu().numpy()
    tol = 1e-5 * mag + 2.0 ** -23 * np.abs(ref) + 1e-30
    print(f"worst err/tol {np.max(np.abs(got - ref) / tol):.3f}")
    assert np.all(np.abs(got - ref) <= tol)
    if pass_ == "fwd":
        np.testing.assert_array_equal(y16.float().cpu().numpy(),
                                      torch.from_numpy(got).bfloat16().float().numpy())


@pytest.mark.parametrize("trial", range(8))
def test_small_problem_path(rng, monkeypatch, trial):
    """FC passes of few output blocks on the small-problem path, its choice or
    forced (tiles up to 128 x 128 dealt out over several clusters per task,
    k-steps split within a cluster, the block shape in the launch argument or
    not): the forward with bias, ReLU and a bf16 copy, the backward and the
    update, against float64, bit for bit the same on a second run."""
    if not cuda.has_tensor_cores():
        pytest.skip("this GPU has no wgmma path (sm_90a)")
    tm, tn = (int(rng.choice([64, 128])) for _ in range(2))
    size = int(rng.choice([1, 2, 3, 4]))
    entry = "tc_small" if tm == 64 and rng.integers(2) else ("tc_split" if size > 1 else "tc")
    forced = (tm, tn, size, entry) if trial % 4 else None
    monkeypatch.setattr(cuda, "split_tiles", forced)
    monkeypatch.setattr(cuda, "uniform_args", bool(trial % 3))
    monkeypatch.setattr(cuda, "programmatic_launch", bool(trial % 2))
    pass_ = ("fwd", "bwd", "upd")[trial % 3]
    print(f"forced {forced} uniform {cuda.uniform_args}")
    g, p = random_fc_plan(rng, pass_, 3)
    ins = fc_inputs(torch, g, p)
    outs = []
    for _ in range(2):
        out = nan_outputs(torch, p)
        p.run(backend="cuda", **ins, **out)
        outs.append(out)
    torch.cuda.synchronize()
    shape = p._replays["cuda"].tables.launch_details(True)
    print(shape)
    assert len(shape) == 1
    if forced is not None:
        assert shape[0].tile == (tm, tn) and shape[0].cluster == size
    check_fc(g, pass_, ins, outs[0])
    for name in p.written:
        np.testing.assert_array_equal(outs[1][name].float().cpu().numpy(),
                                      outs[0][name].float().cpu().numpy())
    if pass_ == "fwd":
        np.testing.assert_array_equal(outs[0]["y16"].float().cpu().numpy(),
                                      outs[0]["y"].bfloat16().float().cpu().numpy())


@pytest.mark.parametrize("small_path, clustered, tma", [(True, True, False), (False, True, False),
                                                      (True, False, False), (True, True, True)])
def test_programmatic_launch_chain(rng, monkeypatch, small_path, clustered, tma):
    """Layers run back to back on one stream, each reading the bf16 output the
    launch before it wrote (programmatic launch: each may start before the
    previous one ends and must wait before its first read): every layer
    matches float64 of its own input, on the small-problem path and off it,
    clustered launches programmatic or not, on the TMA path or not."""
    if not cuda.has_tensor_cores():
        pytest.skip("this GPU has no wgmma path (sm_90a)")
    monkeypatch.setattr(cuda, "split_tiles", None if small_path else False)
    monkeypatch.setattr(cuda, "clustered_pdl", clustered)
    monkeypatch.setattr(cuda, "tma_loads", tma)
    N, C = 64 * int(rng.integers(1, 5)), 128 * int(rng.integers(1, 7))
    print(f"N={N} C=K={C} small path {small_path} clustered PDL {clustered} TMA {tma}")
    g = fc.geometry(N, C, C, config={"fwd": {"spec": "NKc", "chunk": 1 << 20}},
                    blocks=(64, 64, 64), path="cuda")
    p = fc.plan(g, "fwd", "bf16", activation="relu", bf16_out=True)
    layers = 6
    xs = [torch.randn(g.Nb, g.Cb, g.bn, g.bc, device="cuda").bfloat16()]
    ws = [(torch.randn(g.Kb, g.Cb, g.bc, g.bk, device="cuda") / C ** 0.5).bfloat16()
          for _ in range(layers)]
    ys = [torch.full((g.Nb, g.Kb, g.bn, g.bk), float("nan"), device="cuda")
          for _ in range(layers)]
    xs += [torch.full((g.Nb, g.Kb, g.bn, g.bk), float("nan"), device="cuda").bfloat16()
           for _ in range(layers)]
    for i in range(layers):  # no synchronization in between
        p.run(backend="cuda", x=xs[i], w=ws[i], y=ys[i], y16=xs[i + 1])
    torch.cuda.synchronize()
    for i in range(layers):
        xd, wd = xs[i].double().cpu().numpy(), ws[i].double().cpu().numpy()
        ref = np.maximum(np.einsum("ncij,kcjl->nkil", xd, wd), 0)
        tol = 1e-5 * np.einsum("ncij,kcjl->nkil", np.abs(xd), np.abs(wd)) + 1e-30
        assert np.all(np.abs(ys[i].cpu().numpy() - ref) <= tol), f"layer {i}"


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
