"""conv.forward reading x in place (conv_in_place.reads_x_nchw, nchw_plan's
x_nchw): the kernel takes x's NCHW rows as its transposed A, taps that
reach the padding leave those pixels out, and each tile is stored into the
NCHW result from its last call; on w's blocked copy, or (nchw_copies_w,
nchw_copying_plan) on w as given, each task copying the tiles it reads; and
(nchw_x_rows, nchw_ring_plan) x's rows copied by each task into a ring of
blocked rows of its own, read as a plain A.
Against PyTorch in float64 with per-element bounds, on random layers where
the rule takes the path (strides down, padding up to (R - 1) / 2, ragged
pixel blocks, random call sizes and loop orders); the plans against their
nests run eagerly; where the rules must say no; and transposed A blocks
alone (brgemm.plan.Block's a_t) on random shapes."""
import numpy as np
import pytest

import brgemm
from brgemm import plan as P
from primitives import conv, conv_plans
from primitives.conv_forward import nchw_copying_nest, nchw_ring_nest
from test_conv import magnitude, reference


def _case(rng, copies=False, rows=False):
    R, S = int(rng.choice([1, 3, 5])), int(rng.choice([1, 3, 5]))
    ph, pw = int(rng.integers(0, (R - 1) // 2 + 1)), int(rng.integers(0, (S - 1) // 2 + 1))
    sh = int(rng.choice([1, 1, 2]))
    N, H, W = int(rng.integers(1, 4)), int(rng.integers(R, 14)), int(rng.integers(S, 40))
    bc, bk = int(rng.choice([16, 32, 64])), int(rng.choice([16, 32, 64]))
    C, K = bc * int(rng.integers(1, 4)), bk * int(rng.integers(1, 3))
    cfg = {"fwd": {"bc": bc, "bk": bk, "bq": int(rng.integers(1, 40)),
                   "call_kb": int(rng.choice([4, 32, 1024])),
                   "spec": str(rng.choice(["NKpq", "KNpq", "nKPq", "Knpq", "Nkpq"])),
                   "w_reuse": int(rng.choice([1, 3])), "nchw_x": not rows,
                   "nchw_copies_w": copies, "nchw_x_rows": rows, "columns": False}}
    print(f"N={N} C={C} K={K} H={H} W={W} R={R} S={S} stride=({sh}, 1) pad=({ph}, {pw}) {cfg}")
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = rng.standard_normal((K, C, R, S)).astype(np.float32)
    return x, w, (sh, 1), (ph, pw), cfg


@pytest.mark.parametrize("copies, rows", [(False, False), (True, False), (False, True)])
def test_forward_reads_x_in_place(rng, copies, rows):
    taken = 0
    for _ in range(10):
        x, w, st, pd, cfg = _case(rng, copies, rows)
        N, C, H, W = x.shape
        K, _, R, S = w.shape
        g = conv.geometry(N, C, K, H, W, R, S, st, pd, config=cfg)
        rule = conv.copies_x_rows if rows else conv.reads_x_nchw
        if not rule(g, "f32", "cpu", x):  # 1x1, no padding: the pointwise path
            continue
        taken += 1
        path = conv._route("fwd", (N, C, K, H, W, R, S), st, pd, cfg, "f32", "cpu", None, x,
                           w)[1]
        assert path == "pointwise" or path == (
            "nchw_r" if rows else "nchw_w" if copies else "nchw_x")
        y = conv.forward(x, w, st, pd, config=cfg)
        dy = np.zeros(y.shape, np.float32)
        want, mag = reference(x, w, dy, st, pd)[0], magnitude(x, w, dy, st, pd)[0]
        assert np.all(np.abs(y - want) <= 1e-5 * mag + 1e-30)
        # the plan alone, on NaN-filled slot buffers, against its nest run eagerly
        out = np.full((N, K, g.P, g.Q), np.nan, np.float32)
        if rows:
            _ring_plan_and_nest(g, x, w, out, want, mag)
            continue
        if copies:
            p = conv.nchw_copying_plan(g)
            run = dict(x=x, w=w, wt=np.full(p.extent["wt"], np.nan, np.float32), out=out,
                       y=np.full(p.extent["y"], np.nan, np.float32))
            p.run(**run)
            eager = dict(run, out=np.full_like(out, np.nan), y=np.full_like(run["y"], np.nan),
                         wt=np.full_like(run["wt"], np.nan))
            nchw_copying_nest(P.Eager(**eager), conv_plans._loops(g, "fwd"), g,
                              lambda n, k, pixel: (P.store_t(
                                  "out", (n * K + k * g.bk) * g.P * g.Q + pixel, g.P * g.Q),))
            np.testing.assert_allclose(out, eager["out"], rtol=0, atol=1e-5 * float(mag.max()))
            assert np.all(np.abs(out - want) <= 1e-5 * mag + 1e-30)
            continue
        p = conv.nchw_plan(g, "f32", False, x_nchw=True)
        p.run(x=x, w=conv.block_w(w, g, "f32"), out=out,
              y=np.full(p.extent["y"], np.nan, np.float32))
        ye = np.full((g.N, g.Kb, g.P, g.Q, g.bk), np.nan, np.float32)
        conv.forward_nest(P.Eager(x=x, w=conv.block_w(w, g, "f32"), y=ye),
                          conv_plans._loops(g, "fwd"), g, "f32", x_nchw=True)
        np.testing.assert_allclose(out, conv.unblock_y(ye, g, np.float32),
                                   rtol=0, atol=1e-5 * float(mag.max()))
        assert np.all(np.abs(out - want) <= 1e-5 * mag + 1e-30)
    assert taken >= 3


def _ring_plan_and_nest(g, x, w, out, want, mag):
    """nchw_ring_plan on NaN-filled rings and slots against its nest run eagerly
    (each task's tiles in slots of its own) and against the reference."""
    p = conv.nchw_ring_plan(g)
    run = dict(x=x, w=conv.block_w(w, g, "f32"), xr=np.full(p.extent["xr"], np.nan, np.float32),
               y=np.full(p.extent["y"], np.nan, np.float32), out=out)
    p.run(**run)
    eager = dict(run, out=np.full_like(out, np.nan), y=np.full_like(run["y"], np.nan),
                 xr=np.full_like(run["xr"], np.nan))
    slots, PQ = {}, g.P * g.Q
    nchw_ring_nest(P.Eager(**eager), conv_plans._loops(g, "fwd"), g,
                   lambda n, k, pixel: (P.store_t("out", (n * g.K + k * g.bk) * PQ + pixel, PQ),),
                   lambda task, j: (slots.setdefault(task, len(slots)) * g.w_reuse[0] + j)
                   * g.bq * g.bk)
    np.testing.assert_allclose(out, eager["out"], rtol=0, atol=1e-5 * float(mag.max()))
    assert np.all(np.abs(out - want) <= 1e-5 * mag + 1e-30)


def test_ring_rule(rng):
    """conv_in_place.copies_x_rows: the config's nchw_x_rows and reads_x_nchw's
    other conditions, and not where a group of tiles takes the images in turn
    (its rings would hold whole images); where both keys are on, the route
    reads x as the transposed A (nchw_x), with nchw_x off it copies the rows
    (nchw_r)."""
    x = rng.standard_normal((2, 64, 9, 11)).astype(np.float32)
    w = rng.standard_normal((64, 64, 3, 3)).astype(np.float32)
    for nchw_x, rows, want in ((True, True, "nchw_x"), (False, True, "nchw_r"),
                               (False, False, "nchw")):
        cfg = {"fwd": {"bc": 32, "bk": 32, "nchw_x": nchw_x, "nchw_x_rows": rows,
                       "columns": False}}
        g = conv.geometry(2, 64, 64, 9, 11, 3, 3, (1, 1), (1, 1), config=cfg)
        assert conv.copies_x_rows(g, "f32", "cpu", x) == rows
        assert not conv.copies_x_rows(g, "f32", "cpu", np.asfortranarray(x))
        assert not conv.copies_x_rows(g, "bf16", "cpu", x)
        assert conv._route("fwd", (2, 64, 64, 9, 11, 3, 3), (1, 1), (1, 1), cfg, "f32", "cpu",
                           None, x, w)[1] == want
    for spec, reuse, takes in (("Kpqn", 2, False), ("Kpqn", 1, True), ("NKpq", 3, True)):
        cfg = {"fwd": {"bc": 32, "bk": 32, "nchw_x": False, "spec": spec, "w_reuse": reuse}}
        g = conv.geometry(2, 64, 64, 9, 11, 3, 3, (1, 1), (1, 1), config=cfg)
        assert conv.copies_x_rows(g, "f32", "cpu", x) == takes, (spec, reuse)


@pytest.mark.parametrize("change, why", [
    ({"config": False}, "the config's nchw_copies_w off"), ({"reuse": True}, "reuse= given"),
    ({"w": "strided"}, "w not C-contiguous"), ({"w": "f64"}, "w not f32")])
def test_copying_rule_says_no(rng, change, why):
    """Where x is read in place, conv_in_place.copies_w_nchw takes w as given
    only with the config's key, no reuse= (the kept blocked copy is read
    then), and w f32 and C-contiguous; the route takes nchw_x otherwise."""
    cfg = {"fwd": {"bc": 32, "bk": 32, "columns": False,
                   "nchw_copies_w": change.get("config", True)}}
    g = conv.geometry(2, 64, 64, 9, 11, 3, 3, (1, 1), (1, 1), config=cfg)
    w = rng.standard_normal((64, 64, 3, 3)).astype(np.float32)
    if change.get("w") == "strided":
        w = np.asfortranarray(w)
    elif change.get("w") == "f64":
        w = w.astype(np.float64)
    token = object() if change.get("reuse") else None
    assert not conv.copies_w_nchw(g, token, w), why
    assert conv.copies_w_nchw(g, None, np.ascontiguousarray(w, np.float32)) == (
        change.get("config", True))


@pytest.mark.parametrize("change, why", [
    ({"sw": 2}, "stride across"), ({"pw": 2}, "padding past (S - 1) / 2"),
    ({"C": 40}, "C not whole blocks"), ({"K": 40}, "K not whole blocks"),
    ({"config": False}, "the config's nchw_x off"), ({"x": "strided"}, "x not C-contiguous"),
    ({"x": "bf16"}, "x not f32"), ({"R": 1, "S": 3, "C": 32}, "one channel block, one full tap")])
def test_rule_says_no(rng, change, why):
    d = dict(N=2, C=64, K=64, H=9, W=11, R=3, S=3, sh=1, sw=1, ph=1, pw=1)
    d.update({k: v for k, v in change.items() if k in d})
    cfg = {"fwd": {"bc": 32, "bk": 32, "nchw_x": change.get("config", True)}}
    g = conv.geometry(d["N"], d["C"], d["K"], d["H"], d["W"], d["R"], d["S"], (d["sh"], d["sw"]),
                      (d["ph"], d["pw"]), config=cfg)
    x = rng.standard_normal((d["N"], d["C"], d["H"], d["W"])).astype(np.float32)
    if change.get("x") == "strided":
        x = np.asfortranarray(x)
    elif change.get("x") == "bf16":
        x = x.astype(brgemm.bfloat16)
    assert not conv.reads_x_nchw(g, "f32", "cpu", x), why


def test_transposed_a_blocks_random_shapes(rng):
    """Block(a_t=True): A[i, j] at j lda + i. Random sizes (small ones take
    libxsmm's AVX2 kernels), strides and offsets, beta 0 and 1: replay and
    eager against float64."""
    for _ in range(16):
        m, n, k = (int(v) for v in rng.integers(1, 70, 3))
        lda, count, beta = m + int(rng.integers(0, 9)), int(rng.integers(1, 5)), float(
            rng.choice([0.0, 1.0]))
        A = rng.standard_normal(k * lda * count + 7).astype(np.float32)
        B = rng.standard_normal((count, k, n)).astype(np.float32)
        C0 = rng.standard_normal((m, n)).astype(np.float32)
        a_offs = [int(o) for o in rng.integers(0, 8, count) + np.arange(count) * k * lda]
        blk = P.Block(m, n, k, lda=lda, ldb=n, ldc=n, beta=beta, a_t=True)
        As = [np.lib.stride_tricks.as_strided(A[o:], (m, k), (4, 4 * lda)).astype(np.float64)
              for o in a_offs]
        want = sum(a @ b.astype(np.float64) for a, b in zip(As, B)) + beta * C0
        mag = sum(np.abs(a) @ np.abs(b.astype(np.float64)) for a, b in zip(As, B)) + np.abs(C0)
        print(f"m={m} n={n} k={k} lda={lda} count={count} beta={beta}")
        b_offs = [i * k * n for i in range(count)]
        for ex in ("eager", "replay"):
            C = C0.copy()
            if ex == "eager":
                P.Eager(A=A, B=B, C=C).gemm(blk, "A", a_offs, "B", b_offs, "C", 0)
            else:
                rec = P.Recorder(dict(A="f32", B="f32", C="f32"))
                rec.gemm(blk, "A", a_offs, "B", b_offs, "C", 0)
                rec.finish().run(A=A, B=B, C=C)
            assert np.all(np.abs(C - want) <= 1e-5 * mag), ex


def test_transposed_a_bad_input():
    with pytest.raises(ValueError, match="a_t"):
        P.Block(16, 16, 16, lda=16, ldb=16, ldc=16, dtype="bf16", a_t=True)
    with pytest.raises(ValueError, match="lda"):
        P.Block(16, 8, 4, lda=8, ldb=8, ldc=8, a_t=True)  # A's rows are k of m = 16
    rec = P.Recorder(dict(A="f32", B="f32", C="f32"))
    rec.gemm(P.Block(4, 4, 4, lda=4, ldb=4, ldc=4, a_t=True), "A", [0], "B", [0], "C", 0)
    plan = rec.finish()
    for backend, vnni in (("sycl", False), ("cuda", True)):
        with pytest.raises(ValueError, match="transposed"):
            plan.require(backend, max_op=99, b_vnni=vnni)
    from brgemm.backend.cpu import CpuKernel
    with pytest.raises(ValueError):  # the native layer refuses it too
        CpuKernel(form="offs", dtype_ab="bf16", dtype_c="f32", m=16, n=16, k=16, lda=16, ldb=16,
                  ldc=16, alpha=1.0, beta=1.0, a_t=True)
