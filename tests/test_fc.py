"""FC against PyTorch autograd in float64: every pass, remainder shapes, both
dtypes, the layer classes over SGD steps, and bad input."""
import numpy as np
import pytest
import torch

import brgemm
from primitives import fc, fc_plans

SHAPES = [(1, 1, 1), (7, 3, 5), (64, 64, 64), (100, 70, 130), (65, 128, 1), (33, 1, 17), (256, 200, 96)]


def to64(a):
    return torch.tensor(np.asarray(a, np.float64), requires_grad=True)


def reference(x, w, b, dy, act=None):
    X, W = to64(x), to64(w)
    B = to64(b) if b is not None else None
    Y = torch.nn.functional.linear(X, W, B)
    if act:
        Y = getattr(torch, act)(Y)
    Y.backward(torch.tensor(np.asarray(dy, np.float64)))
    return (Y.detach().numpy(), X.grad.numpy(), W.grad.numpy(),
            B.grad.numpy() if B is not None else None)


def check(name, got, want, dtype, scale):
    """f32: 1e-5 of the magnitude of the sums; bf16 outputs are rounded: 1e-2."""
    rel = 1e-5 if dtype == "f32" else 1e-2
    err = np.abs(np.asarray(got, np.float64) - want).max()
    print(f"{name}: max abs diff {err:.3e} (scale {scale:.3e})")
    assert err <= rel * scale, name


def scales(x, w, dy):
    """Bounds on |sum| terms: f32 error grows with sum |a||b| over the reduction."""
    ax, aw, ady = (np.abs(np.asarray(a, np.float64)) for a in (x, w, dy))
    return dict(y=(ax @ aw.T).max() + 1, dx=(ady @ aw).max() + 1, dw=(ady.T @ ax).max() + 1,
                db=ady.sum(0).max() + 1)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_functional_calls_in_a_row(rng, backend, dtype):
    """Calls after calls, new weights and data each time, at a random shape:
    each result right although the scratch copies are reused, and the results
    of earlier calls, still held, left as they were (brgemm.arrays.Recycler)."""
    npdt = np.float32 if dtype == "f32" else brgemm.bfloat16
    N, C, K = (int(v) for v in rng.integers(1, 150, 3))
    print(f"N={N} C={C} K={K}")
    held = []
    for _ in range(3):
        x, w, dy = (rng.standard_normal(s).astype(npdt) for s in ((N, C), (K, C), (N, K)))
        b = rng.standard_normal(K).astype(npdt)
        y = fc.forward(x, w, b, dtype=dtype, backend=backend)
        dx, dw, db = fc.backward(dy, x, w, dtype=dtype, backend=backend)
        ry, rdx, rdw, _ = reference(x, w, b, dy)
        s = scales(x, w, dy)
        held.append((y, ry, dw, rdw, s))
        check("dx", dx, rdx, dtype, s["dx"])
        check("db", db, dy.astype(np.float64).sum(0), dtype, s["db"])
    for y, ry, dw, rdw, s in held:
        check("y", y, ry, dtype, s["y"])
        check("dw", dw, rdw, dtype, s["dw"])


@pytest.mark.parametrize("N,C,K", SHAPES)
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("with_bias", [True, False])
def test_functional(rng, backend, N, C, K, dtype, with_bias):
    npdt = np.float32 if dtype == "f32" else brgemm.bfloat16
    x = rng.standard_normal((N, C)).astype(npdt)
    w = rng.standard_normal((K, C)).astype(npdt)
    b = rng.standard_normal(K).astype(npdt) if with_bias else None
    dy = rng.standard_normal((N, K)).astype(npdt)
    y = fc.forward(x, w, b, dtype=dtype, backend=backend)
    dx, dw, db = fc.backward(dy, x, w, dtype=dtype, backend=backend)
    assert y.dtype == dx.dtype == dw.dtype == db.dtype == npdt
    ry, rdx, rdw, rdb = reference(x, w, b, dy)
    s = scales(x, w, dy)
    check("y", y, ry, dtype, s["y"])
    check("dx", dx, rdx, dtype, s["dx"])
    check("dw", dw, rdw, dtype, s["dw"])
    check("db", db, dy.astype(np.float64).sum(0), dtype, s["db"])


