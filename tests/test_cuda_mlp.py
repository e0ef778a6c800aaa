"""fc.MLP(fused=True, backend="cuda"): the fused CUDA kernels (kernels/cuda/mlp_fused.cu)
against the float64 reference of test_mlp_fused (per-element bounds, with the
bf16 roundings the kernel makes; act' of hidden layers from their bf16 output,
as the kernel keeps them) and against PyTorch's CUDA autograd on the same bf16
values. Random widths, depths, activations and row counts that are no multiple
of any tile; both training paths (stored activations with the weight gradients
as batch-reduce plans, and recompute); NumPy arrays and PyTorch CUDA tensors;
CUDA-graph capture; the shapes the kernels refuse fall back with a warning.
Skipped without a GPU."""
import os
import threading
import types
import warnings

import numpy as np
import pytest

import brgemm
from primitives import fc

if "cuda" not in brgemm.backends():
    pytest.skip("no CUDA device here", allow_module_level=True)

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("PyTorch has no CUDA here", allow_module_level=True)

from brgemm.backend import _cuda_mlp  # noqa: E402
from primitives import mlp_cuda  # noqa: E402
from test_mlp_fused import check, reference, step16  # noqa: E402

ACTS = ["relu", "sigmoid", "tanh", "none"]
MODES = mlp_cuda.MODES


def new_seed():
    """A fresh seed, printed; BRGEMM_SEED replays a printed one."""
    seed = int(os.environ.get("BRGEMM_SEED") or np.random.SeedSequence().entropy % 2**31)
    print("seed", seed)
    return seed


def random_case(rng, big=False):
    """Sizes the kernels take (all layers' weights of deep MLPs of width 128 need
    more shared memory than a block has: hidden layers are dropped until they fit)."""
    width = int(rng.choice([16, 32, 64, 128]))
    hidden = int(rng.integers(0, 5))
    while True:
        sizes = [int(rng.integers(1, 129))] + [width] * hidden + [int(rng.integers(1, 129))]
        try:
            _cuda_mlp.Shape(sizes)
            break
        except _cuda_mlp.Unsupported:
            hidden = max(0, hidden - 1)
    N = int(rng.integers(60_000, 90_000)) if big else int(rng.integers(1, 700))
    return sizes, N, str(rng.choice(ACTS)), str(rng.choice(ACTS))


def host(a):
    return a.float().cpu().numpy() if isinstance(a, torch.Tensor) else a


def check_all(net, x, dy, y, dx, seed, what):
    ry, rdx, grads = reference(net, x, dy, True, grad_from_bf16=True)
    check(f"y {what}", np.asarray(y, np.float64), ry, seed)
    check(f"dx {what}", np.asarray(dx, np.float64), rdx, seed)
    for i, (layer, (rdw, rdb)) in enumerate(zip(net.layers, grads)):
        check(f"dW[{i}] {what}", host(layer.grad_weight), rdw, seed)
        if layer.bias is not None:
            check(f"db[{i}] {what}", host(layer.grad_bias), rdb, seed)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", range(8))
def test_numpy_arrays_match_float64(case, mode):
    seed = new_seed()
    rng = np.random.default_rng(seed)
    sizes, N, act, last = random_case(rng, big=case == 0)
    bias = bool(rng.random() < 0.8)
    net = fc.MLP(sizes, activation=act, last_activation=last, bias=bias, dtype="bf16",
                 backend="cuda", fused=True, rng=rng)
    assert isinstance(net.fused, mlp_cuda.CudaFused)
    net.fused.backward_mode = mode
    x = rng.standard_normal((N, sizes[0])).astype(np.float32)
    dy = rng.standard_normal((N, sizes[-1])).astype(np.float32)
    y = net.forward(x)
    dx = net.backward(dy)
    assert y.dtype == np.float32 and dx.dtype == np.float32
    what = f"{sizes} N={N} {act}/{last} bias={bias} {mode} (stored: {net.fused.stored()})"
    print(what)
    check_all(net, x, dy, y, dx, seed, what)
    ry = reference(net, x, dy, True, grad_from_bf16=True)[0]
    check(f"y (inference) {what}", net.forward(x, train=False), ry, seed)


