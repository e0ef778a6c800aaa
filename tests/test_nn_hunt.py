"""primitives.nn as a demanding PyTorch user drives it, beside torch.nn on the
same weights: outputs written in place, fused MLPs with shared weights, empty
batches, parameters swapped in place, odd tensors, Conv2d attributes set late,
torch.compile, parametrizations through convert(), threads, checkpointing,
gradients accumulated over backward calls, copies of a converted model."""
import copy
import io
import threading
import warnings

import pytest
import torch
from torch import nn
from torch.nn.utils import parametrizations, parametrize

from nn_support import assert_close, bilinear_check, f64, gen, rand  # noqa: F401 (gen: fixture)
from primitives import nn as pnn

torch.set_num_threads(1)


def first(y):
    """An LSTM's output sequence; any other module's output."""
    return y[0] if isinstance(y, tuple) else y


def torch_mlp(m):
    """torch.nn layers computing pnn.MLP m, from its weights (a weight two of
    m's layers share is shared here too), in float64."""
    layers, made = [], {}
    for i, layer in enumerate(m.layers):
        ref = nn.Linear(*layer.weight.shape[::-1], bias=layer.bias is not None).double()
        ref.load_state_dict({k: f64(v) for k, v in layer.state_dict().items()})
        ref.weight = made.setdefault(id(layer.weight), ref.weight)
        layers.append(ref)
        act = m.activation if i < len(m.layers) - 1 else m.last_activation
        if act not in (None, "none"):
            layers.append({"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}[act]())
    return nn.Sequential(*layers)


def check_grads(ours, ref, rel):
    """Each parameter's gradient against the reference module's (same names)."""
    for (name, p), (ref_name, q) in zip(ours.named_parameters(), ref.named_parameters()):
        assert name.split(".")[-1] == ref_name.split(".")[-1], (name, ref_name)
        assert (p.grad is None) == (q.grad is None), name
        if p.grad is not None:
            assert_close(name, p.grad, f64(q.grad), rel * (q.grad.abs().max() + 1))


# ---------------------------------------------------------------- outputs written in place

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(), (5,), (2, 3)])
def test_linear_output_written_in_place(rng, gen, dtype, shape):
    """The output was a view made inside the autograd Function (the reshape to
    x's shape), and torch refuses to write those in place: nn.ReLU(inplace=True)
    after a Linear raised. Now as torch.nn.Linear, values and gradients."""
    C, K = (int(v) for v in rng.integers(1, 40, 2))
    m = pnn.Linear(C, K, dtype=dtype)
    x = rand(gen, *shape, C, dtype=dtype).requires_grad_()
    y = m(x)
    y.mul_(-2)  # linear, so the float64 check below holds as it is
    dy = rand(gen, *y.shape, dtype=dtype)
    y.backward(dy)
    rel = 1e-5 if dtype == torch.float32 else 1e-2
    bilinear_check(lambda x_, w_, b_: nn.functional.linear(x_, w_, b_) * 2,
                   [x, m.weight, m.bias], (-y, x.grad, m.weight.grad, m.bias.grad), -dy, rel,
                   ["dx", "dweight", "dbias"])
    nn.ReLU(inplace=True)(m(x)).sum().backward()  # the case that raised


@pytest.mark.parametrize("fused", [False, True])
def test_mlp_output_written_in_place(rng, gen, fused):
    sizes = [int(v) for v in rng.integers(1, 30, 3)]
    print(f"sizes={sizes}")
    m = pnn.MLP(sizes, activation="tanh", fused=fused)
    ref = torch_mlp(m)
    x = rand(gen, 2, 4, sizes[0])
    xs = [x.clone().requires_grad_(), f64(x, True)]
    ys = [m(xs[0]), ref(xs[1])]
    for y in ys:
        y.add_(1).mul_(3)
        y.square().sum().backward()
    assert_close("y", ys[0], ys[1], 1e-5 * (ys[1].abs() + 1))
    assert_close("dx", xs[0].grad, xs[1].grad, 1e-5 * (xs[1].grad.abs().max() + 1))
    check_grads(m, ref, 1e-5)


# ---------------------------------------------------------------- fused MLP, LSTM, odd input