def test_forward_reading_w_in_place(rng):
    """Batches smaller than the layer: the forward reads W in place (y^T = W x^T,
    stored transposed, bias per row). Random sizes with ragged blocks, x as a
    strided view, against float64 per element."""
    for _ in range(6):
        N = int(rng.integers(1, 80))
        C, K = (int(v) for v in rng.integers(4 * N + 1, 400, 2))  # 1/C + 1/K < 1/(2N)
        x = rng.standard_normal((N, 2 * C)).astype(np.float32)[:, ::2]  # not contiguous
        w = rng.standard_normal((K, C)).astype(np.float32)
        b = rng.standard_normal(K).astype(np.float32) if rng.integers(2) else None
        g = fc.geometry(N, C, K)
        assert fc.reads_w(g, "f32", "cpu", x, w, None), (N, C, K)
        y = fc.forward(x, w, b)
        ref = x.astype(np.float64) @ w.T.astype(np.float64) + (0 if b is None else b)
        bound = 1e-5 * (np.abs(x.astype(np.float64)) @ np.abs(w.T.astype(np.float64))
                        + (0 if b is None else np.abs(b)))
        print(f"N={N} C={C} K={K} bias={b is not None}")
        assert y.shape == (N, K) and (np.abs(y - ref) <= bound).all()


def test_backward_data_copying_w(rng, monkeypatch):
    """Where dx has a few block columns per thread, fc.backward's backward-data
    plan copies W's tiles itself (fc.copies_w, fc_plans.plan_copying: one task
    per block column of dx, each copying the tiles it reads): random sizes
    with ragged blocks in every dimension, reductions in chunks of 1 to all
    blocks, dx (a recycled result array) and dW against float64."""
    from brgemm.machine import cpu_threads
    from primitives import _config
    monkeypatch.setattr(fc, "COPY_MIN", 0)  # the plan on small sizes too
    for _ in range(6):
        N, K = int(rng.integers(1, 100)), int(rng.integers(1, 200))
        low = 32 * fc.COPY_TASKS * cpu_threads()  # enough block columns for every thread
        C = int(rng.integers(low, low + 400))
        chunk = int(rng.choice([1, 2, 3, 1024]))
        cfg = {"fwd": {"bn": 32, "bc": 32, "bk": 32}, "bwd": {"chunk": chunk}}
        _config.clear()  # the path is decided once per call signature
        g = fc.geometry(N, C, K, cfg)
        print(f"N={N} C={C} K={K} chunk={chunk} copy chunk={fc_plans.copy_chunk(g)}")
        assert fc.copies_w(g, cpu_threads())
        x, w, dy = (rng.standard_normal(s).astype(np.float32) for s in ((N, C), (K, C), (N, K)))
        dx, dw, db = fc.backward(dy, x, w, config=cfg)
        _, rdx, rdw, _ = reference(x, w, None, dy)
        s = scales(x, w, dy)
        check("dx", dx, rdx, "f32", s["dx"])
        check("dw", dw, rdw, "f32", s["dw"])
    _config.clear()


