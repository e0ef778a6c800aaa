"""primitives.nn against torch.nn in float64: outputs and every gradient on
random shapes (f32 and bf16), state_dicts both ways, optimizer steps,
convert() on a model that mixes what it takes and what it leaves, and bad input."""
import copy
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from primitives import nn as pnn

torch.set_num_threads(1)


@pytest.fixture
def gen(rng):
    """A torch generator seeded from the printed seed (conftest's rng)."""
    return torch.Generator().manual_seed(int(rng.integers(2**31)))


def rand(gen, *shape, dtype=torch.float32, scale=1.0):
    return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale).to(dtype)


def f64(t, grad=False):
    return t.detach().to(torch.float64).requires_grad_(grad)


def assert_close(name, got, want, bound):
    """|got - want| <= bound per element (bound: a tensor or a number)."""
    err = (got.detach().to(torch.float64) - want.detach()).abs()
    bound = torch.as_tensor(bound, dtype=torch.float64).expand_as(err)
    worst = (err / (bound + 1e-300)).max().item() if err.numel() else 0.0
    print(f"{name}: max abs diff {err.max().item() if err.numel() else 0:.3e}, "
          f"worst err/bound {worst:.3f}")
    assert bool((err <= bound).all()), f"{name}: err/bound {worst:.3f}"


def bilinear_check(fn, inputs, ours, dy, rel, names):
    """Compare ours = (y, grads of the inputs) with fn in float64; the bound of
    each element is rel times its sum of |products|: fn run on |inputs| (fn is
    linear in each argument, so its gradients there are the magnitudes too)."""
    ref_in = [f64(t, True) for t in inputs]
    y = fn(*ref_in)
    y.backward(f64(dy))
    abs_in = [f64(t, True).abs().detach().requires_grad_() for t in inputs]
    ya = fn(*abs_in)
    ya.backward(f64(dy).abs())
    assert_close("y", ours[0], y, rel * (ya.detach() + 1e-30))
    for name, got, r, a in zip(names, ours[1:], ref_in, abs_in):
        if got is not None:
            assert_close(name, got, r.grad, rel * (a.grad + 1e-30))


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
    if trial == 2:  # channels-last memory: not contiguous in torch's sense
        x = x.to(memory_format=torch.channels_last)
    x.requires_grad_()
    y = m(x)
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


@pytest.mark.parametrize("kind", ["linear", "conv", "lstm"])
def test_weights_changed_in_place_reach_the_next_call(gen, kind):
    """Blocked weights are kept while the parameters' versions stand still and
    rebuilt after in-place writes, load_state_dict and a swapped .data."""
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
    other = type(theirs)(*_ctor_args(theirs))
    ours.load_state_dict(other.state_dict())
    theirs.load_state_dict(other.state_dict())
    check("after load_state_dict")
    for p, q in zip(ours.parameters(), theirs.parameters()):
        fresh = rand(gen, *p.shape)
        p.data, q.data = fresh.clone(), fresh.clone()
    check("after .data = another tensor")


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



def test_state_dict_round_trip_both_ways():
    pairs = [(pnn.Linear(5, 3), nn.Linear(5, 3)), (pnn.Conv2d(2, 4, 3, bias=False),
                                                   nn.Conv2d(2, 4, 3, bias=False)),
             (pnn.LSTM(4, 6, batch_first=True), nn.LSTM(4, 6, batch_first=True))]
    for ours, theirs in pairs:
        assert list(ours.state_dict()) == list(theirs.state_dict())
        theirs.load_state_dict(ours.state_dict())  # ours -> torch
        for k, v in theirs.state_dict().items():
            assert torch.equal(v, ours.state_dict()[k]), k
        fresh = type(ours)(*_ctor_args(theirs))
        fresh.load_state_dict(theirs.state_dict())  # torch -> ours
        for k, v in fresh.state_dict().items():
            assert torch.equal(v, theirs.state_dict()[k]), k


def _ctor_args(m):
    if isinstance(m, nn.Linear):
        return (m.in_features, m.out_features)
    if isinstance(m, nn.Conv2d):
        return (m.in_channels, m.out_channels, m.kernel_size, m.stride, m.padding, 1, 1,
                m.bias is not None)
    return (m.input_size, m.hidden_size, 1, m.bias, m.batch_first)