def torch_autograd(net, x, dy, dtype=torch.float32):
    """y, dx, [(dW, db)] by PyTorch CUDA autograd in `dtype` on the bf16-rounded x and W."""
    X = x.to(dtype).clone().requires_grad_(True)
    h, params = X, []
    for layer in net.layers:
        W = torch.tensor(layer.weight, device="cuda").bfloat16().to(dtype).requires_grad_(True)
        B = torch.tensor(layer.bias, device="cuda").to(dtype).requires_grad_(True)
        params.append((W, B))
        h = torch.nn.functional.linear(h, W, B)
        if layer.activation not in (None, "none"):
            h = getattr(torch, layer.activation)(h)
    h.backward(dy.to(dtype))
    return h.detach(), X.grad, [(W.grad, B.grad) for W, B in params]


def rel(a, b):
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_torch_tensors_in_place(dtype, mode):
    """CUDA tensors in, CUDA tensors out (no copies): within the float64 bounds
    (bf16 results one rounding more) and close to PyTorch's own autograd."""
    seed = new_seed()
    rng = np.random.default_rng(seed)
    sizes, N, act, last = random_case(rng)
    net = fc.MLP(sizes, activation=act, last_activation=last, dtype="bf16", backend="cuda",
                 fused=True, rng=rng)
    net.fused.backward_mode = mode
    x = torch.tensor(rng.standard_normal((N, sizes[0])), device="cuda").to(dtype)
    dy = torch.tensor(rng.standard_normal((N, sizes[-1])), device="cuda").to(dtype)
    y = net.forward(x)
    dx = net.backward(dy)
    assert isinstance(y, torch.Tensor) and y.device.type == "cuda" and y.dtype == dtype
    assert isinstance(dx, torch.Tensor) and dx.dtype == dtype and dx.shape == (N, sizes[0])
    dw = net.layers[0].grad_weight
    assert isinstance(dw, torch.Tensor) and dw.dtype == torch.float32
    what = f"{sizes} N={N} {act}/{last} {dtype} {mode}"
    xn, dyn = x.float().cpu().numpy(), dy.float().cpu().numpy()
    ry, rdx, grads = reference(net, xn, dyn, True, grad_from_bf16=True)
    if dtype == torch.bfloat16:  # returned in bf16: half a step more
        from tolerance import bf16_step
        ry = (ry[0], ry[1] + bf16_step(np.abs(ry[0]) + ry[1]))
        rdx = (rdx[0], rdx[1] + bf16_step(np.abs(rdx[0]) + rdx[1]))
    check(f"y {what}", y.float().cpu().numpy(), ry, seed)
    check(f"dx {what}", dx.float().cpu().numpy(), rdx, seed)
    for i, (layer, (rdw, rdb)) in enumerate(zip(net.layers, grads)):
        check(f"dW[{i}] {what}", layer.grad_weight.cpu().numpy(), rdw, seed)
        check(f"db[{i}] {what}", layer.grad_bias.cpu().numpy(), rdb, seed)
    # PyTorch autograd in f32 on the same bf16 values. Rounding activations to bf16 moves
    # a few relu decisions (each one a whole element of a gradient), so the yardstick is
    # how far PyTorch's own bf16 autograd lands from its f32 one, plus how far the float64
    # model of our roundings (checked above element by element) lands from it: where its
    # decisions differ from PyTorch's f32 ones (seed 1410781954: dx 4.3e-2 against torch
    # bf16's 3.8e-3), ours follow them
    ty, tdx, tgrads = torch_autograd(net, x, dy)
    by, bdx, bgrads = torch_autograd(net, x, dy, torch.bfloat16)
    ours = [y, dx] + [layer.grad_weight for layer in net.layers]
    f32 = [ty, tdx] + [tw for tw, _ in tgrads]
    b16 = [by, bdx] + [bw for bw, _ in bgrads]
    model = [torch.as_tensor(v, device=ty.device)
             for v in [ry[0], rdx[0]] + [rdw[0] for rdw, _ in grads]]
    for name, o, t, b, m in zip(["y", "dx"] + [f"dW{i}" for i in range(len(net.layers))], ours,
                                f32, b16, model):
        print(f"{name}: ours {rel(o, t):.2e}, torch bf16 {rel(b, t):.2e}, "
              f"our rounding model {rel(m, t):.2e} from torch f32")
        assert rel(o, t) <= 3 * rel(b, t) + rel(m, t) + 1e-2, name


