"""The AMX kernel's own cases: tile configs at every edge, k padding, VNNI
packing, alpha/beta and C dtypes, against float64 NumPy.

Run where bf16 kernels take the AMX path: on an AMX Xeon as is, elsewhere
under the software model of the tile instructions (BRGEMM_AMX=model), which
tests/test_amx.py does in a subprocess. Not collected by a plain pytest run
(the name does not start with test_): the path is decided once per process."""
import os

import numpy as np
import pytest
from conftest import assert_close, reference

import brgemm
from brgemm.backend import cpu

# 16 and 32 are the tile and macro-block edges; 32 the k chunk
EDGES = [1, 2, 15, 16, 17, 31, 32, 33, 47, 48, 64, 65]
DEPTHS = [1, 2, 3, 30, 31, 32, 33, 34, 36, 48, 64, 66, 100]


@pytest.fixture(autouse=True)
def amx_active():
    impl, reason = cpu.amx()
    assert impl, f"these cases need the AMX path: {reason}"
    before = cpu.amx_model_faults()
    yield
    assert cpu.amx_model_faults() == before, "the model saw tile instructions the CPU faults on"


def bf16(rng, shape):
    return rng.standard_normal(shape).astype(brgemm.bfloat16)


def run_case(rng, m, n, k, count, form, alpha, beta, c_dtype, packed=False):
    A, B = bf16(rng, (count, m, k)), bf16(rng, (count, k, n))
    C0 = rng.standard_normal((m, n)).astype(c_dtype)
    C = C0.copy()
    kern = brgemm.Kernel(m, n, k, dtype="bf16", alpha=alpha, beta=beta)
    assert kern.path == "bf16-amx"
    if packed:
        kern(A, kern.pack_b(B), C)
    elif form == "strd":
        kern(A, B, C)
    elif form == "addr":
        kern.addr(list(A), list(B), C)
    else:  # blocks in reverse order inside flat buffers
        ao = [(count - 1 - i) * m * k for i in range(count)]
        bo = [(count - 1 - i) * k * n for i in range(count)]
        kern.offs(A[::-1].copy(), B[::-1].copy(), ao, bo, C)
    assert_close(C, *reference(A, B, C0, alpha, beta), C.dtype)


@pytest.mark.parametrize("m", EDGES)
@pytest.mark.parametrize("n", [1, 16, 17, 33, 64])
def test_edges_in_m_and_n(rng, m, n):
    run_case(rng, m, n, int(rng.choice(DEPTHS)), int(rng.integers(1, 4)), "strd", 1.0, 1.0,
             np.float32)


@pytest.mark.parametrize("k", DEPTHS)
def test_depths(rng, k):
    run_case(rng, int(rng.choice(EDGES)), int(rng.choice(EDGES)), k, int(rng.integers(1, 4)),
             "strd", 1.0, 0.0, np.float32)


@pytest.mark.parametrize("case", range(40))
def test_random(rng, case):
    m, n, k = (int(x) for x in rng.integers(1, 90, 3))
    count = int(rng.integers(0, 6))
    form = str(rng.choice(["strd", "addr", "offs"]))
    alpha, beta = [(1.0, 1.0), (1.0, 0.0), (0.5, 2.0), (-1.5, 0.0), (2.0, 1.0)][case % 5]
    c_dtype = [np.float32, brgemm.bfloat16][case % 2]
    print(f"m={m} n={n} k={k} count={count} form={form} alpha={alpha} beta={beta} C {c_dtype}")
    run_case(rng, m, n, k, count, form, alpha, beta, c_dtype, packed=form == "strd" and case % 3 == 0)


@pytest.mark.parametrize("m,n", [(16, 64), (32, 32), (48, 96), (64, 64), (80, 32)])
def test_whole_macro_blocks(rng, m, n):
    """Shapes of whole 16 x 32 macro blocks (BRGEMM_AMX_SWAP's): passes over
    chunks of blocks, with beta 0, 1 and other, f32 and bf16 C, B packed or not."""
    for case in range(4):
        alpha, beta = [(1.0, 0.0), (1.0, 1.0), (0.5, 2.0), (1.0, 1.0)][case]
        run_case(rng, m, n, int(rng.choice([32, 64, 33])), int(rng.integers(1, 10)), "strd", alpha,
                 beta, [np.float32, brgemm.bfloat16][case % 2], packed=case >= 2)


