"""Randomized sweep: the LSTM against a float64 reference with per-element
error bounds (tests/tolerance.py): y, hT, cT and all six gradients, the
functional forms and the LSTM layer, both dtypes, every backend. The
reference follows the library's bf16 roundings (h for the recurrent GEMM, dG
for the GEMMs that read it) and is itself checked against torch.nn.LSTM.
Sizes from 1 up, layer-sized hidden sizes, random block sizes, loop orders,
call sizes and hoisted-GEMM configs, some cases at 1, 2 or 3 threads.

Step by step: each step's reference starts from the library's own previous
h (its y) and dG (read from the engine), each of which is checked itself, so
every step is verified. Carried through the whole recurrence instead, the
per-element bounds (sound, but worst case in every sign) grow by about
sum_j |W_hh[k, j]| times the gates' slopes a step (7-13x at K = 256) and
overflowed to NaN by T = 8 (BRGEMM_SWEEP_SEED=831585944, sycl-bf16-functional),
though the library's error stayed at a bf16 step (the same as cpu's and float64's)."""
import numpy as np
import pytest
import torch

import brgemm
from primitives import lstm
from sweep_support import cases, log_uniform, omp_threads, threads_for
from tolerance import Approx, assert_close, matmul, round_bf16, stack


class LSTMRef:
    """torch.nn.LSTM's maths in float64 on Approx values, in the library's order;
    bf16: the GEMM operands h and dG rounded where the library rounds them."""

    def __init__(self, w_ih, w_hh, b, bf16):
        self.w_ih, self.w_hh, self.b, self.bf16 = w_ih, w_hh, b, bf16
        self.K = w_hh.shape[1]

    def _gemm_input(self, a):
        return a.bf16() if self.bf16 else a

    def forward(self, x, h0, c0, h_lib=None):
        """h_lib [T, N, K]: the library's h (its y); step t+1 then starts from it."""
        K = self.K
        h_in, c = self._gemm_input(Approx(h0)), Approx(c0)
        self.x, self.h_in, self.c, self.gates, ys = x, [h_in], [c], [], []
        for t in range(x.shape[0]):
            G = matmul(x[t], self.w_ih.T) + self.b           # the input projection
            G = matmul(h_in, self.w_hh.T, c=G)                # the recurrent GEMM adds to it
            i, f, o = (G[:, q * K:(q + 1) * K].sigmoid() for q in (0, 1, 3))
            g = G[:, 2 * K:3 * K].tanh()
            c = f * c + i * g
            h = o * c.tanh()
            h_in = self._gemm_input(h if h_lib is None else Approx(h_lib[t]))
            self.gates.append((i, f, g, o))
            self.c.append(c)
            self.h_in.append(h_in)
            ys.append(h)
        return stack(ys), ys[-1], c

    def backward(self, dy, dhT, dcT, dG_lib=None):
        """dG_lib [T, N, 4K]: the library's dG operand (bf16 for bf16); step t-1
        then starts from its step t. self.dG: the reference's, to check it by."""
        T, K = dy.shape[0], self.K
        dc, dG_in, dG, self.dG = Approx(dcT), [None] * T, [None] * T, [None] * T
        for t in reversed(range(T)):
            dhr = Approx(dhT) if t == T - 1 else matmul(dG_in[t + 1], self.w_hh)
            dh = dhr + dy[t]
            i, f, g, o = self.gates[t]
            tc = self.c[t + 1].tanh()
            dc = dc + dh * o * (1 - tc * tc)
            dgo = dh * tc * o * (1 - o)
            dgi = dc * g * i * (1 - i)
            dgg = dc * i * (1 - g * g)
            dgf = dc * self.c[t] * f * (1 - f)
            dc = dc * f
            dG[t] = Approx(np.concatenate([a.v for a in (dgi, dgf, dgg, dgo)], 1),
                           np.concatenate([a.e for a in (dgi, dgf, dgg, dgo)], 1))
            dG_in[t] = self.dG[t] = self._gemm_input(dG[t])
            if dG_lib is not None:
                dG_in[t] = Approx(dG_lib[t])
        self.dG = stack(self.dG)
        N = dy.shape[1]
        rows = lambda parts: Approx(np.concatenate([p.v for p in parts]),  # noqa: E731
                                    np.concatenate([p.e for p in parts]))
        dG_all, dG32 = rows(dG_in), rows(dG)
        dx = stack([matmul(dG_in[t], self.w_ih) for t in range(T)])
        dh0 = matmul(dG_in[0], self.w_hh)
        dw_ih = matmul(dG_all.T, self.x.reshape(T * N, -1))
        dw_hh = matmul(dG_all.T, rows(self.h_in[:T]))
        db = dG32.sum(0)
        return dx, dh0, dc, dw_ih, dw_hh, db


