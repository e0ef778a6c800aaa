"""primitives.nn's modules against torch.nn's in float64: outputs and every
gradient on random shapes (f32 and bf16), weights changed in place, inference
mode, copies. State dicts, optimizers, convert() and bad input:
test_nn_convert.py."""
import copy
import warnings

import pytest
import torch
from torch import nn

from nn_support import assert_close, bilinear_check, ctor_args, f64, gen, rand  # noqa: F401
# (gen: a fixture, found by name)
from primitives import fc, nn_ops
from primitives import nn as pnn

torch.set_num_threads(1)


# ---------------------------------------------------------------- tensors <-> arrays

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_contiguous_tensors_are_viewed_not_copied(gen, dtype):
    t = rand(gen, 5, 7, dtype=dtype)
    a = pnn._array(t)
    assert a.__array_interface__["data"][0] == t.data_ptr() and a.shape == (5, 7)
    assert torch.equal(pnn._tensor(a), t)
    assert pnn._tensor(a).data_ptr() == t.data_ptr()
    strided = t.t()  # the layout does not allow a view: a contiguous copy
    assert torch.equal(pnn._tensor(pnn._array(strided)), strided)


# ---------------------------------------------------------------- Linear

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("layout", ["plain", "strided", "nograd", "3d"])
def test_linear_matches_torch(rng, gen, dtype, bias, layout):
    N, C, K = (int(v) for v in rng.integers(1, 80, 3))
    print(f"N={N} C={C} K={K}")
    m = pnn.Linear(C, K, bias=bias, dtype=dtype)
    if layout == "strided":  # a transposed view: not contiguous
        x = rand(gen, C, N, dtype=dtype).t()
    elif layout == "3d":
        x = rand(gen, 2, N, C, dtype=dtype)
    else:
        x = rand(gen, N, C, dtype=dtype)
    x.requires_grad_(layout != "nograd")
    y = m(x)
    assert y.dtype == dtype and y.shape == x.shape[:-1] + (K,)
    dy = rand(gen, *y.shape, dtype=dtype)
    y.backward(dy)
    assert (x.grad is None) == (layout == "nograd")
    rel = 1e-5 if dtype == torch.float32 else 1e-2
    params = [m.weight] + ([m.bias] if bias else [])
    bilinear_check(lambda x_, w_, *b_: nn.functional.linear(x_, w_, *b_), [x] + params,
                   (y, x.grad, m.weight.grad, m.bias.grad if bias else None), dy, rel,
                   ["dx", "dweight", "dbias"])


def test_mlp_matches_torch_sequential(rng, gen):
    sizes = [int(v) for v in rng.integers(1, 50, 4)]
    print(f"sizes={sizes}")
    m = pnn.MLP(sizes, activation="tanh", last_activation="sigmoid")
    ref = nn.Sequential(nn.Linear(sizes[0], sizes[1]), nn.Tanh(), nn.Linear(sizes[1], sizes[2]),
                        nn.Tanh(), nn.Linear(sizes[2], sizes[3]), nn.Sigmoid()).double()
    with torch.no_grad():
        for ours, theirs in zip(m.layers, ref[::2]):
            theirs.weight.copy_(ours.weight)
            theirs.bias.copy_(ours.bias)
    x = rand(gen, 17, sizes[0])
    y = m(x)
    y.sum().backward()
    yr = ref(f64(x))
    yr.sum().backward()
    assert_close("y", y, yr, 1e-5 * (yr.abs() + 1))
    for i, (ours, theirs) in enumerate(zip(m.layers, ref[::2])):
        scale = theirs.weight.grad.abs().max() + 1
        assert_close(f"dweight{i}", ours.weight.grad, theirs.weight.grad, 1e-5 * scale)
        assert_close(f"dbias{i}", ours.bias.grad, theirs.bias.grad, 1e-5 * scale)