def test_packing_is_vnni_pairs_with_zero_rows(rng):
    m, n, k = 5, 21, 35  # odd k: a zero partner row; k > 32 without an even divisor >= 16: padded
    B = bf16(rng, (2, k, n))
    packed = brgemm.Kernel(m, n, k, dtype="bf16").pack_b(B)
    kp = packed.data.shape[1] // n
    assert kp % 2 == 0 and kp >= k
    want = np.zeros((2, kp, n), B.dtype)
    want[:, :k] = B
    want = want.reshape(2, kp // 2, 2, n).transpose(0, 1, 3, 2)  # [count][k/2][n][2]
    if os.environ.get("BRGEMM_AMX_BTILES") != "0":  # strips of 16 columns, back to back
        want = np.concatenate([want[:, :, j:j + 16].reshape(2, -1) for j in range(0, n, 16)], 1)
    np.testing.assert_array_equal(packed.data.view(brgemm.bfloat16).reshape(want.shape), want)


@pytest.mark.parametrize("k", [3, 33, 35])
def test_padded_k_never_reads_past_a_row(rng, k):
    """A's rows are views with NaN right after column k: the padding must be zeros."""
    m, n, count = 20, 18, 3
    big = np.full((count, m, k + 5), np.nan, brgemm.bfloat16)
    big[:, :, :k] = bf16(rng, (count, m, k))
    A = big[:, :, :k]
    B = bf16(rng, (count, k, n))
    C = np.zeros((m, n), np.float32)
    brgemm.Kernel(m, n, k, dtype="bf16", beta=0.0)(A, B, C)
    assert_close(C, *reference(A, B, np.zeros((m, n)), 1.0, 0.0), C.dtype)


def test_views_with_row_strides(rng):
    m, n, k, count = 40, 36, 34, 3
    A = bf16(rng, (count, m + 2, k + 6))[:, 1:m + 1, 2:k + 2]
    B = bf16(rng, (count, k + 1, n + 9))[:, :k, 3:n + 3]
    big_c = rng.standard_normal((m + 4, n + 5)).astype(np.float32)
    C0 = big_c.copy()
    C = big_c[2:m + 2, 1:n + 1]
    brgemm.Kernel(m, n, k, dtype="bf16")(A, B, C)
    assert_close(C, *reference(A, B, C0[2:m + 2, 1:n + 1], 1.0, 1.0), C.dtype)
    outside = np.ones(big_c.shape, bool)
    outside[2:m + 2, 1:n + 1] = False
    np.testing.assert_array_equal(big_c[outside], C0[outside])


@pytest.mark.parametrize("N,C,K", [(32, 64, 48), (18, 96, 64), (64, 40, 34)])
def test_linear_keeps_vnni_tiles(rng, N, C, K):
    """fc.Linear on AMX keeps w, wt and the update's dy in VNNI pairs: the
    forward, data and weight gradients still match float64 NumPy."""
    from primitives import fc
    lin = fc.Linear(C, K, bias=True, dtype="bf16", rng=rng)
    x = rng.standard_normal((N, C)).astype(np.float32)
    dy = rng.standard_normal((N, K)).astype(np.float32)
    lin.prepare(N)
    print("VNNI passes:", sorted(lin.vnni), "blocks", lin.g.bn, lin.g.bc, lin.g.bk)
    assert lin.vnni, "no pass of these shapes reads VNNI tiles"
    y = lin.forward(x)
    dx = lin.backward(dy)
    xb = x.astype(brgemm.bfloat16).astype(np.float64)
    wb = lin.weight.astype(brgemm.bfloat16).astype(np.float64)
    dyb = dy.astype(brgemm.bfloat16).astype(np.float64)
    # bf16 inputs, f32 accumulation, one bf16 rounding of each output at most
    for got, want, mag in ((y, xb @ wb.T + lin.bias, np.abs(xb) @ np.abs(wb).T + np.abs(lin.bias)),
                           (dx, dyb @ wb, np.abs(dyb) @ np.abs(wb)),
                           (lin.grad_weight, dyb.T @ xb, np.abs(dyb).T @ np.abs(xb))):
        err = np.abs(np.asarray(got, np.float64) - want)
        assert np.all(err <= 1e-2 * mag + 1e-6), f"max err/mag {np.max(err / (mag + 1e-30)):.3g}"


def test_eager_reads_vnni_blocks_as_the_plan_does(rng):
    """The eager executor unpacks b_vnni blocks: it and the replay agree."""
    from brgemm import plan as P
    from brgemm.vnni import vnni_tiles
    from primitives import fc, fc_plans
    g = fc.geometry(40, 64, 32, blocks=(20, 32, 32))
    w = vnni_tiles(bf16(rng, (g.Kb, g.Cb, g.bc, g.bk)))
    x = bf16(rng, (g.Nb, g.Cb, g.bn, g.bc))
    y_plan, y_eager = (np.zeros((g.Nb, g.Kb, g.bn, g.bk), np.float32) for _ in range(2))
    fc.plan(g, "fwd", "bf16", vnni=True).run(x=x, w=w, y=y_plan)
    fc.forward_nest(P.Eager(x=x, w=w, y=y_eager), fc_plans._loops(g, "fwd"), g, "bf16",
                    lambda n, k: (), vnni=True)
    np.testing.assert_allclose(y_eager, y_plan, rtol=1e-5, atol=1e-5)
    plain = np.zeros_like(y_plan)  # and both differ from reading the same bytes as plain tiles
    fc.plan(g, "fwd", "bf16").run(x=x, w=w, y=plain)
    assert not np.allclose(plain, y_plan)


@pytest.mark.parametrize("layer", [True, False])
def test_conv_reads_vnni_weight_tiles(rng, layer):
    """conv forward and backward on AMX read w and wt, and the flat weight
    update dy, as VNNI pairs (layer and functional forms) and still match
    float64 NumPy."""
    from primitives import conv
    N, C, K, H, W = 2, 32, 48, 6, 7
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = (0.2 * rng.standard_normal((K, C, 3, 3))).astype(np.float32)
    dy = rng.standard_normal((N, K, H, W)).astype(np.float32)
    if layer:
        c = conv.Conv2d(C, K, 3, padding=1, dtype="bf16", rng=rng)
        c.weight[...] = w
        c.prepare(N, H, W)
        c.load_weights()
        assert c.vnni == {"fwd", "bwd", "upd"}, c.vnni
        y = c.forward(x)
        dx, dw = c.backward(dy), c.grad_weight
    else:
        assert conv.vnni_passes(conv.geometry(N, C, K, H, W, 3, 3, (1, 1), (1, 1)), "bf16", "cpu")
        y = conv.forward(x, w, padding=1, dtype="bf16")
        dx, dw = conv.backward(dy, x, w, padding=1, dtype="bf16")
    q = lambda a: a.astype(brgemm.bfloat16).astype(np.float64)  # noqa: E731
    xp = np.pad(q(x), ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.stack([xp[:, :, r:r + H, s:s + W] for r in range(3) for s in range(3)], 2)
    wm = q(w).reshape(K, C, 9)
    want_y = np.einsum("nctpq,kct->nkpq", cols, wm)
    mag_y = np.einsum("nctpq,kct->nkpq", np.abs(cols), np.abs(wm))
    assert np.all(np.abs(np.asarray(y, np.float64) - want_y) <= 1e-2 * mag_y + 1e-6)
    dyp = np.pad(q(dy), ((0, 0), (0, 0), (1, 1), (1, 1)))
    wf = q(w)[:, :, ::-1, ::-1]  # dx = dy (full-padded) conv with flipped, transposed w
    dcols = np.stack([dyp[:, :, r:r + H, s:s + W] for r in range(3) for s in range(3)], 2)
    want_dx = np.einsum("nktpq,kct->ncpq", dcols, wf.reshape(K, C, 9))
    mag_dx = np.einsum("nktpq,kct->ncpq", np.abs(dcols), np.abs(wf.reshape(K, C, 9)))
    assert np.all(np.abs(np.asarray(dx, np.float64) - want_dx) <= 1e-2 * mag_dx + 1e-6)
    want_dw = np.einsum("nctpq,nkpq->kct", cols, q(dy)).reshape(w.shape)
    mag_dw = np.einsum("nctpq,nkpq->kct", np.abs(cols), np.abs(q(dy))).reshape(w.shape)
    assert np.all(np.abs(np.asarray(dw, np.float64) - want_dw) <= 1e-2 * mag_dw + 1e-6)


@pytest.mark.parametrize("N,C,K", [(64, 96, 80), (30, 70, 50), (33, 64, 48)])
def test_fc_functional_reads_vnni_tiles(rng, N, C, K):
    """fc.forward/backward on AMX pack w, W^T and x's tiles into VNNI pairs once
    per call (ragged reduction blocks included) and match float64 NumPy."""
    from primitives import fc
    passes = fc.vnni_passes(fc.geometry(N, C, K), "bf16", "cpu", plain=True)
    print("VNNI passes:", sorted(passes))
    assert passes
    x, dy = (rng.standard_normal(s).astype(np.float32) for s in ((N, C), (N, K)))
    w, b = rng.standard_normal((K, C)).astype(np.float32), rng.standard_normal(K).astype(np.float32)
    y = fc.forward(x, w, b, dtype="bf16")
    dx, dw, db = fc.backward(dy, x, w, dtype="bf16")
    q = lambda a: a.astype(brgemm.bfloat16).astype(np.float64)  # noqa: E731
    for got, want, mag in ((y, q(x) @ q(w).T + b, np.abs(q(x)) @ np.abs(q(w)).T + np.abs(b)),
                           (dx, q(dy) @ q(w), np.abs(q(dy)) @ np.abs(q(w))),
                           (dw, q(dy).T @ q(x), np.abs(q(dy)).T @ np.abs(q(x)))):
        err = np.abs(np.asarray(got, np.float64) - want)
        assert np.all(err <= 1e-2 * mag + 1e-6), f"max err/mag {np.max(err / (mag + 1e-30)):.3g}"


def test_vnni_plan_refuses_the_sycl_backend(rng):
    from primitives import fc
    if "sycl" not in brgemm.backends():
        pytest.skip("no SYCL device here")
    g = fc.geometry(16, 32, 32)
    with pytest.raises(ValueError, match=r"^backend: this plan reads B tiles as VNNI"):
        fc.plan(g, "fwd", "bf16", vnni=True).run(
            backend="sycl", x=bf16(rng, (g.Nb, g.Cb, g.bn, g.bc)),
            w=bf16(rng, (g.Kb, g.Cb, g.bc, g.bk)), y=np.zeros((g.Nb, g.Kb, g.bn, g.bk), np.float32))


def test_layers_take_the_amx_config_tables(rng):
    """A ["bf16-amx".fwd] table sets the bf16 layers' blocks here; f32 keeps its own."""
    from primitives import conv, fc, lstm
    cfg = {"bf16-amx": {"fwd": {"bn": 16, "bc": 32, "bk": 32}}}
    lin = fc.Linear(64, 64, dtype="bf16", config=cfg, rng=rng)
    lin32 = fc.Linear(64, 64, dtype="f32", config=cfg, rng=rng)
    assert (lin.prepare(48).bn, lin.g.bc, lin.g.bk) == (16, 32, 32)
    assert lin32.prepare(48).bc == 64
    c = conv.Conv2d(64, 64, 3, padding=1, dtype="bf16",
                    config={"bf16-amx": {"fwd": {"bc": 32, "bk": 32}}})
    assert (c.prepare(1, 5, 5).bc, c.g.bk) == (32, 32)
    layer = lstm.LSTM(64, 64, dtype="bf16", config={"bf16-amx": {"fwd": {"bk": 32}}})
    assert layer.prepare(2, 4).bk == 32