@pytest.mark.parametrize("bias", [True, False])
def test_fused_mlp_layers_sharing_a_weight(rng, gen, bias):
    """parameters() lists a shared weight once: the fused MLP took its list for
    one weight (and bias) per layer, so layers got the wrong tensors (an
    unclear shape error, or the wrong product where the shapes fit)."""
    C, W, K = (int(v) for v in rng.integers(1, 30, 3))
    print(f"C={C} W={W} K={K}")
    m = pnn.MLP([C, W, W, W, K], activation="tanh", bias=bias, fused=True)
    m.layers[2].weight = m.layers[1].weight
    ref = torch_mlp(m)
    assert len(list(ref.parameters())) == len(list(m.parameters()))
    x = rand(gen, 9, C)
    xs = [x.clone().requires_grad_(), f64(x, True)]
    for step in range(2):  # the second accumulates onto the first
        ys = [m(xs[0]), ref(xs[1])]
        for y in ys:
            y.square().sum().backward()
        assert_close(f"y {step}", ys[0], ys[1], 1e-5 * (ys[1].abs() + 1))
        check_grads(m, ref, 1e-5)


def test_fused_mlp_refuses_what_torch_refuses(gen):
    """Weights changed in place between forward and backward: the fused MLP's
    backward read the new ones (wrong gradients, silently) where torch.nn
    raises; a second backward without retain_graph ran again where torch
    raises. Both raise torch's errors now."""
    m = pnn.MLP([4, 6, 3], fused=True)
    x = rand(gen, 5, 4)
    y = m(x)
    with torch.no_grad():
        m.layers[1].weight.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    y = m(x)
    y.sum().backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.sum().backward()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
def test_fused_mlp_on_cuda_backward_behind_views(gen):
    """The CUDA fused MLP's backward as the first work of autograd's CUDA
    thread (only views after it: no torch kernel had made the primary context
    current there) failed with CUDA_ERROR_INVALID_CONTEXT."""
    import brgemm
    if "cuda" not in brgemm.backends():
        pytest.skip("brgemm's cuda backend is not built")
    m = pnn.MLP([64, 64, 32], fused=True).cuda()
    x = rand(gen, 50, 64).cuda().requires_grad_()
    m(x).view(-1).view(50, 32).backward(torch.ones(50, 32, device="cuda"))
    assert x.grad.abs().sum() > 0


def test_fused_mlp_empty_batch_and_bad_input_as_unfused(gen):
    """No rows: torch's own products, as the unfused MLP (the fused one raised
    'x: an empty batch is not supported'); a wrong width names `input`."""
    for fused in (False, True):
        m = pnn.MLP([5, 7, 3], fused=fused)
        x = rand(gen, 0, 5).requires_grad_()
        y = m(x)
        assert y.shape == (0, 3)
        y.sum().backward()
        assert x.grad.shape == (0, 5)
        assert all(torch.equal(p.grad, torch.zeros_like(p)) for p in m.parameters())
        with pytest.raises(ValueError, match=r"^input: expected last dimension 5"):
            m(rand(gen, 2, 3, 4))
        with pytest.raises(TypeError, match="^input: expected"):
            m(rand(gen, 3, 5).double())
    with pytest.raises(TypeError, match="^input: expected a torch.Tensor"):
        pnn.MLP([5, 3], fused=True)([[1.0] * 5])


@pytest.mark.parametrize("batch_first", [False, True])
def test_lstm_empty_batch_as_torch(gen, batch_first):
    """No sequences (N = 0): torch's own, as nn.LSTM (it raised before); an
    empty sequence (T = 0) raises as torch does, naming the input's shape."""
    ours, theirs = pnn.LSTM(5, 4, batch_first=batch_first), nn.LSTM(5, 4, batch_first=batch_first)
    theirs.load_state_dict(ours.state_dict())
    x = rand(gen, *((0, 3, 5) if batch_first else (3, 0, 5))).requires_grad_()
    (y, (h, c)), (yr, (hr, cr)) = ours(x), theirs(x)
    assert y.shape == yr.shape and h.shape == hr.shape == c.shape == (1, 0, 4)
    y.sum().backward()
    assert x.grad.shape == x.shape
    with pytest.raises(ValueError, match=r"^input: an empty sequence, shape \(0, 5\)"):
        ours(rand(gen, 0, 5))