def library_dG(layer):
    """The dG operand the layer's last backward left in its workspace (bf16 for
    bf16: what its GEMMs read), plain: [T, N, 4K] in the gate order i, f, g, o.
    Read from the workspace's dict: Buffers.get would hand it out NaN-filled."""
    g = layer.g
    buf = layer._bufs._bufs["dG16" if layer.dtype == "bf16" else "dG"]
    tiles = buf[:layer.G.size].reshape(g.T, g.Nb, 4, g.Kb, g.bn, g.bk)
    plain = tiles.transpose(0, 1, 4, 2, 3, 5).reshape(g.T, g.Nb * g.bn, 4, g.Kb * g.bk)
    return plain[:, :g.N, :, :g.K].reshape(g.T, g.N, 4 * g.K).astype(np.float64)


def torch_reference(x, h0, c0, w_ih, w_hh, b, dy, dhT, dcT):
    T, N, C = x.shape
    K = h0.shape[1]
    f64 = lambda v, grad=False: torch.tensor(v, dtype=torch.float64, requires_grad=grad)  # noqa: E731
    m = torch.nn.LSTM(C, K).double()
    with torch.no_grad():
        m.weight_ih_l0.copy_(f64(w_ih))
        m.weight_hh_l0.copy_(f64(w_hh))
        m.bias_ih_l0.copy_(f64(b))
        m.bias_hh_l0.zero_()
    X, H0, C0 = f64(x, True), f64(h0, True), f64(c0, True)
    Y, (HT, CT) = m(X, (H0[None], C0[None]))
    ((Y * f64(dy)).sum() + (HT[0] * f64(dhT)).sum() + (CT[0] * f64(dcT)).sum()).backward()
    return ([t.detach().numpy() for t in (Y, HT[0], CT[0])],
            [t.grad.numpy() for t in (X, H0, C0, m.weight_ih_l0, m.weight_hh_l0, m.bias_ih_l0)])


