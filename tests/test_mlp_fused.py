"""fc.MLP(fused=True) (primitives/mlp.py) against float64 references.

The reference runs the MLP in float64 with the roundings the library makes
(bf16 operands: x, W, each hidden activation, each dz) and carries, per
element, a bound on how far the library may be from it: f32 accumulation adds
GAMMA * sum |a||b| per product, the epilogue's sigmoid/tanh ACT_ABS, element-wise
f32 ops one rounding, and where the library rounds an f32 value to bf16 that
may already be off, the two sides may land one bf16 step apart. Bounds travel
through the layers (|W| products), so no element is judged by a tensor's max.
In f32 the reference's values are checked against torch autograd (float64) too.
"""
import itertools

import numpy as np
import pytest
import torch

import brgemm
from brgemm import plan as P
from brgemm.config import ConfigError
from primitives import fc, mlp

GAMMA = 1e-5
EPS32 = 2.0 ** -23
ACT_ABS = 1e-6
ACTS = ["relu", "sigmoid", "tanh", None]


def rnd16(a):
    return np.asarray(a, np.float64).astype(brgemm.bfloat16).astype(np.float64)


def step16(a):
    _, e = np.frexp(np.abs(np.asarray(a, np.float64)))
    return np.where(a != 0, np.ldexp(1.0, e - 8), 0.0)


def _rounded(v, e, bf16):
    """The library's bf16 copy of a value v known to within e: (value, bound)."""
    if not bf16:
        return v, e
    return rnd16(v), e + np.where(e > 0, step16(v), 0.0)


def _act(name, z):
    if name == "relu":
        return np.maximum(z, 0)
    if name == "sigmoid":
        return 1 / (1 + np.exp(-z))
    if name == "tanh":
        return np.tanh(z)
    return z


def _act_grad(name, h):
    return {"relu": lambda: (h > 0) * 1.0, "sigmoid": lambda: h * (1 - h),
            "tanh": lambda: 1 - h * h, None: lambda: np.ones_like(h)}[name]()


def _act_bounds(name, h, eh, z, ez):
    """(bound on act'(h) from the library's h, mask where relu's act' may flip)."""
    if name == "sigmoid":
        return np.abs(1 - 2 * h) * eh + eh * eh, None
    if name == "tanh":
        return 2 * np.abs(h) * eh + eh * eh, None
    if name == "relu":
        return np.zeros_like(h), np.abs(z) <= ez
    return np.zeros_like(h), None


