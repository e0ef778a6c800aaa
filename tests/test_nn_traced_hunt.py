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
    C, K, N = (int(v) for v in rng.integers(1, 20, 3))
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
        for n in rng.choice(range(2, 40), 3, replace=False):
            x = rand(gen, int(n), 3, C).requires_grad_()
            X = f64(x, True)
            y, want = compiled(x), ref(X)
            assert_close(f"y n={n}", y, want, bound(want))
            dy = rand(gen, *y.shape)
            y.backward(dy)
            want.backward(f64(dy))
            assert_close(f"dx n={n}", x.grad, X.grad, bound(X.grad))
