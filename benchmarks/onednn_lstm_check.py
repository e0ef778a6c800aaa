"""Which side is wrong where our bf16 LSTM's dx and oneDNN's differ: both
against float64 NumPy on the same bf16-rounded inputs (one step, T = 1, in
closed form; T = 2 compares the two sides only), over shapes that vary C and
K around the benchmark's single_step_t1 (T 1, N 128, C 2048, K 1024), with
and without dhT and dcT. Run once as is and once with
ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 (oneDNN's path without AMX):

    python -m benchmarks.onednn_lstm_check [seed]
"""
import sys

import numpy as np

import brgemm
from benchmarks.onednn import Job
from primitives import lstm

SHAPES = [(1, 128, 2048, 1024), (1, 64, 512, 512), (1, 128, 1024, 1024), (1, 128, 512, 1024),
          (1, 128, 2048, 512), (2, 128, 2048, 1024)]  # T, N, C, K


def _bf(a):
    return np.asarray(a, np.float32).astype(brgemm.bfloat16).astype(np.float64)


def reference_dx(x, h0, c0, w_ih, w_hh, b, dy, dhT, dcT):
    """dx of one LSTM step (gates i, f, g, o, as torch.nn.LSTM and oneDNN) in
    float64, x, h0 and the weights rounded to bf16 as both sides round them."""
    x, h0, w_ih, w_hh = _bf(x[0]), _bf(h0), _bf(w_ih), _bf(w_hh)
    c0, b = c0.astype(np.float64), b.astype(np.float64)
    g = x @ w_ih.T + h0 @ w_hh.T + b
    K = h0.shape[1]

    def sig(z):
        return 1 / (1 + np.exp(-z))
    i, f, gg, o = sig(g[:, :K]), sig(g[:, K:2 * K]), np.tanh(g[:, 2 * K:3 * K]), sig(g[:, 3 * K:])
    t = np.tanh(f * c0 + i * gg)
    dh = dy[0].astype(np.float64) + dhT
    dc = dcT + dh * o * (1 - t * t)
    dgates = np.concatenate([dc * gg * i * (1 - i), dc * c0 * f * (1 - f),
                             dc * i * (1 - gg * gg), dh * t * o * (1 - o)], axis=1)
    return (dgates @ w_ih)[None]


def _err(a, ref):
    return np.abs(a - ref).max() / np.abs(ref).max()


def main(seed):
    print(f"seed={seed}")
    rng = np.random.default_rng(seed)
    for T, N, C, K in SHAPES:
        for zero_iter in (False, True):
            def r(*s):
                return rng.standard_normal(s).astype(np.float32)
            x, h0, c0, dy = r(T, N, C), r(N, K), r(N, K), r(T, N, K)
            dhT, dcT = (np.zeros((N, K), np.float32),) * 2 if zero_iter else (r(N, K), r(N, K))
            layer = lstm.LSTM(C, K, dtype="bf16", rng=rng)
            w = (layer.w_ih, layer.w_hh, layer.b)
            layer.forward(x, h0, c0)
            ours = np.asarray(layer.backward(dy, dhT, dcT)[0], np.float32)
            job = Job.lstm("bwd", x, h0, c0, *w, dy, dhT, dcT, dtype="bf16")
            job.run()
            theirs = job.result()
            line = (f"T={T} N={N} C={C} K={K} zero dhT,dcT={zero_iter}: "
                    f"ours-vs-oneDNN {_err(ours, theirs):.3e}")
            if T == 1:
                ref = reference_dx(x, h0, c0, *w, dy, dhT, dcT)
                line += f"  ours-vs-f64 {_err(ours, ref):.3e}  oneDNN-vs-f64 {_err(theirs, ref):.3e}"
            print(line, "impl", job.impl, flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else int(np.random.SeedSequence().entropy % 2**32))