# ---------------------------------------------------------------- Conv2d

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("trial", range(3))
def test_conv2d_matches_torch(rng, gen, dtype, bias, trial):
    N, C, K = int(rng.integers(1, 4)), int(rng.integers(1, 20)), int(rng.integers(1, 20))
    R, S = (int(v) for v in rng.integers(1, 4, 2))
    stride = (int(v) for v in rng.integers(1, 3, 2))
    stride = tuple(stride) if trial else int(rng.integers(1, 3))
    padding = tuple(int(v) for v in rng.integers(0, 2, 2)) if trial else int(rng.integers(0, 2))
    H, W = int(rng.integers(R, 12)), int(rng.integers(S, 12))
    print(f"N={N} C={C} K={K} H={H} W={W} R={R} S={S} stride={stride} padding={padding}")
    m = pnn.Conv2d(C, K, (R, S), stride=stride, padding=padding, bias=bias, dtype=dtype)
    x = rand(gen, N, C, H, W, dtype=dtype)
    if trial == 2:  # channels-last memory (x's, w's or both): not contiguous in torch's sense
        which = int(rng.integers(3))
        if which != 1:
            x = x.to(memory_format=torch.channels_last)
        if which != 0:
            m.to(memory_format=torch.channels_last)
    x.requires_grad_()
    y = m(x)
    if trial == 2 and not (x.is_contiguous() and m.weight.is_contiguous()):
        # torch's conv2d answers channels-last memory in kind
        assert y.is_contiguous(memory_format=torch.channels_last)
    dy = rand(gen, *y.shape, dtype=dtype)
    y.backward(dy)
    rel = 1e-5 if dtype == torch.float32 else 1e-2
    params = [m.weight] + ([m.bias] if bias else [])
    fn = lambda x_, w_, *b_: nn.functional.conv2d(x_, w_, *b_, stride=stride,  # noqa: E731
                                                  padding=padding)
    bilinear_check(fn, [x] + params, (y, x.grad, m.weight.grad, m.bias.grad if bias else None),
                   dy, rel, ["dx", "dweight", "dbias"])


def test_conv2d_same_valid_and_unbatched(gen):
    m = pnn.Conv2d(3, 4, 3, padding="same")
    ref = nn.Conv2d(3, 4, 3, padding="same")
    ref.load_state_dict(m.state_dict())
    x = rand(gen, 3, 7, 6)  # unbatched C, H, W
    assert_close("same", m(x), f64(ref(x)), 1e-5 * 30)
    m.padding, ref.padding = "valid", "valid"
    assert_close("valid", m(x), f64(ref(x)), 1e-5 * 30)


# ---------------------------------------------------------------- LSTM

def lstm_reference(m, x, hx, loss_weights):
    """torch.nn.LSTM in float64 with m's parameters: outputs and all gradients."""
    ref = nn.LSTM(m.input_size, m.hidden_size, bias=m.bias, batch_first=m.batch_first).double()
    ref.load_state_dict({k: f64(v) for k, v in m.state_dict().items()})
    X = f64(x, x.requires_grad)
    HX = None if hx is None else tuple(f64(s, True) for s in hx)
    y, (h, c) = ref(X, HX)
    loss = sum((o * f64(w)).sum() for o, w in zip((y, h, c), loss_weights))
    loss.backward()
    grads = [X.grad] + ([s.grad for s in HX] if HX else []) + [p.grad for p in ref.parameters()]
    return (y, h, c), grads


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("case", ["bias_hx", "nobias", "nohx_nograd", "unbatched"])
def test_lstm_matches_torch(rng, gen, dtype, batch_first, case):
    T, N, C, K = (int(v) for v in rng.integers(1, 40, 4))
    N = 1 if case == "unbatched" else N
    print(f"T={T} N={N} C={C} K={K}")
    m = pnn.LSTM(C, K, bias=case != "nobias", batch_first=batch_first, dtype=dtype)
    shape = (T, C) if case == "unbatched" else ((N, T, C) if batch_first else (T, N, C))
    x = rand(gen, *shape, dtype=dtype).requires_grad_(case != "nohx_nograd")
    sshape = (1, K) if case == "unbatched" else (1, N, K)
    hx = None if case == "nohx_nograd" else tuple(rand(gen, *sshape, dtype=dtype).requires_grad_()
                                                  for _ in range(2))
    y, (h, c) = m(x, hx)
    assert y.dtype == dtype and y.shape == x.shape[:-1] + (K,) and h.shape == c.shape == sshape
    w = [rand(gen, *t.shape, dtype=dtype) for t in (y, h, c)]
    sum((o * wi).sum() for o, wi in zip((y, h, c), w)).backward()
    outs, grads = lstm_reference(m, x, hx, w)
    ours = [x.grad] + ([s.grad for s in hx] if hx else []) + [p.grad for p in m.parameters()]
    names = ["dx"] + (["dh0", "dc0"] if hx else []) + [n for n, _ in m.named_parameters()]
    # f32: sums of T*N and 4K products; bf16: operands rounded to 8 bits every step
    rel = 1e-5 if dtype == torch.float32 else 1e-2
    for name, got, want in zip(["y", "h_n", "c_n"] + names, [y, h, c] + ours, list(outs) + grads):
        if want is None:
            assert got is None, name
            continue
        assert_close(name, got, want, rel * (want.abs() + want.abs().max() + 1))
    if m.bias:
        assert torch.equal(m.bias_ih_l0.grad, m.bias_hh_l0.grad)