@pytest.mark.parametrize("copying", [True, False])
def test_forward_copying_wt(rng, monkeypatch, copying):
    """fc.forward on plain f32 W past the small batches: the plan that copies
    W^T's tiles itself (fc.copies_wt, fc_plans.plan_copying(g, "fwd"): one
    task per block column of y, each transposing the tiles it reads from W's
    rows, copy_bt) and, forced off, W^T's tiles copied first: random sizes with
    ragged blocks in every dimension, reductions in chunks of 1 to all blocks,
    bias or none, x C-contiguous or a strided view, y against float64."""
    from primitives import _config
    monkeypatch.setattr(fc, "copies_wt", lambda g, threads: copying)
    for _ in range(6):
        C, K = (int(v) for v in rng.integers(1, 300, 2))
        low = -(-C * K // (2 * (C + K)))  # no smaller: fc.small_batch reads W in place
        N = int(rng.integers(low, low + 200))
        chunk = int(rng.choice([1, 2, 3, 1024]))
        cfg = {"fwd": {"bn": 32, "bc": 32, "bk": 32, "chunk": chunk}}
        _config.clear()  # the path is decided once per call signature
        g = fc.geometry(N, C, K, cfg)
        x, w = (rng.standard_normal(s).astype(np.float32) for s in ((N, C), (K, C)))
        if rng.integers(2):  # a strided view: copied to a plain matrix first
            x = np.repeat(x, 2, axis=1)[:, ::2]
        b = rng.standard_normal(K).astype(np.float32) if rng.integers(2) else None
        path = fc._forward_plan(N, C, K, "f32", "cpu", cfg, b is not None, True, False)[2]
        print(f"N={N} C={C} K={K} chunk={chunk} copy chunk={fc_plans.copy_chunk(g, 'fwd')} "
              f"bias={b is not None} contiguous={x.flags.c_contiguous} path={path}")
        assert path == ("copying" if copying else "tiles")
        y = fc.forward(x, w, b, config=cfg)
        ref = x.astype(np.float64) @ w.T.astype(np.float64) + (0 if b is None else b)
        bound = 1e-5 * (np.abs(x.astype(np.float64)) @ np.abs(w.T.astype(np.float64))
                        + (0 if b is None else np.abs(b)))
        assert y.shape == (N, K) and (np.abs(y - ref) <= bound).all()
    _config.clear()


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_backward_update_minibatch_block(rng, backend, dtype):
    """fc.backward's update on x and dy^T tiles of the [upd] config's bn,
    not the layer's: random sizes with ragged blocks, bn under, at and over
    N, the default's on "f32" CPU paths (256); dW and db against float64."""
    from brgemm.info import kernel_path
    from brgemm.layouts import pick_block
    path = kernel_path(dtype, backend)
    for _ in range(4):
        N, C, K = (int(v) for v in rng.integers(1, 300, 3))
        bn = int(rng.choice([8, 48, 256, 1024]))
        cfg = {"fwd": {"bn": 32, "bc": 32, "bk": 16}, "upd": {"bn": bn}}
        g = fc.geometry(N, C, K, cfg, path=path)
        assert fc_plans.plain_update(g, cfg, path).bn == pick_block(N, bn) and g.bn == pick_block(N, 32)
        if path and path.startswith("f32"):
            assert fc_plans.plain_update(g, None, path).bn == pick_block(N, 256)
        x, w, dy = (rng.standard_normal(s).astype(np.float32) for s in ((N, C), (K, C), (N, K)))
        dx, dw, db = fc.backward(dy, x, w, dtype=dtype, backend=backend, config=cfg)
        print(f"N={N} C={C} K={K} bn={bn} {dtype}")
        if dtype == "bf16":
            x, w, dy = (a.astype(brgemm.bfloat16).astype(np.float32) for a in (x, w, dy))
        _, rdx, rdw, rdb = reference(x, w, np.zeros(K, np.float32), dy)
        s = scales(x, w, dy)
        check("dw", dw, rdw, "f32", s["dw"])
        check("dx", dx, rdx, "f32", s["dx"])
        check("db", db, rdb, dtype, s["db"])


def test_functional_forward_puts_its_output_blocks_outer(rng):
    """The functional forward's plain plan runs the configured spec with K moved
    ahead of N (fc_plans.outputs_first), so each thread reads the W^T tiles it
    copied: its second task is the next minibatch block of the same outputs.
    Its results stay right (test_functional, test_specs_and_chunks)."""
    assert [fc_plans.outputs_first(s) for s in ("NKc", "n|NKc", "KNc", "Nkc", "NcK")] == \
        ["KNc", "n|KNc", "KNc", "Nkc", "NcK"]
    N, C, K = (int(v) for v in rng.integers(65, 200, 3))
    print(f"N={N} C={C} K={K}")
    cfg = {"fwd": {"spec": "NKc", "bn": 32, "bc": 32, "bk": 32}}
    g = fc.geometry(N, C, K, cfg)
    p = fc.plan(g, "fwd", plain=True)
    first = p.calls["c_off"][p.task_begin[1:3]]  # the first calls of tasks 1 and 2
    assert list(first) == [g.bn * K, 2 * g.bn * K]  # (n 1, k 0), (n 2, k 0): y rows bn, 2 bn
    x, w = rng.standard_normal((N, C)).astype(np.float32), rng.standard_normal((K, C)).astype(
        np.float32)
    check("y", fc.forward(x, w, config=cfg), reference(x, w, None, np.zeros((N, K)))[0], "f32",
          scales(x, w, np.zeros((N, K)))["y"])


def test_bf16_accepts_float32_inputs(rng, backend):
    x = rng.standard_normal((20, 30)).astype(np.float32)
    w = rng.standard_normal((10, 30)).astype(np.float32)
    y = fc.forward(x, w, dtype="bf16", backend=backend)
    assert y.dtype == np.float32
    xb, wb = x.astype(brgemm.bfloat16), w.astype(brgemm.bfloat16)
    ref = xb.astype(np.float64) @ wb.astype(np.float64).T  # bf16 operands, exact products
    check("y", y, ref, "f32", (np.abs(xb.astype(float)) @ np.abs(wb.astype(float)).T).max())


def test_bf16_backward_of_float32_inputs(rng, backend):
    """dtype bf16 on float32 arrays: dx and dW from bf16-rounded operands, db
    summed from dy as given (in f32, as the copy of dy^T reads it), random
    sizes with ragged blocks."""
    for _ in range(3):
        N, C, K = (int(v) for v in rng.integers(1, 150, 3))
        x, w, dy = (rng.standard_normal(s).astype(np.float32) for s in ((N, C), (K, C), (N, K)))
        dx, dw, db = fc.backward(dy, x, w, dtype="bf16", backend=backend)
        print(f"N={N} C={C} K={K}")
        assert dx.dtype == dw.dtype == db.dtype == np.float32
        xb, wb, dyb = (a.astype(brgemm.bfloat16).astype(np.float64) for a in (x, w, dy))
        check("dx", dx, dyb @ wb, "f32", (np.abs(dyb) @ np.abs(wb)).max())
        check("dw", dw, dyb.T @ xb, "f32", (np.abs(dyb).T @ np.abs(xb)).max())
        check("db", db, dy.astype(np.float64).sum(0), "f32", np.abs(dy).sum(0).max())


@pytest.mark.parametrize("spec", [("NKc", "NCk", "KCn"), ("KNc", "CNk", "CKn"), ("nkc", "nck", "kcn"),
                                  ("Nkc", "Cnk", "Kcn"), ("c|NKc", "k|NCk", "n|KCn"),
                                  ("KNkc", "CNck", "Kkcn")])
def test_specs_and_chunks(rng, backend, spec):
    """Loop orders, chunks and groups (a loop named twice: the reduction split
    into phases, or an outer parallel block) all give the same gradients."""
    cfg = {"fwd": {"spec": spec[0], "bn": 16, "bc": 32, "bk": 16, "chunk": 2, "group": 4},
           "bwd": {"spec": spec[1], "chunk": 3, "group": 2}, "upd": {"spec": spec[2], "chunk": 2,
                                                                   "group": 2}}
    if "|" in spec[1]:
        cfg["bwd"]["group"] = 6  # the reduction's group: a multiple of its chunk
    N, C, K = 50, 100, 70
    x, w = rng.standard_normal((N, C)).astype(np.float32), rng.standard_normal((K, C)).astype(np.float32)
    b, dy = rng.standard_normal(K).astype(np.float32), rng.standard_normal((N, K)).astype(np.float32)
    y = fc.forward(x, w, b, config=cfg, backend=backend)
    dx, dw, db = fc.backward(dy, x, w, config=cfg, backend=backend)
    ry, rdx, rdw, _ = reference(x, w, b, dy)
    s = scales(x, w, dy)
    check("y", y, ry, "f32", s["y"])
    check("dx", dx, rdx, "f32", s["dx"])
    check("dw", dw, rdw, "f32", s["dw"])


@pytest.mark.parametrize("act", [None, "relu", "sigmoid", "tanh"])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_linear_layer_matches_torch(rng, backend, act, dtype):
    N, C, K = 70, 50, 90
    lin = fc.Linear(C, K, activation=act, dtype=dtype, rng=rng, backend=backend)
    npdt = np.float32 if dtype == "f32" else brgemm.bfloat16
    x = rng.standard_normal((N, C)).astype(npdt)
    dy = rng.standard_normal((N, K)).astype(npdt)
    y = lin.forward(x)
    dx = lin.backward(dy)
    w = lin.weight.astype(npdt)  # the layer computes with its weights in `dtype`
    ry, rdx, rdw, rdb = reference(x, w, lin.bias, dy, act)
    s = scales(x, w, dy)
    check("y", y, ry, dtype, s["y"])
    check("dx", dx, rdx, dtype, s["dx"])
    check("dw", lin.grad_weight, rdw, "f32" if dtype == "f32" else "bf16", s["dw"])
    check("db", lin.grad_bias, rdb, "f32" if dtype == "f32" else "bf16", s["db"])


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_mlp_training_reduces_loss(rng, backend, dtype):
    """A small regression task: after 150 SGD steps the loss is under half the first
    (over 20 seeds it ended at 0.12x median, 0.22x worst, for both dtypes)."""
    N, sizes = 128, [16, 64, 64, 1]
    npdt = np.float32 if dtype == "f32" else brgemm.bfloat16
    x = rng.standard_normal((N, sizes[0])).astype(np.float32)
    target = np.sin(x[:, :1] * 2) + 0.5 * x[:, 1:2]
    mlp = fc.MLP(sizes, activation="tanh", dtype=dtype, rng=rng, blocks=(32, 32, 32), backend=backend)
    losses = []
    for _ in range(150):
        y = mlp.forward(x.astype(npdt)).astype(np.float32)
        losses.append(float(np.mean((y - target) ** 2)))
        mlp.backward((2 * (y - target) / N).astype(npdt))
        mlp.step(0.1)
    print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    # the best of the last 20 steps: at lr 0.1 the loss can bounce for a step
    assert min(losses[-20:]) < 0.5 * losses[0]


def test_mlp_matches_torch_one_step(rng, backend):
    sizes, N = [10, 20, 7], 9
    mlp = fc.MLP(sizes, activation="relu", rng=rng, blocks=(16, 16, 16), backend=backend)
    x = rng.standard_normal((N, sizes[0])).astype(np.float32)
    dy = rng.standard_normal((N, sizes[-1])).astype(np.float32)
    y = mlp.forward(x)
    dx = mlp.backward(dy)
    X = to64(x)
    Ws = [to64(l.weight) for l in mlp.layers]
    Bs = [to64(l.bias) for l in mlp.layers]
    h = torch.relu(torch.nn.functional.linear(X, Ws[0], Bs[0]))
    Y = torch.nn.functional.linear(h, Ws[1], Bs[1])
    Y.backward(torch.tensor(dy, dtype=torch.float64))
    np.testing.assert_allclose(y, Y.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dx, X.grad.numpy(), rtol=1e-5, atol=1e-5)
    for layer, W, B in zip(mlp.layers, Ws, Bs):
        np.testing.assert_allclose(layer.grad_weight, W.grad.numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(layer.grad_bias, B.grad.numpy(), rtol=1e-5, atol=1e-5)


class TestBadInput:
    x = np.ones((4, 3), np.float32)
    w = np.ones((5, 3), np.float32)

    def test_forward(self):
        with pytest.raises(ValueError, match="^w: expected shape"):
            fc.forward(self.x, np.ones((5, 4), np.float32))
        with pytest.raises(ValueError, match="^b: expected shape"):
            fc.forward(self.x, self.w, np.ones(4, np.float32))
        with pytest.raises(TypeError, match="^x: expected dtype"):
            fc.forward(self.x.astype(np.float64), self.w)
        with pytest.raises(TypeError, match="^x: expected dtype"):
            fc.forward(self.x.astype(brgemm.bfloat16), self.w)  # bf16 arrays need dtype="bf16"
        with pytest.raises(ValueError, match="^x: expected 2 dimensions"):
            fc.forward(np.ones((2, 2, 3), np.float32), self.w)
        with pytest.raises(TypeError, match="^w: expected a numpy.ndarray"):
            fc.forward(self.x, [[1.0] * 3] * 5)
        with pytest.raises(ValueError, match="^dtype"):
            fc.forward(self.x, self.w, dtype="f64")
        with pytest.raises(ValueError, match="^backend"):
            fc.forward(self.x, self.w, backend="tpu")
        with pytest.raises(ValueError, match="x, w: empty sizes"):
            fc.forward(np.ones((0, 3), np.float32), self.w)

    def test_backward(self):
        with pytest.raises(ValueError, match=r"^dy: expected shape \(4, 5\)"):
            fc.backward(np.ones((4, 6), np.float32), self.x, self.w)

    def test_config(self):
        from brgemm.config import ConfigError
        from brgemm.loopspec import SpecError
        with pytest.raises(ConfigError, match="unknown key 'bq'"):
            fc.forward(self.x, self.w, config={"fwd": {"bq": 3}})
        with pytest.raises(SpecError, match="position 2"):
            fc.forward(self.x, self.w, config={"fwd": {"spec": "NKz"}})
        with pytest.raises(ValueError, match="^config: spec 'n|KCn' names loop 'n' twice"):
            fc.backward(np.ones((4, 5), np.float32), self.x, self.w,
                        config={"upd": {"spec": "n|KCn"}})
        with pytest.raises(ValueError, match="two parallel tasks"):  # the layer's chunked nest
            fc.Linear(200, 5, config={"fwd": {"spec": "nkC", "bc": 32, "chunk": 1}}).forward(
                np.ones((4, 200), np.float32))

    def test_layers(self):
        with pytest.raises(ValueError, match="^activation"):
            fc.Linear(3, 4, activation="gelu")
        with pytest.raises(ValueError, match="^C: expected a positive int"):
            fc.Linear(0, 4)
        lin = fc.Linear(3, 5)
        with pytest.raises(ValueError, match=r"^x: expected shape \(N, 3\)"):
            lin.forward(np.ones((2, 4), np.float32))
        with pytest.raises(ValueError, match="^dy: expected the forward's output shape"):
            lin.backward(np.ones((2, 5), np.float32))
        with pytest.raises(ValueError, match="^sizes"):
            fc.MLP([3])
