"""primitives.nn's Linear and Conv2d traced whole: their custom operators
(brgemm::linear, brgemm::conv2d and backwards, primitives.nn_ops) pass
torch.library.opcheck (schema, shape functions, autograd registration, AOT
dispatch) on random shapes; a model of them compiles with fullgraph=True (no
graph break) and trains as in eager mode, against torch in float64; it
exports with torch.export, its graph naming our operators."""
import pytest
import torch
from torch import nn

from nn_support import assert_close, f64, gen, rand  # noqa: F401 (gen: a fixture)
from primitives import nn as pnn
from primitives import nn_ops  # noqa: F401 (registers the operators)

torch.set_num_threads(1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_operator_passes_opcheck(rng, gen, dtype, bias):
    N, C, K = (int(v) for v in rng.integers(1, 30, 3))
    lead = (int(rng.integers(1, 4)),) if rng.random() < 0.5 else ()
    print(f"lead={lead} N={N} C={C} K={K}")
    x = rand(gen, *lead, N, C, dtype=dtype).requires_grad_()
    w = rand(gen, K, C, dtype=dtype).requires_grad_(bool(rng.random() < 0.8))
    b = rand(gen, K, dtype=dtype).requires_grad_() if bias else None
    torch.library.opcheck(torch.ops.brgemm.linear.default, (x, w, b))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [True, False])
def test_conv2d_operator_passes_opcheck(rng, gen, dtype, bias):
    N, C, K = (int(v) for v in rng.integers(1, 6, 3))
    R, S = (int(v) for v in rng.integers(1, 4, 2))
    stride = [int(v) for v in rng.integers(1, 3, 2)]
    padding = [int(rng.integers(0, (R + 1) // 2 + 1)), int(rng.integers(0, (S + 1) // 2 + 1))]
    H, W = int(rng.integers(R, 9)), int(rng.integers(S, 9))
    print(f"N={N} C={C} K={K} H={H} W={W} R={R} S={S} stride={stride} padding={padding}")
    x = rand(gen, N, C, H, W, dtype=dtype).requires_grad_(bool(rng.random() < 0.8))
    w = rand(gen, K, C, R, S, dtype=dtype).requires_grad_()
    b = rand(gen, K, dtype=dtype).requires_grad_() if bias else None
    torch.library.opcheck(torch.ops.brgemm.conv2d.default, (x, w, b, stride, padding))


def small_net(rng, C, H, W):
    """Conv2d, ReLU, Conv2d (strided), flatten, Linear: ours and torch's twin."""
    K1, K2 = (int(v) for v in rng.integers(2, 9, 2))
    ours = nn.Sequential(pnn.Conv2d(C, K1, 3, padding=1), nn.ReLU(),
                         pnn.Conv2d(K1, K2, 3, stride=2), nn.Flatten(),
                         pnn.Linear(K2 * ((H - 3) // 2 + 1) * ((W - 3) // 2 + 1), 5))
    ref = nn.Sequential(nn.Conv2d(C, K1, 3, padding=1), nn.ReLU(),
                        nn.Conv2d(K1, K2, 3, stride=2), nn.Flatten(),
                        nn.Linear(ours[4].in_features, 5)).double()
    ref.load_state_dict(ours.state_dict())
    return ours, ref


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_model_has_no_graph_break_and_trains(rng, gen, backend):
    C, H, W = int(rng.integers(1, 5)), int(rng.integers(5, 10)), int(rng.integers(5, 10))
    print(f"C={C} H={H} W={W} backend={backend}")
    ours, ref = small_net(rng, C, H, W)
    compiled = torch.compile(ours, fullgraph=True, backend=backend)  # a break would raise
    for step in range(2):  # two batch sizes
        x = rand(gen, step + 2, C, H, W).requires_grad_()
        X = f64(x, True)
        y, want = compiled(x), ref(X)
        assert_close(f"y {step}", y, want, 1e-4 * (want.abs().max() + 1))
        dy = rand(gen, *y.shape)
        for m in (ours, ref):
            m.zero_grad()
        y.backward(dy)
        want.backward(f64(dy))
        assert_close(f"dx {step}", x.grad, X.grad, 1e-4 * (X.grad.abs().max() + 1))
        for (name, p), q in zip(ours.named_parameters(), ref.parameters()):
            assert_close(f"{name} {step}", p.grad, q.grad, 1e-4 * (q.grad.abs().max() + 1))


def test_exported_program_names_our_operators(rng, gen):
    C, H, W = int(rng.integers(1, 5)), int(rng.integers(5, 10)), int(rng.integers(5, 10))
    ours, ref = small_net(rng, C, H, W)
    x = rand(gen, 3, C, H, W)
    program = torch.export.export(ours, (x,))
    called = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert {"brgemm.conv2d.default", "brgemm.linear.default"} <= called, called
    x2 = rand(gen, 3, C, H, W)
    want = ref(f64(x2))
    assert_close("exported", program.module()(x2), want, 1e-4 * (want.abs().max() + 1))
