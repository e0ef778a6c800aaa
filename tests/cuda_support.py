"""What the CUDA tests of random bf16 FC passes share (test_cuda.py,
test_cuda_tma.py, test_cuda_stores.py): the plan, its inputs on the GPU,
NaN-filled outputs, and the float64 reference of its product."""
import numpy as np

from primitives import fc

# per pass: the einsum of its product over the blocked layouts, its operands, its output
FC_PRODUCT = {"fwd": ("ncij,kcjl->nkil", "x", "w", "y"),
              "bwd": ("nkij,ckjl->ncil", "dy", "wt", "dx"),
              "upd": ("cnij,nkjl->kcil", "xt", "dy", "dw")}


def random_fc_plan(rng, pass_, most):
    """A bf16 FC pass of random blocks (64 or 128 each) and sizes (1 to `most`
    blocks), each task's reduction in one call; the forward with bias, ReLU
    and a bf16 copy of y. Returns (geometry, plan)."""
    blocks = tuple(int(rng.choice([64, 128])) for _ in range(3))
    N, C, K = (b * int(rng.integers(1, most + 1)) for b in blocks)
    print(f"N={N} C={C} K={K} blocks {blocks} {pass_}")
    g = fc.geometry(N, C, K, config={p: {"chunk": 1 << 20} for p in ("fwd", "bwd", "upd")},
                    blocks=blocks, path="cuda")
    ops = dict(has_bias=True, activation="relu", bf16_out=True) if pass_ == "fwd" else {}
    return g, fc.plan(g, pass_, "bf16", **ops)


def fc_inputs(torch, g, p):
    """Random GPU tensors for what plan p of geometry g reads, in their
    blocked layouts: bf16, the bias f32."""
    layouts = {"x": (g.Nb, g.Cb, g.bn, g.bc), "w": (g.Kb, g.Cb, g.bc, g.bk),
               "dy": (g.Nb, g.Kb, g.bn, g.bk), "wt": (g.Cb, g.Kb, g.bk, g.bc),
               "xt": (g.Cb, g.Nb, g.bc, g.bn), "b": (g.Kb * g.bk,)}
    ins = {name: torch.randn(layouts[name], device="cuda") for name in p.tensors
           if name not in p.written}
    return {name: t if p.tensors[name] == "f32" else t.bfloat16() for name, t in ins.items()}


def nan_outputs(torch, p):
    """NaN-filled GPU tensors for what plan p writes, in its dtypes."""
    out = {name: torch.full((max(p.extent[name], 1),), float("nan"), device="cuda")
           for name in p.written}
    return {name: t.bfloat16() if p.tensors[name] == "bf16" else t for name, t in out.items()}


def check_fc(g, pass_, ins, outs):
    """The pass's output in outs against float64 of its inputs ins (after
    bias and ReLU for the forward), within the f32 accumulation's bound."""
    d = {name: t.double().cpu().numpy() for name, t in ins.items()}
    eq, a, b, out = FC_PRODUCT[pass_]
    ref = np.einsum(eq, d[a], d[b])
    if pass_ == "fwd":
        ref = np.maximum(ref + d["b"].reshape(g.Kb, 1, g.bk), 0)
    tol = 1e-5 * np.einsum(eq, np.abs(d[a]), np.abs(d[b])) + 2.0 ** -23 * np.abs(ref) + 1e-30
    got = outs[out].float().cpu().numpy().reshape(ref.shape)
    print(f"worst err/tol {np.max(np.abs(got - ref) / tol):.3f}")
    assert np.all(np.abs(got - ref) <= tol)