def test_to_and_load_state_dict_with_swapped_parameters(gen):
    """With torch.__future__.set_swap_module_params_on_conversion(True),
    Module.to() and load_state_dict swap each parameter in place
    (torch.utils.swap_tensors), which refuses a tensor anything refers to
    weakly: a used Linear or Conv2d (its kept blocked copy's reuse.tensors
    token) raised 'Couldn't swap'. (torch's own nn.LSTM cannot load a
    state_dict so: its _flat_weight_refs; ours can.)"""
    torch.manual_seed(int(torch.randint(2**31, (1,), generator=gen)))
    ours, other = pnn.convert(Net()), Net()
    x = rand(gen, 2, 2, 6, 6)
    before = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        with torch.no_grad():
            ours(x)
            params = list(ours.parameters())
            ours.to(torch.bfloat16)
            ours(x.bfloat16())
            ours.float()
            ours(x)
            ours.load_state_dict(other.state_dict())
            assert all(p is q for p, q in zip(params, ours.parameters()))  # swapped in place
    finally:
        torch.__future__.set_swap_module_params_on_conversion(before)
    with torch.no_grad():
        want = other(x)
        assert_close("after the round trip and load", ours(x), f64(want),
                     1e-4 * (want.abs().max() + 1))


def test_negated_views_and_sparse_input(gen):
    """A negated view (torch._neg_view; Tensor.numpy() refuses it) is read as
    its values; sparse and mkldnn tensors raise a TypeError naming the input
    (it was torch's 'reshape is not implemented for sparse tensors')."""
    ours, theirs = pnn.Linear(6, 3), nn.Linear(6, 3)
    theirs.load_state_dict(ours.state_dict())
    x = rand(gen, 4, 6)
    want = theirs(-x)
    assert_close("neg view", ours(torch._neg_view(x)), f64(want), 1e-5 * (want.abs().max() + 1))
    conv = pnn.Conv2d(2, 3, 3)
    img = rand(gen, 1, 2, 5, 5)
    assert torch.equal(conv(torch._neg_view(img)), conv(-img))
    for bad in (x.to_sparse(), x.to_mkldnn()):
        with pytest.raises(TypeError, match="^input: expected a dense tensor"):
            ours(bad)
    with pytest.raises(TypeError, match="^input: expected a dense tensor"):
        pnn.LSTM(6, 3)(rand(gen, 2, 6).to_sparse())


@pytest.mark.parametrize("attr, value", [("dilation", (2, 2)), ("groups", 2),
                                         ("padding_mode", "reflect")])
def test_conv2d_attributes_set_after_construction(gen, attr, value):
    """Attributes set after construction (as some segmentation code sets
    dilation in place) ran as if unset: a wrong result, silently. Refused by
    name now, as at construction; stride and padding set after are honoured."""
    m = pnn.Conv2d(4, 4, 3, padding=1)
    x = rand(gen, 1, 4, 8, 8)
    setattr(m, attr, value)
    with pytest.raises(ValueError, match=f"^{attr}: only"):
        m(x)
    m = pnn.Conv2d(4, 4, 3, padding=1)
    ref = nn.Conv2d(4, 4, 3, padding=1)
    ref.load_state_dict(m.state_dict())
    for mod in (m, ref):
        mod.stride, mod.padding = (2, 1), (0, 2)
    want = ref(x)
    assert_close("stride, padding", m(x), f64(want), 1e-5 * (want.abs().max() + 1) * 10)


# ---------------------------------------------------------------- compile, parametrize, threads

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3)
        self.lin = nn.Linear(3 * 4 * 4, 5)
        self.rnn = nn.LSTM(5, 4)

    def forward(self, x):
        h = torch.relu(self.conv(x)).flatten(1)
        h = torch.tanh(self.lin(h))
        return self.rnn(h.unsqueeze(0))[0].squeeze(0)


def net_with_head(gen):
    """Net and a Linear head in torch; the same converted, the head a fused MLP."""
    torch.manual_seed(int(torch.randint(2**31, (1,), generator=gen)))
    ref = nn.Sequential(Net(), nn.Linear(4, 6))
    ours = pnn.convert(copy.deepcopy(ref))
    ours[1] = pnn.MLP([4, 6], fused=True)
    ours[1].layers[0].load_state_dict(ref[1].state_dict())
    return ref, ours