def test_lstm_twice_in_one_graph_and_weight_changes(gen):
    """Two calls before one backward (the second overwrote the layer's saved
    state: the first's backward recomputes), then in-place weight changes
    (version counter) and load_state_dict reach the next call."""
    m = pnn.LSTM(6, 9)
    ref = nn.LSTM(6, 9)
    ref.load_state_dict(m.state_dict())
    x1, x2 = rand(gen, 4, 3, 6), rand(gen, 5, 3, 6)
    y1, _ = m(x1)
    y2, _ = m(x2)
    (y1.sum() + 2 * y2.sum()).backward()
    r1, _ = ref(x1)
    r2, _ = ref(x2)
    (r1.sum() + 2 * r2.sum()).backward()
    for (name, p), q in zip(m.named_parameters(), ref.parameters()):
        assert_close(name, p.grad, f64(q.grad), 1e-5 * (q.grad.abs().max() + 1))
    with torch.no_grad():
        m.weight_hh_l0.mul_(-0.5)
        ref.weight_hh_l0.mul_(-0.5)
    assert_close("after mul_", m(x1)[0], f64(ref(x1)[0]), 1e-5 * 2)
    other = nn.LSTM(6, 9)
    m.load_state_dict(other.state_dict())
    assert_close("after load_state_dict", m(x1)[0], f64(other(x1)[0]), 1e-5 * 2)


@pytest.mark.parametrize("kept", [True, False])
@pytest.mark.parametrize("kind", ["linear", "conv", "lstm"])
def test_weights_changed_in_place_reach_the_next_call(gen, kind, kept, monkeypatch):
    """Blocked weights are kept while the parameters' versions stand still and
    rebuilt after in-place writes, load_state_dict and a swapped .data (kept:
    Linear's small weights kept too, as larger ones are, not re-blocked per
    call: nn_ops.FC_REBLOCKED_BELOW)."""
    if kept:
        monkeypatch.setattr(nn_ops, "FC_REBLOCKED_BELOW", 0)
    ours, theirs, x = {
        "linear": lambda: (pnn.Linear(6, 5), nn.Linear(6, 5), rand(gen, 4, 6)),
        "conv": lambda: (pnn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(3, 4, 3, padding=1),
                         rand(gen, 2, 3, 5, 5)),
        "lstm": lambda: (pnn.LSTM(6, 5), nn.LSTM(6, 5), rand(gen, 3, 2, 6)),
    }[kind]()
    theirs.load_state_dict(ours.state_dict())
    first = lambda m: m(x)[0] if kind == "lstm" else m(x)  # noqa: E731

    def check(what):
        want = first(theirs)
        assert_close(what, first(ours), f64(want), 1e-5 * (want.abs().max() + 1) * 10)

    check("first call")
    check("second call, same weights")
    with torch.no_grad():
        for p, q in zip(ours.parameters(), theirs.parameters()):
            p.mul_(-0.5)
            q.mul_(-0.5)
    check("after mul_")
    other = type(theirs)(*ctor_args(theirs))
    ours.load_state_dict(other.state_dict())
    theirs.load_state_dict(other.state_dict())
    check("after load_state_dict")
    for p, q in zip(ours.parameters(), theirs.parameters()):
        fresh = rand(gen, *p.shape)
        p.data, q.data = fresh.clone(), fresh.clone()
    check("after .data = another tensor")