class Net(nn.Module):
    """A little of everything: conv, linear and a single-layer LSTM."""

    def __init__(self, ours):
        super().__init__()
        lib = pnn if ours else nn
        self.conv = lib.Conv2d(2, 5, 3, padding=1)
        self.lstm = lib.LSTM(5, 7, batch_first=True)
        self.fc = lib.Linear(7, 3)

    def forward(self, x):
        h = torch.relu(self.conv(x))                  # N, 5, H, W
        seq = h.mean(2).transpose(1, 2)               # N, W, 5: a sequence over columns
        y, _ = self.lstm(seq)
        return self.fc(y[:, -1])


@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_optimizer_steps_change_ours_like_torch(gen, opt):
    ours, theirs = Net(True), Net(False)
    theirs.load_state_dict(ours.state_dict())
    make = {"sgd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
            "adam": lambda p: torch.optim.Adam(p, lr=0.01)}[opt]
    opts = make(ours.parameters()), make(theirs.parameters())
    for step in range(4):
        x, target = rand(gen, 3, 2, 6, 5), rand(gen, 3, 3)
        losses = []
        for model, o in zip((ours, theirs), opts):
            o.zero_grad()
            loss = ((model(x) - target) ** 2).mean()
            loss.backward()
            o.step()
            losses.append(loss)
        assert_close(f"loss {step}", losses[0], f64(losses[1]), 1e-5 * (losses[1].abs() + 1))
        for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
            assert_close(f"{name} after step {step}", p, f64(q), 1e-4 * (q.abs().max() + 1))


# ---------------------------------------------------------------- convert

class Mixed(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)                        # converted
        self.grouped = nn.Conv2d(8, 8, 3, padding=1, groups=2)           # left
        self.dilated = nn.Conv2d(8, 6, 3, padding=2, dilation=2)         # left
        self.reflect = nn.Conv2d(6, 6, 1, padding_mode="reflect")        # left
        self.rnn2 = nn.LSTM(6, 10, num_layers=2)                         # left
        self.rnn = nn.LSTM(10, 12)                                       # converted
        self.bi = nn.LSTM(12, 4, bidirectional=True, batch_first=True)   # left
        self.head = nn.Sequential(nn.Linear(8, 5), nn.ReLU(), nn.Linear(5, 4))  # converted

    def forward(self, x):
        h = torch.relu(self.stem(x))
        h = self.reflect(torch.relu(self.dilated(self.grouped(h))))      # N, 6, H, W
        seq = h.flatten(2).permute(2, 0, 1)                              # H*W, N, 6
        seq, _ = self.rnn2(seq)
        seq, _ = self.rnn(seq)
        seq, _ = self.bi(seq.transpose(0, 1))                            # N, H*W, 8
        return self.head(seq.mean(1))


def test_convert_mixed_model_matches_original(gen):
    torch.manual_seed(int(torch.randint(2**31, (1,), generator=gen)))  # the init, from the printed seed
    original = Mixed()
    model = copy.deepcopy(original)
    params = dict(model.named_parameters())
    with pytest.warns(UserWarning, match="grouped|groups"):
        out = pnn.convert(model)
    assert out is model
    assert all(p is params[n] for n, p in model.named_parameters())  # the same Parameter objects
    kinds = {n: type(m) for n, m in model.named_modules()}
    assert kinds["stem"] is pnn.Conv2d and kinds["rnn"] is pnn.LSTM
    assert kinds["head.0"] is kinds["head.2"] is pnn.Linear
    for name in ("grouped", "dilated", "reflect", "rnn2", "bi"):
        assert kinds[name] is type(getattr(original, name)), name
    reasons = dict(model.unconverted)
    assert sorted(reasons) == ["bi", "dilated", "grouped", "reflect", "rnn2"]
    assert reasons["grouped"].startswith("groups") and reasons["dilated"].startswith("dilation")
    assert reasons["reflect"].startswith("padding_mode")
    assert reasons["rnn2"].startswith("num_layers") and reasons["bi"].startswith("bidirectional")
    x = rand(gen, 2, 3, 5, 4)
    y, y0 = model(x), original(x)
    assert_close("y", y, f64(y0), 1e-4 * (y0.abs().max() + 1))
    y.square().sum().backward()
    y0.square().sum().backward()
    for (name, p), q in zip(model.named_parameters(), original.parameters()):
        assert_close(name, p.grad, f64(q.grad), 1e-4 * (q.grad.abs().max() + 1))
    # an optimizer made before convert() keeps training the converted model
    # (every parameter with a nonzero gradient moves; the head's last bias always
    # has one, while a head whose ReLU units all died passes none further back)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt.step()
    moved = [n for n, p in model.named_parameters() if p.grad is not None and p.grad.abs().max() > 0]
    assert "head.2.bias" in moved
    for n, p in model.named_parameters():
        assert torch.equal(before[n], p) != (n in moved), n