@pytest.mark.parametrize("mode", MODES)
def test_deterministic_weight_gradients(mode):
    """The two-stage reduction adds the blocks' partial sums in a fixed order."""
    seed = new_seed()
    rng = np.random.default_rng(seed)
    net = fc.MLP([64] * 6, dtype="bf16", backend="cuda", fused=True, rng=rng)
    net.fused.backward_mode = mode
    x = torch.randn(100_003, 64, device="cuda").bfloat16()
    dy = torch.randn(100_003, 64, device="cuda").bfloat16()
    runs = []
    for _ in range(2):
        net.forward(x)
        net.backward(dy)
        runs.append(torch.cat([layer.grad_weight.flatten() for layer in net.layers]).clone())
    assert torch.equal(runs[0], runs[1])


@pytest.mark.parametrize("mode", MODES)
def test_cuda_graph_capture(mode):
    """A training step (forward + backward) captured once, replayed on new data."""
    rng = np.random.default_rng(5)
    net = fc.MLP([32, 64, 64, 16], activation="tanh", dtype="bf16", backend="cuda", fused=True,
                 rng=rng)
    net.fused.backward_mode = mode
    x = torch.randn(5000, 32, device="cuda").bfloat16()
    dy = torch.randn(5000, 16, device="cuda").bfloat16()
    net.forward(x)
    net.backward(dy)  # warm: weights uploaded and scratch allocated outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = net.forward(x)
        dx = net.backward(dy)
    x.copy_(torch.randn(5000, 32, device="cuda").bfloat16())
    graph.replay()
    torch.cuda.synchronize()
    ty, tdx, _ = torch_autograd(net, x, dy)
    assert rel(y.float(), ty) < 2e-2 and rel(dx.float(), tdx) < 2e-2


def test_stored_trains_what_recompute_cannot():
    """Width 128, 6 layers: recompute's shared memory does not fit, stored runs
    (weights only in shared memory); bf16 x of width 128, whole tiles: the weight
    gradient plan reads x in place."""
    seed = new_seed()
    rng = np.random.default_rng(seed)
    net = fc.MLP([128] * 7, activation="tanh", last_activation="sigmoid", dtype="bf16",
                 backend="cuda", fused=True, rng=rng)
    assert net.fused.shape.bwd_warps is None and net.fused.stored()
    N = 64 * 37
    x = torch.tensor(rng.standard_normal((N, 128)), device="cuda").bfloat16()
    dy = torch.tensor(rng.standard_normal((N, 128)), device="cuda").float()  # dx in f32
    y = net.forward(x)
    assert net.fused.state()["reads_x"]
    dx = net.backward(dy)
    check_all(net, x.float().cpu().numpy(), dy.float().cpu().numpy(),
              y.float().cpu().numpy(), dx.float().cpu().numpy(), seed, "width 128 x 6")


def test_two_states_backward_in_any_order():
    """Each training forward keeps its own activations (state()): two forwards,
    then their backwards in reverse order, each right."""
    seed = new_seed()
    rng = np.random.default_rng(seed)
    net = fc.MLP([24, 32, 32, 8], activation="relu", dtype="bf16", backend="cuda", fused=True,
                 rng=rng)
    xs = [torch.tensor(rng.standard_normal((n, 24)), device="cuda").float() for n in (100, 300)]
    dys = [torch.tensor(rng.standard_normal((n, 8)), device="cuda").float() for n in (100, 300)]
    states, ys = [], []
    for x in xs:
        ys.append(net.forward(x))
        states.append(net.fused.state())
    for i in (1, 0):
        dx = net.fused.backward(dys[i], states[i])
        check_all(net, xs[i].cpu().numpy(), dys[i].cpu().numpy(), ys[i].cpu().numpy(),
                  dx.cpu().numpy(), seed, f"state {i}")