@pytest.mark.parametrize("kind", ["linear", "conv", "lstm"])
def test_module_to_bfloat16_and_back_reaches_the_next_call(rng, gen, kind):
    """Module._apply swaps each parameter's .data without a version bump, and
    the allocator hands the round trip's f32 storage the address the first
    one had (weights of some KiB): the rounded weights must still be seen."""
    C, K = (int(v) for v in rng.integers(40, 80, 2))
    ours = {"linear": lambda: pnn.Linear(C, K), "conv": lambda: pnn.Conv2d(C, K, 3, padding=1),
            "lstm": lambda: pnn.LSTM(C, K)}[kind]()
    x = rand(gen, *{"linear": (4, C), "conv": (2, C, 5, 5), "lstm": (3, 2, C)}[kind])
    first = lambda y: y[0] if kind == "lstm" else y  # noqa: E731
    theirs = {"linear": nn.Linear(C, K), "conv": nn.Conv2d(C, K, 3, padding=1),
              "lstm": nn.LSTM(C, K)}[kind]
    with torch.no_grad():
        for trip in range(6):  # the address comes back in some trips, not all
            for p in ours.parameters():
                p.add_(rand(gen, *p.shape, scale=1e-2))  # off the bf16 grid again
            ours(x), ours(x)  # the blocked weights kept
            ours.to(torch.bfloat16)
            ours(x.bfloat16())
            ours.float()
            theirs.load_state_dict(ours.state_dict())  # the weights as they are now
            want = first(theirs(x))
            assert_close(f"trip {trip}: after .to(bfloat16) and .float()", first(ours(x)),
                         f64(want), 1e-5 * (want.abs().max() + 1) * 10)


def test_modules_made_under_inference_mode(gen):
    """Inference tensors have no version counter: their blocked weights are
    rebuilt on every call, and in-place writes still reach the next one."""
    x, seq = rand(gen, 2, 3, 6, 6), rand(gen, 4, 2, 5)
    with torch.inference_mode():
        ours = [pnn.Conv2d(3, 5, 3), pnn.Linear(4, 2), pnn.LSTM(5, 4)]
        theirs = [nn.Conv2d(3, 5, 3), nn.Linear(4, 2), nn.LSTM(5, 4)]
        for a, b in zip(ours, theirs):
            b.load_state_dict(a.state_dict())
        for step in range(2):
            want = theirs[1](theirs[0](x)), theirs[2](seq)[0]
            got = ours[1](ours[0](x)), ours[2](seq)[0]
            for name, g, w in zip(("conv+linear", "lstm"), got, want):
                assert_close(f"{name} {step}", g, f64(w), 1e-5 * 20)
            for m in ours + theirs:
                for p in m.parameters():
                    p.mul_(-0.5)


# ---------------------------------------------------------------- state_dicts, optimizers

def test_modules_deepcopy_and_pickle_after_use(gen):
    """What a module keeps between calls (LSTM layers, fused MLP nets) stays off
    it: copy.deepcopy and torch.save work after training steps, and a copy
    computes what the original does."""
    import io
    mods = [(pnn.Linear(4, 3), rand(gen, 2, 4)), (pnn.Conv2d(2, 3, 3), rand(gen, 1, 2, 5, 5)),
            (pnn.LSTM(4, 3), rand(gen, 3, 2, 4)), (pnn.MLP([4, 6, 3]), rand(gen, 2, 4)),
            (pnn.MLP([4, 6, 3], fused=True), rand(gen, 2, 4))]
    for m, x in mods:
        out = lambda mod: mod(x)[0] if isinstance(mod, nn.LSTM) else mod(x)  # noqa: E731
        out(m).sum().backward()
        twin = copy.deepcopy(m)
        torch.save(m, io.BytesIO())
        assert torch.equal(out(twin), out(m)), type(m).__name__