def reference(net, x, dy, bf16, grad_from_bf16=False):
    """(value, bound) of y, dx and every layer's dW, db (float64). grad_from_bf16:
    act' of a hidden layer from its bf16 output (what the GPU kernel keeps)."""
    Ws = [layer.weight.astype(np.float64) for layer in net.layers]
    bs = [layer.bias.astype(np.float64) if layer.bias is not None else np.zeros(layer.K)
          for layer in net.layers]
    acts = [None if layer.activation in (None, "none") else layer.activation
            for layer in net.layers]
    if bf16:
        Ws = [rnd16(w) for w in Ws]
    a, ea = _rounded(x.astype(np.float64), np.zeros(x.shape), bf16)
    ins, zs, hs = [], [], []
    for w, b, act in zip(Ws, bs, acts):
        ins.append((a, ea))
        z = a @ w.T + b
        ez = ea @ np.abs(w).T + GAMMA * (np.abs(a) @ np.abs(w).T + np.abs(b))
        h = _act(act, z)
        lip = {"relu": 1.0, "sigmoid": 0.25, "tanh": 1.0, None: 1.0}[act]
        eh = lip * ez + (ACT_ABS if act in ("sigmoid", "tanh") else 0) + EPS32 * np.abs(h)
        zs.append((z, ez))
        hs.append((h, eh))
        a, ea = _rounded(h, eh, bf16)
    y, ey = hs[-1]
    ey = ey + (step16(y) if bf16 else 0)  # a bf16 MLP returns y rounded to bf16
    grads = []
    dh, edh = dy.astype(np.float64), np.zeros(dy.shape)
    for l in reversed(range(len(Ws))):
        (h, eh), (z, ez) = hs[l], zs[l]
        if grad_from_bf16 and l < len(Ws) - 1:
            h, eh = ins[l + 1]
        g = _act_grad(acts[l], h)
        eg, flip = _act_bounds(acts[l], h, eh, z, ez)
        dz = dh * g
        edz = edh * np.abs(g) + np.abs(dh) * eg + EPS32 * np.abs(dz)
        if flip is not None:
            edz = edz + np.where(flip, np.abs(dh) + edh, 0)
        dz, edz = _rounded(dz, edz, bf16)
        if bf16 and l == len(Ws) - 1:  # dy itself is exact: its rounding is the same
            edz = np.where(edh + eg > 0, edz, 0) if flip is None else edz
        a, ea = ins[l]
        dw = dz.T @ a
        edw = edz.T @ np.abs(a) + np.abs(dz).T @ ea + GAMMA * (np.abs(dz).T @ np.abs(a)) * 2
        db = dz.sum(0)
        edb = edz.sum(0) + GAMMA * np.abs(dz).sum(0) * 2
        grads.append(((dw, edw), (db, edb)))
        w = Ws[l]
        dh = dz @ w
        edh = edz @ np.abs(w) + GAMMA * (np.abs(dz) @ np.abs(w))
    edh = edh + (step16(dh) if bf16 else 0)  # and dx rounded to bf16, as y
    return (y, ey), (dh, edh), grads[::-1]


def torch_reference(net, x, dy):
    """y, dx, dWs, dbs of the same MLP by torch autograd in float64."""
    X = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    h, params = X, []
    for layer in net.layers:
        W = torch.tensor(layer.weight, dtype=torch.float64, requires_grad=True)
        B = torch.tensor(layer.bias, dtype=torch.float64, requires_grad=True)
        params.append((W, B))
        h = torch.nn.functional.linear(h, W, B)
        act = layer.activation
        if act not in (None, "none"):
            h = getattr(torch, act)(h)
    h.backward(torch.tensor(dy, dtype=torch.float64))
    return (h.detach().numpy(), X.grad.numpy(),
            [(W.grad.numpy(), B.grad.numpy()) for W, B in params])


def check(name, got, ref, seed):
    v, e = ref
    bad = np.abs(np.asarray(got, np.float64) - v) > e * 1.01 + 1e-30
    assert not bad.any(), (
        f"{name} (seed {seed}): {bad.sum()} of {bad.size} elements off; worst "
        f"{np.max(np.abs(got - v) - e):.3g} beyond bounds, e.g. got {got[bad][:3]} "
        f"want {v[bad][:3]} +- {e[bad][:3]}")