def test_weights_follow_sgd_steps():
    """step() changes the host weights: the next forward uploads them."""
    rng = np.random.default_rng(7)
    net = fc.MLP([20, 48, 10], dtype="bf16", backend="cuda", fused=True, rng=rng)
    x = rng.standard_normal((333, 20)).astype(np.float32)
    dy = rng.standard_normal((333, 10)).astype(np.float32)
    net.forward(x)
    net.backward(dy)
    net.step(0.5)
    y = net.forward(x)
    dx = net.backward(dy)
    check_all(net, x, dy, y, dx, 7, "after a step")


def test_unsupported_shapes_fall_back_with_a_warning():
    rng = np.random.default_rng(11)
    for sizes, dtype, word in (([200, 64, 8], "bf16", "sizes"), ([16, 16, 4], "f32", "dtype"),
                               ([128] * 16, "bf16", "sizes")):
        with pytest.warns(UserWarning, match=f"runs layer by layer on 'cuda': {word}:"):
            net = fc.MLP(sizes, dtype=dtype, backend="cuda", fused=True, rng=rng)
        assert net.fused is None
        x = rng.standard_normal((50, sizes[0])).astype(np.float32)
        y = net.forward(x)
        assert y.shape == (50, sizes[-1]) and np.isfinite(y).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert fc.MLP([64] * 6, dtype="bf16", backend="cuda", fused=True).fused is not None


def test_bad_arguments_are_named():
    net = fc.MLP([8, 16, 4], dtype="bf16", backend="cuda", fused=True)
    with pytest.raises(ValueError, match="^x: expected shape"):
        net.forward(np.zeros((5, 9), np.float32))
    with pytest.raises(TypeError, match="^x: expected dtype"):
        net.forward(np.zeros((5, 8), np.float64))
    with pytest.raises(ValueError, match="^x: an empty batch"):
        net.forward(np.zeros((0, 8), np.float32))
    with pytest.raises(TypeError, match="^x: expected a numpy.ndarray"):
        net.forward([[1.0] * 8])
    with pytest.raises(ValueError, match="^x: is on DLPack device"):
        net.forward(torch.zeros(5, 8))
    net.forward(np.zeros((5, 8), np.float32), train=False)
    with pytest.raises(ValueError, match="^dy: expected the training forward"):
        net.backward(np.zeros((5, 4), np.float32))
    net.forward(np.zeros((5, 8), np.float32))
    with pytest.raises(ValueError, match="^dy: expected the training forward"):
        net.backward(np.zeros((6, 4), np.float32))
    with pytest.raises(ValueError, match="^backward_mode: expected one of stored, recompute"):
        mlp_cuda.CudaFused(net.layers, "bf16", backward_mode="later")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_nn_mlp_fused_on_cuda_tensors(dtype):
    """primitives.nn.MLP(fused=True) on CUDA tensors: forward and every gradient
    through autograd against the float64 reference with the kernels' bf16
    roundings (per-element bounds; in a bf16 model each gradient is rounded
    once more, to the parameter's dtype), an optimizer step, then a second
    step on the moved weights. (A norm against PyTorch's own bf16 autograd
    is no yardstick: on layers whose weight gradients cancel, the two
    rounding orders differ by several times either's error.)"""
    from primitives import nn as ours
    seed = new_seed()
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    sizes, N, act, last = random_case(rng)
    last = None if last == "none" else last
    model = ours.MLP(sizes, activation=act, last_activation=last, fused=True).cuda().to(dtype)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    what = f"{sizes} N={N} {act}/{last} {dtype}"
    print(what)
    for step in range(2):
        x = torch.tensor(rng.standard_normal((N, sizes[0])), device="cuda").to(dtype)
        dy = torch.tensor(rng.standard_normal((N, sizes[-1])), device="cuda").to(dtype)
        xg = x.clone().requires_grad_(True)
        opt.zero_grad()
        y = model(xg)
        assert y.dtype == dtype and y.shape == (N, sizes[-1])
        y.backward(dy)
        params = list(model.parameters())
        assert all(p.grad.dtype == dtype and p.grad.shape == p.shape for p in params)
        layers = [types.SimpleNamespace(weight=host(w.detach()), bias=host(b.detach()),
                                        K=w.shape[0], activation=act if i < len(sizes) - 2 else last)
                  for i, (w, b) in enumerate(zip(params[::2], params[1::2]))]
        (ry, rdx, grads) = reference(types.SimpleNamespace(layers=layers), host(x), host(dy), True,
                                     grad_from_bf16=True)
        check(f"y step {step} {what}", host(y.detach()), ry, seed)
        check(f"dx step {step} {what}", host(xg.grad), rdx, seed)
        for (name, p), (v, e) in zip(model.named_parameters(), (g for pair in grads for g in pair)):
            if dtype == torch.bfloat16:
                e = e + step16(np.abs(v) + e)
            check(f"{name} step {step} {what}", host(p.grad), (v, e), seed)
        with torch.no_grad():  # an inference forward (nothing kept): the same y
            y_inf = model(x)
        assert not y_inf.requires_grad
        check(f"y no_grad step {step} {what}", host(y_inf), ry, seed)
        opt.step()