def test_convert_nothing_left_no_warning_and_idempotent():
    model = nn.Sequential(nn.Linear(3, 4), nn.LSTM(4, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pnn.convert(model)
        pnn.convert(model)
    assert model.unconverted == [] and type(model[0]) is pnn.Linear


def test_convert_leaves_other_dtypes_and_subclasses():
    class MyLinear(nn.Linear):
        pass

    model = nn.Sequential(nn.Linear(3, 4).double(), MyLinear(4, 4), nn.Conv2d(1, 1, 2, padding="same"))
    with pytest.warns(UserWarning):
        pnn.convert(model)
    reasons = dict(model.unconverted)
    assert reasons["0"].startswith("weight: dtype torch.float64")
    assert "subclasses torch.nn.Linear" in reasons["1"]
    assert reasons["2"].startswith("padding")
    assert type(model[0]) is nn.Linear and type(model[2]) is nn.Conv2d


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize("make,arg", [
    (lambda: pnn.Conv2d(4, 4, 3, groups=2), "groups"),
    (lambda: pnn.Conv2d(4, 4, 3, dilation=2), "dilation"),
    (lambda: pnn.Conv2d(4, 4, 3, padding_mode="circular"), "padding_mode"),
    (lambda: pnn.Conv2d(4, 4, 2, padding="same"), "padding"),
    (lambda: pnn.LSTM(4, 4, num_layers=2), "num_layers"),
    (lambda: pnn.LSTM(4, 4, bidirectional=True), "bidirectional"),
    (lambda: pnn.LSTM(4, 4, proj_size=2), "proj_size"),
    (lambda: pnn.MLP([4]), "sizes"),
    (lambda: pnn.MLP([4, 3], activation="gelu"), "activation"),
])
def test_construction_errors_name_the_argument(make, arg):
    with pytest.raises(ValueError, match=f"^{arg}"):
        make()


def test_call_errors_name_the_argument():
    with pytest.raises(TypeError, match="^input"):
        pnn.Linear(3, 2)(torch.zeros(2, 3, dtype=torch.float64))
    with pytest.raises(TypeError, match="^weight"):
        pnn.Linear(3, 2)(torch.zeros(2, 3, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="^input"):
        pnn.Linear(3, 2)(torch.zeros(2, 4))
    with pytest.raises(ValueError, match="^input"):
        pnn.Conv2d(3, 2, 1)(torch.zeros(1, 4, 5, 5))
    with pytest.raises(ValueError, match="^h_0"):
        pnn.LSTM(3, 2)(torch.zeros(4, 1, 3), (torch.zeros(1, 2, 2), torch.zeros(1, 2, 2)))
    packed = nn.utils.rnn.pack_padded_sequence(torch.zeros(4, 1, 3), [4])
    with pytest.raises(TypeError, match="^input"):
        pnn.LSTM(3, 2)(packed)
    with pytest.raises(TypeError, match="^model"):
        pnn.convert("not a module")


def test_double_backward_raises_instead_of_a_silent_zero():
    x = torch.randn(3, 4, requires_grad=True)
    y = pnn.Linear(4, 2)(x).square().sum()
    (dx,) = torch.autograd.grad(y, x, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable|twice"):
        dx.sum().backward()


# ---------------------------------------------------------------- training

@pytest.mark.parametrize("task", ["digits", "chars"])
def test_training_steps_match_torch(rng, task):
    """benchmarks.train's models, converted and not, from the same weights on
    the same batches: the losses of a few SGD steps agree."""
    from benchmarks import train
    seed = int(rng.integers(2**31))
    result = train.train(task, epochs=1, seed=seed, quick=True, progress=False, max_steps=4,
                         nudge=False)
    ours, theirs = (torch.tensor(result[side]["losses"][0], dtype=torch.float64)
                    for side in ("ours", "torch"))
    assert len(ours) == 4 and not torch.equal(ours[0], ours[-1])
    # f32 sums in another order; momentum SGD carries the differences from step to step
    assert_close(f"{task} losses", ours, theirs, 1e-4 * theirs.abs())