def random_case(rng):
    width = int(rng.choice([16, 32, 64, 128]))
    hidden = int(rng.integers(0, 5))
    sizes = [int(rng.integers(1, 150))] + [width] * hidden + [int(rng.integers(1, 150))]
    N = int(rng.integers(1, 600))
    pipe = {}
    if rng.random() < 0.7:
        pipe = {"depth": int(rng.integers(1, len(sizes))), "tile": int(rng.choice([16, 32, 48, 64])),
                "group": int(rng.integers(1, 5))}
    return sizes, N, str(rng.choice(["relu", "sigmoid", "tanh", "none"])), \
        ACTS[int(rng.integers(0, 4))], pipe


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("case", range(6))
def test_fused_mlp_matches_float64(dtype, case):
    seed = int(np.random.SeedSequence().entropy % 2**31)
    print("seed", seed)
    rng = np.random.default_rng(seed)
    sizes, N, act, last, pipe = random_case(rng)
    net = fc.MLP(sizes, activation=act, last_activation=last, dtype=dtype, fused=True,
                 config={"pipeline": pipe} if pipe else None, rng=rng)
    x = rng.standard_normal((N, sizes[0])).astype(np.float32)
    dy = rng.standard_normal((N, sizes[-1])).astype(np.float32)
    # bf16 arrays in (half the bf16 cases): y and dx come back in bf16; with f32
    # arrays they come back as bf16 values in f32 (the reference rounds them either way)
    arrays16 = dtype == "bf16" and rng.random() < 0.5
    if arrays16:
        x, dy = x.astype(brgemm.bfloat16), dy.astype(brgemm.bfloat16)
    y = net.forward(x)
    dx = net.backward(dy)
    assert y.dtype == x.dtype and dx.dtype == dy.dtype
    x, dy = x.astype(np.float32), dy.astype(np.float32)
    # bf16: act' of a hidden layer from its bf16 output, which is all training keeps
    (ry, rdx, grads) = reference(net, x, dy, dtype == "bf16", grad_from_bf16=dtype == "bf16")
    what = f"{sizes} N={N} {act}/{last} {pipe} {dtype}{' bf16 arrays' * arrays16}"
    check(f"y {what}", y, ry, seed)
    check(f"dx {what}", dx, rdx, seed)
    for i, (layer, (rdw, rdb)) in enumerate(zip(net.layers, grads)):
        check(f"dW[{i}] {what}", layer.grad_weight, rdw, seed)
        check(f"db[{i}] {what}", layer.grad_bias, rdb, seed)
    check(f"y (inference) {what}", net.forward(x.astype(y.dtype), train=False), ry, seed)
    if dtype == "f32":  # the reference itself against torch autograd
        ty, tdx, tgrads = torch_reference(net, x, dy)
        np.testing.assert_allclose(ry[0], ty, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(rdx[0], tdx, rtol=1e-12, atol=1e-12)
        for (rdw, rdb), (tdw, tdb) in zip(grads, tgrads):
            np.testing.assert_allclose(rdw[0], tdw, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(rdb[0], tdb, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_fused_equals_unfused(dtype):
    """Same weights from the same seed, same methods, results within the bounds."""
    seed = int(np.random.SeedSequence().entropy % 2**31)
    print("seed", seed)
    rng = np.random.default_rng(seed)
    sizes = [int(rng.integers(8, 80)), 64, 64, 64, int(rng.integers(1, 40))]
    nets = [fc.MLP(sizes, activation="tanh", dtype=dtype, rng=np.random.default_rng(seed),
                   fused=f) for f in (False, True)]
    for a, b in zip(nets[0].layers, nets[1].layers):
        np.testing.assert_array_equal(a.weight, b.weight)
    x = rng.standard_normal((300, sizes[0])).astype(np.float32)
    dy = rng.standard_normal((300, sizes[-1])).astype(np.float32)
    for net in nets:  # the fused MLP's act' comes from its bf16 activations in bf16
        ref_y, ref_dx, grads = reference(nets[0], x, dy, dtype == "bf16",
                                         grad_from_bf16=dtype == "bf16" and net.fused is not None)
        check("y", net.forward(x), ref_y, seed)
        check("dx", net.backward(dy), ref_dx, seed)
        for layer, (rdw, rdb) in zip(net.layers, grads):
            check("dW", layer.grad_weight, rdw, seed)
            check("db", layer.grad_bias, rdb, seed)
    for net in nets:  # SGD from each one's own gradients
        before = [(layer.weight.copy(), layer.grad_weight.copy()) for layer in net.layers]
        net.step(0.1)
        for layer, (w, dw) in zip(net.layers, before):
            np.testing.assert_array_equal(layer.weight, w - np.float32(0.1) * dw)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_training_state_recycled_unless_held(dtype):
    """A new training forward reuses the last one's activation buffers when nobody
    holds them (fresh pages cost a fault each), and never touches a state the
    caller took through state(): backward from it matches a fresh run."""
    seed = int(np.random.SeedSequence().entropy % 2**31)
    print("seed", seed)
    rng = np.random.default_rng(seed)
    sizes = [int(rng.integers(4, 40)), 32, 32, int(rng.integers(1, 20))]
    N = int(rng.integers(20, 300))
    net = fc.MLP(sizes, activation="tanh", dtype=dtype, fused=True, rng=rng)
    x1, x2 = (rng.standard_normal((N, sizes[0])).astype(np.float32) for _ in range(2))
    dy = rng.standard_normal((N, sizes[-1])).astype(np.float32)
    h = "h16" if dtype == "bf16" else "h"  # what training keeps of the activations
    net.forward(x1)
    at = net.fused.saved[h].ctypes.data
    net.forward(x2)
    assert net.fused.saved[h].ctypes.data == at, "an unheld state's buffer was not reused"
    net.forward(x1)
    held = net.fused.state()
    net.forward(x2)
    assert net.fused.saved[h].ctypes.data != held[1][h].ctypes.data
    dx_held = net.fused.backward(dy, state=held).copy()
    dw_held = [layer.grad_weight.copy() for layer in net.layers]
    del held
    net.forward(x1)
    np.testing.assert_array_equal(net.backward(dy), dx_held)
    for layer, dw in zip(net.layers, dw_held):
        np.testing.assert_array_equal(layer.grad_weight, dw)


def test_bf16_input_arrays():
    rng = np.random.default_rng(0)
    net = fc.MLP([24, 32, 32, 8], dtype="bf16", fused=True, rng=rng)
    x = rng.standard_normal((70, 24)).astype(brgemm.bfloat16)
    y = net.forward(x)
    assert y.dtype == brgemm.bfloat16 and y.shape == (70, 8)
    dx = net.backward(np.ones((70, 8), brgemm.bfloat16))
    assert dx.dtype == brgemm.bfloat16 and dx.shape == (70, 24)


def test_pipeline_knobs_change_the_plan_not_the_result():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((130, 16)).astype(np.float32)
    outs = []
    for depth, tile in ((1, 16), (2, 32), (4, 64), (4, 130)):
        net = fc.MLP([16, 32, 32, 32, 4], fused=True, rng=np.random.default_rng(2),
                     config={"pipeline": {"depth": depth, "tile": tile}})
        outs.append(net.forward(x, train=False))
        g = net.fused.last
        assert (g.depth, g.tile) == (depth, min(tile, 130))
    for o in outs[1:]:
        np.testing.assert_allclose(o, outs[0], rtol=1e-5, atol=1e-6)


def test_cost_model_prefers_full_depth_when_memory_bound():
    shape = {"N": 1 << 20, "C": 64, "W": 64, "K": 64, "L": 5}
    costs = [mlp.cost(shape, "f32", False, d, 64) for d in (1, 2, 5)]
    assert costs[0] > costs[1] > costs[2]
    assert mlp.cost(shape, "f32", False, 5, 16) > mlp.cost(shape, "f32", False, 5, 64)
    pick = mlp.default_pipeline(shape, "f32", False)
    assert pick["depth"] == 5
    s = mlp.search("pipeline", {"N": 256, "C": 16, "W": 32, "K": 8, "L": 3})
    assert {"depth": 3, "tile": 64} in s.candidates and s.time(s.default, 1) > 0


def test_epilogue_ops_eager_and_replay():
    """act_grad (y in f32 or bf16), store_t, store_bf16, col_sum (what a backward layer's
    epilogue does, fused in one pass on AVX512-BF16 CPUs, by 16 x 16 blocks): the
    C executor against the eager (NumPy) path and float64, ragged and whole blocks."""
    rng = np.random.default_rng(3)
    for (m, n, k), code, bf16, y16 in itertools.product(
            ((5, 7, 3), (37, 40, 5), (16, 32, 2)), ("relu", "sigmoid", "tanh", None),
            (False, True), (False, True)):
        a = rng.standard_normal(m * k).astype(np.float32)
        b = rng.standard_normal(k * n).astype(np.float32)
        ld = n + 2
        y = rng.uniform(-1, 1, m * ld).astype(brgemm.bfloat16 if y16 else np.float32)
        tdt = brgemm.bfloat16 if bf16 else np.float32
        outs = []
        for ex_kind in ("eager", "replay"):
            c = np.zeros(m * n, np.float32)
            t = np.zeros(n * (m + 3), tdt)
            d = np.zeros(m * ld, brgemm.bfloat16)
            sums = np.arange(n + 1, dtype=np.float32)  # col_sum adds to what is there
            ops = (P.act_grad(code, "y", 1, ld, bf16=y16),) if code else ()
            ops += (P.store_t("t", 0, m + 3, bf16=bf16), P.store_bf16("d", 2, ld),
                    P.col_sum("sums", 1))
            blk = P.Block(m, n, k, lda=k, ldb=n, ldc=n, beta=0.0)
            arrays = dict(a=a, b=b, c=c, y=y, t=t, d=d, sums=sums)
            if ex_kind == "eager":
                P.Eager(**arrays).gemm(blk, "a", [0], "b", [0], "c", 0, ops=ops)
            else:
                rec = P.Recorder(dict(a="f32", b="f32", c="f32", y="bf16" if y16 else "f32",
                                      t="bf16" if bf16 else "f32", d="bf16", sums="f32"))
                rec.gemm(blk, "a", [0], "b", [0], "c", 0, ops=ops)
                rec.finish().run(**arrays)
            outs.append((c.copy(), t.astype(np.float32), d.astype(np.float32), sums))
        yb = np.lib.stride_tricks.as_strided(y[1:], (m, n), (ld * y.itemsize, y.itemsize))
        want = a.reshape(m, k).astype(np.float64) @ b.reshape(k, n)
        if code:
            want = want * _act_grad(code, yb.astype(np.float64))
        for c, t, d, sums in outs:
            c = c.reshape(m, n)
            np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)
            assert sums[0] == 0
            err = np.abs(sums[1:] - (np.arange(1, n + 1) + want.sum(0)))
            assert np.all(err <= 1e-5 * (np.abs(want).sum(0) + np.arange(1, n + 1))), \
                f"col_sum {m}x{n} {code} {bf16} {y16}: {err}"
            tt = t.reshape(n, m + 3)[:, :m]
            np.testing.assert_array_equal(tt, (c.astype(brgemm.bfloat16) if bf16 else c).T)
            dd = np.lib.stride_tricks.as_strided(d[2:], (m, n), (ld * d.itemsize, d.itemsize))
            np.testing.assert_array_equal(dd, c.astype(brgemm.bfloat16))


def test_device_backends_refuse_the_new_ops():
    rec = P.Recorder(dict(a="f32", b="f32", c="f32", t="f32"))
    rec.gemm(P.Block(2, 2, 2, lda=2, ldb=2, ldc=2, beta=0.0), "a", [0], "b", [0], "c", 0,
             ops=(P.store_t("t", 0, 2),))
    plan = rec.finish()
    if "sycl" in brgemm.backends():
        with pytest.raises(ValueError, match="^backend: .*store_t"):
            plan.run(backend="sycl", a=np.ones(4, np.float32), b=np.ones(4, np.float32),
                     c=np.zeros(4, np.float32), t=np.zeros(4, np.float32))


def test_bad_arguments():
    with pytest.raises(TypeError, match="^fused:"):
        fc.MLP([4, 4], fused="yes")
    net = fc.MLP([4, 8, 3], fused=True)
    with pytest.raises(ValueError, match="^x:"):
        net.forward(np.zeros((5, 5), np.float32))
    with pytest.raises(TypeError, match="^x:"):
        net.forward(np.zeros((5, 4), np.float64))
    with pytest.raises(ValueError, match="^dy:"):
        net.backward(np.zeros((5, 3), np.float32))
    net.forward(np.zeros((5, 4), np.float32), train=False)
    with pytest.raises(ValueError, match="^dy:"):  # inference keeps nothing for backward
        net.backward(np.zeros((5, 3), np.float32))
    net.forward(np.zeros((5, 4), np.float32))
    with pytest.raises(ValueError, match="^dy:"):
        net.backward(np.zeros((6, 3), np.float32))
    with pytest.raises(ConfigError, match="tile"):
        fc.MLP([4, 8, 3], fused=True, config={"pipeline": {"tile": 0}}).forward(
            np.zeros((5, 4), np.float32))
    with pytest.raises(ConfigError, match="unknown key"):
        fc.MLP([4, 8, 3], fused=True, config={"pipeline": {"tiles": 8}}).forward(
            np.zeros((5, 4), np.float32))
    with pytest.raises(ValueError, match="^pass:"):
        mlp.search("fwd", {"N": 8, "C": 8, "W": 8, "K": 8, "L": 2})
    if "sycl" in brgemm.backends():
        with pytest.raises(ValueError, match="^backend:"):
            fc.MLP([4, 4], fused=True, backend="sycl")


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_torch_module_fused(dtype):
    """primitives.nn.MLP(fused=True): outputs and every gradient within the bounds of
    the float64 reference (results rounded to bf16 once more in bf16), with a
    second forward before the first's backward."""
    from primitives import nn as pnn
    seed = int(np.random.SeedSequence().entropy % 2**31)
    print("seed", seed)
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    sizes = [int(rng.integers(1, 70)), 32, 32, int(rng.integers(1, 40))]
    tdt = torch.float32 if dtype == "f32" else torch.bfloat16
    mod = pnn.MLP(sizes, activation="sigmoid", last_activation="tanh", fused=True, dtype=tdt)
    N = int(rng.integers(1, 300))
    x = torch.randn(N, sizes[0], dtype=tdt, requires_grad=True)
    dy = torch.randn(N, sizes[-1], dtype=tdt)
    y = mod(x)
    mod(x * 2).sum().backward()  # another forward and backward in between
    x.grad = None
    for p in mod.parameters():
        p.grad = None
    y.backward(dy)
    net = fc.MLP(sizes, activation="sigmoid", last_activation="tanh", rng=rng)
    for layer, m in zip(net.layers, mod.layers):
        layer.weight = m.weight.detach().float().numpy().copy()
        layer.bias = m.bias.detach().float().numpy().copy()
    xf, dyf = x.detach().float().numpy(), dy.float().numpy()
    ry, rdx, grads = reference(net, xf, dyf, dtype == "bf16", grad_from_bf16=dtype == "bf16")

    def widen(ref):  # results come back as bf16 tensors: one more rounding
        return (ref[0], ref[1] + step16(ref[0])) if dtype == "bf16" else ref
    check("y", y.detach().float().numpy(), widen(ry), seed)
    check("dx", x.grad.float().numpy(), widen(rdx), seed)
    for m, (rdw, rdb) in zip(mod.layers, grads):
        check("dW", m.weight.grad.float().numpy(), widen(rdw), seed)
        check("db", m.bias.grad.float().numpy(), widen(rdb), seed)


def test_bf16_on_amx_tiles_model():
    """The bf16 cases again with kernels on AMX tiles (the software model here,
    BRGEMM_AMX=model): weights packed in VNNI pairs once per call (b_vnni)."""
    import os
    import pathlib
    import subprocess
    import sys
    if os.environ.get("BRGEMM_AMX"):
        pytest.skip("already running under BRGEMM_AMX")
    root = pathlib.Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           __file__, "-k", "bf16 and not amx and not torch"], cwd=root,
                          env=dict(os.environ, BRGEMM_AMX="model"), capture_output=True,
                          text=True, timeout=600)
    print(proc.stdout[-3000:], proc.stderr[-2000:])
    assert proc.returncode == 0 and " passed" in proc.stdout