def test_nn_mlp_fused_on_cuda_refuses_what_it_cannot_run():
    from primitives import nn as ours
    model = ours.MLP([300, 16, 4], fused=True).cuda()
    with pytest.raises(ValueError, match="^sizes: the fused MLP cannot run"):
        model(torch.zeros(3, 300, device="cuda"))
    model = ours.MLP([8, 16, 4], fused=True).cuda().double()
    with pytest.raises(ValueError, match="^input: the fused MLP on CUDA takes float32"):
        model(torch.zeros(3, 8, device="cuda", dtype=torch.float64))


def on_new_thread(fn):
    """fn() on a thread of its own, which has never made a CUDA context
    current (as autograd's and users' threads); its result, or its error raised."""
    box = []

    def body():
        try:
            box.append((True, fn()))
        except BaseException as e:  # noqa: BLE001 (raised again on the caller's thread)
            box.append((False, e))
    t = threading.Thread(target=body)
    t.start()
    t.join()
    ok, value = box[0]
    if not ok:
        raise value
    return value


@pytest.mark.parametrize("mode", MODES)
def test_driver_calls_on_threads_without_a_context(mode):
    """CUDA contexts are per thread: building, running, copying and freeing
    each on a thread that never touched CUDA must work (brgemm makes its
    context current for every driver call)."""
    from brgemm.backend.cuda import DeviceArray
    seed = new_seed()
    rng = np.random.default_rng(seed)
    sizes, N, act, last = random_case(rng)
    net = on_new_thread(lambda: fc.MLP(sizes, activation=act, last_activation=last,
                                       dtype="bf16", backend="cuda", fused=True, rng=rng))
    net.fused.backward_mode = mode
    x = rng.standard_normal((N, sizes[0])).astype(np.float32)
    dy = rng.standard_normal((N, sizes[-1])).astype(np.float32)
    y = on_new_thread(lambda: net.forward(x))
    dx = on_new_thread(lambda: net.backward(dy))
    check_all(net, x, dy, y, dx, seed, f"{sizes} N={N} {act}/{last} {mode}, threads")
    kept = [on_new_thread(lambda: DeviceArray.from_numpy(x))]
    assert np.array_equal(on_new_thread(kept[0].numpy), x)
    torch.cuda.synchronize()
    before = torch.cuda.mem_get_info()[0]
    kept.append(on_new_thread(lambda: DeviceArray((64 << 20,), np.float32)))  # 256 MiB
    assert torch.cuda.mem_get_info()[0] < before - (200 << 20)
    on_new_thread(kept.clear)  # the last references go there: freed there
    assert torch.cuda.mem_get_info()[0] > before - (64 << 20), "freed on another thread"