@pytest.mark.parametrize("case", ["no rows", "no inputs", "no outputs", "no images"])
def test_empty_sizes_as_torch(gen, case):
    """Sizes with nothing for the primitives give what torch.nn's modules give:
    y (the bias, where there are no inputs) and every gradient."""
    if case == "no images":
        ours, theirs = pnn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(3, 4, 3, padding=1)
        x = rand(gen, 0, 3, 5, 5)
    else:
        C, K = {"no rows": (5, 3), "no inputs": (0, 3), "no outputs": (5, 0)}[case]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch: "Initializing zero-element tensors"
            ours, theirs = pnn.Linear(C, K), nn.Linear(C, K)
        x = rand(gen, 0 if case == "no rows" else 4, C)
    with torch.no_grad():
        for p in ours.parameters():
            p.copy_(rand(gen, *p.shape))
    theirs.load_state_dict(ours.state_dict())
    xs = [x.clone().requires_grad_() for _ in range(2)]
    ys = [m(t) for m, t in zip((ours, theirs), xs)]
    assert ys[0].shape == ys[1].shape
    assert_close("y", ys[0], f64(ys[1]), 1e-6)
    dy = rand(gen, *ys[1].shape)
    for y in ys:
        y.backward(dy)
    assert_close("dx", xs[0].grad, f64(xs[1].grad), 1e-6)
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
        assert_close(f"d{name}", p.grad, f64(q.grad), 1e-5 * (q.grad.abs().sum() + 1))


def test_fused_mlp_infers_where_no_gradient_is_wanted(rng, gen, monkeypatch):
    """Under no_grad, inference_mode or with nothing requiring a gradient the
    fused MLP runs fc.MLP's inference forward (nothing kept for a backward that
    cannot come); one such call between a training forward and its backward
    leaves that backward right."""
    sizes = [int(v) for v in rng.integers(1, 40, 3)]
    print(f"sizes={sizes}")
    m = pnn.MLP(sizes, activation="tanh", fused=True)
    trains = []
    forward = fc.MLP.forward
    monkeypatch.setattr(fc.MLP, "forward",
                        lambda net, x, train=True: trains.append(train) or forward(net, x, train))

    def ref(x):
        X, params = f64(x, True), [f64(p, True) for p in m.parameters()]
        y = nn.functional.linear(torch.tanh(nn.functional.linear(X, *params[:2])), *params[2:])
        return y, X, params

    x1, x2 = rand(gen, 7, sizes[0]).requires_grad_(), rand(gen, 5, sizes[0])
    y1 = m(x1)
    with torch.no_grad():
        y2 = m(x2)
    with torch.inference_mode():
        y3 = m(x2)
    for p in m.parameters():
        p.requires_grad_(False)
    y4 = m(x2)
    for p in m.parameters():
        p.requires_grad_(True)
    assert trains == [True, False, False, False]
    want2 = ref(x2)[0]
    for name, y in (("no_grad", y2), ("inference_mode", y3), ("frozen", y4)):
        assert not y.requires_grad
        assert_close(name, y, want2, 1e-5 * (want2.abs() + 1))
    dy = rand(gen, *y1.shape)
    y1.backward(dy)
    r, X, params = ref(x1)
    r.backward(f64(dy))
    assert_close("y", y1, r, 1e-5 * (r.abs() + 1))
    for name, got, want in zip(["dx"] + [n for n, _ in m.named_parameters()],
                               [x1.grad] + [p.grad for p in m.parameters()],
                               [X.grad] + [p.grad for p in params]):
        assert_close(name, got, want, 1e-5 * (want.abs().max() + 1))