def test_torch_compile_of_a_converted_model(gen):
    """Dynamo traced into the primitives and failed inside its own guards (an
    InternalTorchDynamoError on brgemm's cffi library). The LSTM's forward is
    now a graph break, Linear and Conv2d custom operators (test_nn_compile)."""
    ref, ours = net_with_head(gen)
    compiled = torch.compile(ours, backend="eager")
    for step in range(2):
        x = rand(gen, 3, 2, 6, 6)
        y, want = compiled(x), ref(x)
        assert_close(f"y {step}", y, f64(want), 1e-4 * (want.abs().max() + 1))
        for m in (ours, ref):
            m.zero_grad()
        y.square().sum().backward()
        want.square().sum().backward()
        check_grads(ours, ref, 1e-4)


def test_convert_takes_parametrized_modules(gen):
    """torch.nn.utils.parametrize makes a subclass per module; convert() left
    those as 'subclasses ... whose forward may differ'. Now they are ours, with
    their parametrizations, and train as torch's; removing the last one leaves
    our class. A parametrized module of ours is left alone, unlisted."""
    torch.manual_seed(int(torch.randint(2**31, (1,), generator=gen)))
    ref = Net()
    parametrizations.weight_norm(ref.conv)
    parametrizations.spectral_norm(ref.lin)  # a power iteration on each access (training)
    parametrizations.weight_norm(ref.rnn, "weight_hh_l0")
    ours = copy.deepcopy(ref)
    params = dict(ours.named_parameters())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pnn.convert(ours)
    assert ours.unconverted == []
    assert all(p is params[n] for n, p in ours.named_parameters())
    for name, cls in (("conv", pnn.Conv2d), ("lin", pnn.Linear), ("rnn", pnn.LSTM)):
        assert isinstance(getattr(ours, name), cls) and parametrize.is_parametrized(
            getattr(ours, name)), name
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (ours, ref)]
    x = rand(gen, 2, 2, 6, 6)
    for step in range(2):
        ys = [m(x) for m in (ours, ref)]
        assert_close(f"y {step}", ys[0], f64(ys[1]), 1e-4 * (ys[1].abs().max() + 1))
        for y, opt in zip(ys, opts):
            opt.zero_grad()
            y.square().sum().backward()
        check_grads(ours, ref, 1e-4)
        for opt in opts:
            opt.step()
    parametrize.remove_parametrizations(ours.conv, "weight")
    assert type(ours.conv) is pnn.Conv2d
    mine = pnn.Linear(3, 2)
    parametrizations.weight_norm(mine)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert pnn.convert(nn.Sequential(mine)).unconverted == []


