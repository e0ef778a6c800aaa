"""primitives.nn's modules as a demanding PyTorch user traces them: torch.export
with dynamic sizes, torch.compile with dynamic=True and changing batch sizes,
torch.func over the custom operators, compile with autocast and channels-last
memory. Random shapes; references in float64 torch."""
import pytest
import torch
from torch import nn

from nn_support import assert_close, f64, gen, rand  # noqa: F401 (gen: a fixture)
from primitives import nn as pnn

torch.set_num_threads(1)


def bound(want):
    """float32's per-element tolerance for sums of a few tens of products."""
    return 1e-5 * (want.abs() + want.abs().max() + 1)


@pytest.mark.parametrize("lead", [0, 1])
def test_linear_exports_with_a_dynamic_batch(rng, gen, lead):
    """torch.export with a Dim on the batch: the operator's shape function kept
    the batch symbolic (it specialised it: a constraint violation)."""
    C, K = (int(v) for v in rng.integers(1, 20, 2))
    N = int(rng.integers(2, 20))  # (an example batch of 1 is a constant to torch.export)
    extra = (int(rng.integers(1, 4)),) * lead
    print(f"C={C} K={K} N={N} extra={extra}")
    ours = pnn.Linear(C, K)
    ref = nn.Linear(C, K).double()
    ref.load_state_dict(ours.state_dict())
    batch = torch.export.Dim("batch", min=1, max=64)
    program = torch.export.export(ours, (rand(gen, N, *extra, C),),
                                  dynamic_shapes={"input": {0: batch}})
    for n in (int(v) for v in rng.integers(1, 64, 2)):
        x = rand(gen, n, *extra, C)
        want = ref(f64(x))
        assert_close(f"y n={n}", program.module()(x), want, bound(want))


def test_dynamic_compile_does_not_recompile_for_a_new_batch(rng, gen):
    C, K = (int(v) for v in rng.integers(1, 20, 2))
    ours = pnn.Linear(C, K)
    ref = nn.Linear(C, K).double()
    ref.load_state_dict(ours.state_dict())
    torch._dynamo.reset()
    compiled = torch.compile(ours, dynamic=True, backend="aot_eager", fullgraph=True)
    with torch._dynamo.config.patch(error_on_recompile=True):
        # (sizes equal to another of x's would be one symbol to torch: duck sizing)
        for n in rng.choice([n for n in range(2, 40) if n not in (3, C)], 3, replace=False):
            x = rand(gen, int(n), 3, C).requires_grad_()
            X = f64(x, True)
            y, want = compiled(x), ref(X)
            assert_close(f"y n={n}", y, want, bound(want))
            dy = rand(gen, *y.shape)
            y.backward(dy)
            want.backward(f64(dy))
            assert_close(f"dx n={n}", x.grad, X.grad, bound(X.grad))


@pytest.mark.parametrize("kind", ["linear", "conv", "mlp", "fused_mlp"])
def test_autocast_leaves_float64_alone(rng, gen, kind):
    """torch.autocast casts float32 (and float16) arguments, never float64
    ones: a float64 module there computes in float64 in torch. Ours computed
    in bf16 and answered bf16; it must answer as torch or refuse float64 as
    it does outside autocast (TypeError), never round silently."""
    C, K, N = (int(v) for v in rng.integers(1, 12, 3))
    if kind == "linear":
        ours, theirs, x = pnn.Linear(C, K), nn.Linear(C, K), rand(gen, N, C)
    elif kind == "conv":
        H, W = (int(v) for v in rng.integers(3, 8, 2))
        ours, theirs, x = pnn.Conv2d(C, K, 3), nn.Conv2d(C, K, 3), rand(gen, N, C, H, W)
    else:
        ours = pnn.MLP([C, K], activation="relu", fused=kind == "fused_mlp")
        theirs, x = nn.Sequential(nn.Linear(C, K)), rand(gen, N, C)
        theirs[0].load_state_dict(ours.layers[0].state_dict())
    if not isinstance(ours, pnn.MLP):
        theirs.load_state_dict(ours.state_dict())
    ours, theirs, x = ours.double(), theirs.double(), x.double()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = theirs(x)
        try:
            got = ours(x)
        except TypeError as e:
            assert "float64" in str(e)
            return
    assert want.dtype == torch.float64
    assert got.dtype == torch.float64, got.dtype
    assert_close("y", got, want, 1e-12 * (want.abs() + 1))


@pytest.mark.parametrize("kind", ["lstm", "fused_mlp"])
def test_export_of_a_graph_break_module_names_it(rng, gen, kind):
    """torch.export cannot hold the LSTM's or the fused MLP's forward (state
    in the module, run outside the graph): it said so through torch's
    internals (a data pointer of a FakeTensor, .numpy() of a subclass)."""
    C, K, N = (int(v) for v in rng.integers(1, 12, 3))
    if kind == "lstm":
        m, x = pnn.LSTM(C, K), rand(gen, int(rng.integers(1, 5)), N, C)
    else:
        m, x = pnn.MLP([C, K], fused=True), rand(gen, N, C)
    with pytest.raises(NotImplementedError, match=f"{type(m).__name__}.*torch.export"):
        torch.export.export(m, (x,))


def test_unfused_mlp_compiles_without_a_graph_break(rng, gen):
    """MLP(fused=False) is a stack of our Linears, which compile whole: its
    forward was a graph break all the same (fullgraph=True raised)."""
    sizes = [int(v) for v in rng.integers(1, 16, 4)]
    print(f"sizes={sizes}")
    ours = nn.Sequential(pnn.MLP(sizes[1:], activation="tanh"), nn.ReLU())
    ref = nn.Sequential(nn.Linear(sizes[1], sizes[2]), nn.Tanh(),
                        nn.Linear(sizes[2], sizes[3]), nn.ReLU()).double()
    ref.load_state_dict({k.replace("0.layers.1", "2").replace("0.layers.0", "0"): v
                         for k, v in ours.state_dict().items()})
    torch._dynamo.reset()
    compiled = torch.compile(ours, backend="aot_eager", fullgraph=True)
    x = rand(gen, int(rng.integers(2, 9)), sizes[1]).requires_grad_()
    X = f64(x, True)
    y, want = compiled(x), ref(X)
    assert_close("y", y, want, bound(want))
    y.backward(torch.ones_like(y))
    want.backward(torch.ones_like(want))
    assert_close("dx", x.grad, X.grad, bound(X.grad))
