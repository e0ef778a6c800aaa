"""primitives.nn beside torch: state_dicts both ways, optimizer steps,
convert() on a model that mixes what it takes and what it leaves, bad input,
and a few training steps of both benchmark models."""
import copy
import warnings

import pytest
import torch
from torch import nn

from nn_support import assert_close, ctor_args, f64, gen, rand  # noqa: F401  (gen: a fixture)
from primitives import nn as pnn
from primitives import nn_ops

torch.set_num_threads(1)


def test_state_dict_round_trip_both_ways():
    pairs = [(pnn.Linear(5, 3), nn.Linear(5, 3)), (pnn.Conv2d(2, 4, 3, bias=False),
                                                   nn.Conv2d(2, 4, 3, bias=False)),
             (pnn.LSTM(4, 6, batch_first=True), nn.LSTM(4, 6, batch_first=True))]
    for ours, theirs in pairs:
        assert list(ours.state_dict()) == list(theirs.state_dict())
        theirs.load_state_dict(ours.state_dict())  # ours -> torch
        for k, v in theirs.state_dict().items():
            assert torch.equal(v, ours.state_dict()[k]), k
        fresh = type(ours)(*ctor_args(theirs))
        fresh.load_state_dict(theirs.state_dict())  # torch -> ours
        for k, v in fresh.state_dict().items():
            assert torch.equal(v, theirs.state_dict()[k]), k


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


# fused steps write the parameters without bumping their version counters:
# what primitives.reuse counts optimizer steps for
OPTIMIZERS = {"sgd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
              "adam": lambda p: torch.optim.Adam(p, lr=0.01),
              "sgd fused": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, fused=True),
              "adam fused": lambda p: torch.optim.Adam(p, lr=0.01, fused=True),
              "adamw fused": lambda p: torch.optim.AdamW(p, lr=0.01, fused=True)}


@pytest.mark.parametrize("kept", [True, False])
@pytest.mark.parametrize("opt", list(OPTIMIZERS))
def test_optimizer_steps_change_ours_like_torch(gen, opt, kept, monkeypatch):
    """(kept: Linear's small weights kept across calls too, as larger ones are:
    nn_ops.FC_REBLOCKED_BELOW)"""
    if kept:
        monkeypatch.setattr(nn_ops, "FC_REBLOCKED_BELOW", 0)
    ours, theirs = Net(True), Net(False)
    theirs.load_state_dict(ours.state_dict())
    make = OPTIMIZERS[opt]
    opts = make(ours.parameters()), make(theirs.parameters())
    for step in range(4):
        x, target = rand(gen, 3, 2, 6, 5), rand(gen, 3, 3)
        losses = []
        for model, o in zip((ours, theirs), opts):
            with torch.no_grad():  # inference between steps: the blocked weights kept
                model(x)
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
    for width in (2, 4):  # and the module still takes the right width afterwards
        m = pnn.LSTM(3, 2, batch_first=width == 4)
        with pytest.raises(ValueError, match="^input"):
            m(torch.zeros(4, 1, width))
        assert m(torch.zeros(4, 1, 3))[0].shape == (4, 1, 2)
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