@pytest.mark.parametrize("kind", ["lstm", "fused mlp"])
def test_one_module_from_several_threads(gen, kind):
    """The LSTM's layer and the fused MLP's net (their buffers, their saved
    state) were shared by every call: threads calling one module got each
    other's results. Each thread's forward and backward as run alone."""
    m, shape = {"lstm": (pnn.LSTM(6, 5), (4, 3, 6)),
                "fused mlp": (pnn.MLP([6, 16, 16, 3], fused=True), (40, 6))}[kind]
    params = list(m.parameters())
    xs = [rand(gen, *shape).requires_grad_() for _ in range(4)]

    def step(x):
        y = first(m(x))
        return [y.detach()] + list(torch.autograd.grad(y.square().sum(), [x] + params))

    want = [step(x) for x in xs]
    failures = []

    def work(i):
        try:
            for _ in range(8):
                for name, got, w in zip(["y", "dx"] + [f"p{j}" for j in range(9)], step(xs[i]),
                                        want[i]):
                    assert_close(f"thread {i} {name}", got, f64(w), 1e-5 * (w.abs().max() + 1))
        except Exception as e:  # noqa: BLE001  (reported by the main thread)
            failures.append(f"thread {i}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures


def run_with_deadline(fn, seconds=120):
    """fn() in a daemon thread: a hang fails the test instead of stopping the run."""
    out = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"still running after {seconds} s (a lock taken twice?)"
    assert out, "fn raised (see the thread's traceback above)"
    return out[0]


@pytest.mark.parametrize("reentrant", [False, True])
def test_checkpointed_modules_as_torch(gen, reentrant):
    """torch.utils.checkpoint recomputes a forward while the backward unpacks
    what it saved: the LSTM's backward must not hold its lock then (it hung),
    and the recomputed forward must not stand in for the original's state."""
    from torch.utils.checkpoint import checkpoint
    ref, ours = net_with_head(gen)
    xs = [rand(gen, 3, 2, 6, 6).requires_grad_()]  # (reentrant: else no parameter's grad)
    xs.append(xs[0].detach().clone().requires_grad_())

    def step(m, x):
        y = checkpoint(m, x, use_reentrant=reentrant)
        (y.square().sum() + m(x[:2]).sum()).backward()  # another forward between the two
        return y

    y = run_with_deadline(lambda: step(ours, xs[0]))
    want = step(ref, xs[1])
    assert_close("y", y, f64(want), 1e-4 * (want.abs().max() + 1))
    assert_close("dx", xs[0].grad, f64(xs[1].grad), 1e-4 * (xs[1].grad.abs().max() + 1))
    check_grads(ours, ref, 1e-4)


# ---------------------------------------------------------------- gradients, copies

@pytest.mark.parametrize("kind", ["linear", "conv", "lstm", "fused mlp"])
def test_gradients_accumulate_over_backward_calls(gen, kind):
    """No zero_grad between backward calls (one with retain_graph=True, then
    the same graph again, then a fresh forward): the sums torch.nn's give."""
    ours, ref, shape = {
        "linear": lambda: (pnn.Linear(7, 4), nn.Linear(7, 4), (5, 7)),
        "conv": lambda: (pnn.Conv2d(2, 3, 3, padding=1), nn.Conv2d(2, 3, 3, padding=1),
                         (2, 2, 5, 5)),
        "lstm": lambda: (pnn.LSTM(6, 4), nn.LSTM(6, 4), (3, 2, 6)),
        "fused mlp": lambda: (pnn.MLP([6, 8, 3], fused=True), None, (5, 6)),
    }[kind]()
    ref = torch_mlp(ours) if ref is None else ref.double()
    if kind != "fused mlp":
        ref.load_state_dict({k: f64(v) for k, v in ours.state_dict().items()})
    x1, x2 = rand(gen, *shape), rand(gen, *shape)
    for m, cast in ((ours, lambda t: t), (ref, f64)):
        loss = first(m(cast(x1))).square().sum()
        loss.backward(retain_graph=True)
        loss.backward()
        first(m(cast(x2))).sin().sum().backward()
    check_grads(ours, ref, 1e-5)


def test_copies_of_a_converted_model_train_apart(gen):
    """deepcopy and torch.save/load of a whole converted model after training
    steps: each copy and the original then train on their own data, and each
    computes what a torch copy trained alike does (no blocked weights, kept
    LSTM layer or fused net shared between them)."""
    torch.manual_seed(int(torch.randint(2**31, (1,), generator=gen)))
    ref = Net()
    model = pnn.convert(copy.deepcopy(ref))
    x = rand(gen, 3, 2, 6, 6)
    for m in (model, ref):
        first(m(x)).sum().backward()
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    models = [model, copy.deepcopy(model), torch.load(buf, weights_only=False)]
    refs = [ref] + [copy.deepcopy(ref) for _ in range(2)]
    opts = [torch.optim.SGD(m.parameters(), lr=0.05) for m in models + refs]
    for step in range(3):
        for i, (m, r) in enumerate(zip(models, refs)):
            if step == 1 and i == 1:
                continue  # the deep copy skips a step: the others must not notice
            xi = x * (i + 1) + step
            for mm, opt in ((m, opts[i]), (r, opts[i + 3])):
                opt.zero_grad()
                mm(xi).square().sum().backward()
                opt.step()
    for i, (m, r) in enumerate(zip(models, refs)):
        want = r(x)
        assert_close(f"copy {i}", m(x), f64(want), 1e-4 * (want.abs().max() + 1))