def draw(rng, dtype):
    kind = rng.choice(["odd", "layer", "one"], p=[0.5, 0.35, 0.15])
    T = log_uniform(rng, 1, 8)
    if kind == "odd":
        N, C, K = log_uniform(rng, 1, 80), log_uniform(rng, 1, 150), log_uniform(rng, 1, 100)
    elif kind == "layer":
        N = log_uniform(rng, 1, 64)
        C, K = (int(rng.choice([32, 64, 128, 256, 512])) for _ in range(2))
    else:
        N, C, K = 1, log_uniform(rng, 1, 300), log_uniform(rng, 1, 300)
    cap = 2e7
    while 3 * 2 * T * N * 4 * K * (C + K) > cap:
        if T > 2:
            T -= 1
        else:
            N, C, K = max(1, N // 2), max(1, C * 3 // 4), max(1, K * 3 // 4)
    make = lambda *s, scale=1.0: (lambda a: round_bf16(a) if dtype == "bf16" else a)(  # noqa: E731
        (rng.standard_normal(s) * scale).astype(np.float32).astype(np.float64))
    scale = 1 / np.sqrt(K)
    a = dict(x=make(T, N, C), h0=make(N, K), c0=make(N, K), w_ih=make(4 * K, C, scale=scale),
             w_hh=make(4 * K, K, scale=scale), b=make(4 * K))
    d = dict(dy=make(T, N, K), dhT=make(N, K), dcT=make(N, K))
    for name in ("h0", "c0", "dhT", "dcT"):  # None: zeros
        if rng.random() < 0.15:
            (a if name in a else d)[name] = None
    return (T, N, C, K), a, d


def draw_config(rng):
    if rng.random() < 0.4:
        return None
    pick = lambda *v: v[rng.integers(len(v))]  # noqa: E731
    cfg = {"spec": pick("t|KN", "t|NK", "t|Kn", "t|nK"), "bn": pick(1, 8, 16, 64),
           "bc": pick(16, 32, 64), "bk": pick(16, 32, 64), "call_kb": pick(1, 8, 64)}
    for p, specs in (("proj", ("NKc", "KNc", "c|KNc")), ("dx", ("NCk", "Cnk", "k|NCk")),
                     ("dw", ("KCn", "CKn", "n|KCn"))):
        chunk = pick(1, 2, 1024)
        cfg.update({f"{p}_spec": pick(*specs), f"{p}_chunk": chunk,
                    f"{p}_group": chunk * pick(1, 2, 4)})
    return {"fwd": cfg}


def run_case(rng, backend, dtype, form, context):
    (T, N, C, K), a, d = draw(rng, dtype)
    config, threads = draw_config(rng), threads_for(rng)
    in_dtype = brgemm.bfloat16 if dtype == "bf16" and rng.random() < 0.7 else np.float32
    context = (f"T,N,C,K={(T, N, C, K)} none={[k for k, v in {**a, **d}.items() if v is None]} "
               f"config={config} threads={threads} {form} {backend} {dtype} "
               f"in={np.dtype(in_dtype).name}. {context}")
    print(context)
    cast = lambda v: None if v is None else v.astype(in_dtype)  # noqa: E731
    with omp_threads(threads):
        if form == "functional":
            y, (hT, cT) = lstm.forward(**{k: cast(v) for k, v in a.items()}, dtype=dtype,
                                       backend=backend, config=config)
            saved = lstm.Saved()  # a fresh one: the backward runs its forward again
            grads = lstm.backward(**{k: cast(v) for k, v in {**d, **a}.items()}, dtype=dtype,
                                  backend=backend, config=config, saved=saved)
            layer = saved.layer
        else:
            layer = lstm.LSTM(C, K, dtype=dtype, backend=backend, config=config)
            layer.w_ih, layer.w_hh, layer.b = (a[k].astype(np.float32) for k in ("w_ih", "w_hh", "b"))
            if rng.random() < 0.3:  # a first pass on other data: the second reuses buffers
                layer.forward(cast(rng.standard_normal((T, N, C))))
                layer.backward(cast(rng.standard_normal((T, N, K))))
            y, (hT, cT) = layer.forward(cast(a["x"]), cast(a["h0"]), cast(a["c0"]))
            grads = layer.backward(cast(d["dy"]), cast(d["dhT"]), cast(d["dcT"])) + (
                layer.grad_w_ih, layer.grad_w_hh, layer.grad_b)
    zeros = np.zeros((N, K))
    full = {k: zeros if v is None else v for k, v in {**a, **d}.items()}
    ref = LSTMRef(full["w_ih"], full["w_hh"], full["b"], dtype == "bf16")
    fwd = ref.forward(Approx(full["x"]), full["h0"], full["c0"], np.asarray(y, np.float64))
    dG = library_dG(layer)
    bwd = ref.backward(Approx(full["dy"]), full["dhT"], full["dcT"], dG)
    rounded = np.dtype(in_dtype) == brgemm.bfloat16
    for name, got, want in zip(("y", "hT", "cT"), (y, hT, cT), fwd):
        assert got.dtype == in_dtype, context
        assert_close(name, got, want, rounded, context)
    assert_close("dG", dG, ref.dG, False, context)
    names = ("dx", "dh0", "dc0", "dw_ih", "dw_hh", "db")
    for i, (name, got, want) in enumerate(zip(names, grads, bwd)):
        assert_close(name, got, want, rounded and (form == "functional" or i < 3), context)


CI = {"cpu": 40, "sycl": 4, "cuda": 6}
SHARE = {"cpu": 0.25, "sycl": 0.01, "cuda": 0.03}


@pytest.mark.parametrize("form", ["functional", "layer"])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_sweep_lstm(backend, dtype, form):
    for _, rng, context in cases(CI[backend] // 2, SHARE[backend]):
        run_case(rng, backend, dtype, form, context)


def test_reference_is_torch(rng):
    """The sweep's reference without bf16 roundings is torch.nn.LSTM's maths."""
    for _ in range(5):
        (T, N, C, K), a, d = draw(rng, "f32")
        full = {k: np.zeros((N, K)) if v is None else v for k, v in {**a, **d}.items()}
        ref = LSTMRef(full["w_ih"], full["w_hh"], full["b"], False)
        fwd = ref.forward(Approx(full["x"]), full["h0"], full["c0"])
        bwd = ref.backward(Approx(full["dy"]), full["dhT"], full["dcT"])
        tf, tb = torch_reference(**full)
        for got, want in zip(fwd + bwd, tf + tb):
            np.testing.assert_allclose(got.v, want, rtol=1e-9, atol=1e-12)
