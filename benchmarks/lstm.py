"""LSTM forward and forward+backward: ours (lstm.LSTM, weights blocked once,
plans cached) against oneDNN's LSTM primitive in the same run, same threads.

Both sides are timed on what a training step runs: our forward converts x
into its blocked layout and back (torch.nn.LSTM layouts in and out), oneDNN
gets its inputs reordered once, outside. Outputs (y, then dx) are checked
against each other before timing. FLOPs: 2 * T * N * 4K * (C + K) forward,
twice that backward (data and weights)."""
import numpy as np

from benchmarks.common import finish_report, interleaved, machine, ratio_row, read_shapes, set_threads
from brgemm.backend import cpu
from primitives import lstm


def run(quick=False, dtype="f32", threads=None, shape_set="gnmt_lstm", vs=("onednn",)):
    threads = set_threads(threads)
    from benchmarks.onednn import Job
    torch = None
    if "torch" in vs:  # torch.nn.LSTM on the CPU, same data and threads
        import torch
        torch.set_num_threads(threads)
    rng = np.random.default_rng()
    shapes = read_shapes(shape_set)
    if quick:
        shapes = [s for s in shapes if s[1] in ("small_t10_n64", "single_step_t1")]
    peak = cpu.fma_peak(0.2)[0] * threads
    reps = 5 if quick else 7
    print(f"lstm {dtype}, {threads} threads, {machine()}; peak {peak:.0f} GFLOP/s; median of {reps}, "
          "interleaved")
    head = (f"{'shape':<20}{'pass':<8}{'ours':>8}{'oneDNN':>8}{'ours/oneDNN':>12}{'ours %pk':>9}"
            f"{'spread':>8}" + (f"{'torch':>8}" if torch else "") + "  oneDNN impl")
    print(head + "\n" + "-" * len(head))
    rows = []
    for (T, N, C, K), name in shapes:
        r = lambda *s, scale=1.0: (rng.standard_normal(s) * scale).astype(np.float32)  # noqa: E731
        x, h0, c0 = r(T, N, C), r(N, K), r(N, K)
        dy, dhT, dcT = r(T, N, K), r(N, K), r(N, K)
        layer = lstm.LSTM(C, K, dtype=dtype, rng=rng)
        w = (layer.w_ih, layer.w_hh, layer.b)
        fwd_flops = 2.0 * T * N * 4 * K * (C + K)
        ours_f = lambda: layer.forward(x, h0, c0)  # noqa: E731
        ours_fb = lambda: (layer.forward(x, h0, c0), layer.backward(dy, dhT, dcT))  # noqa: E731
        try:
            jf = Job.lstm("fwd", x, h0, c0, *w, dtype=dtype)
            jb = Job.lstm("bwd", x, h0, c0, *w, dy, dhT, dcT, dtype=dtype)
        except RuntimeError as e:  # e.g. no bf16 LSTM in oneDNN without AVX512-BF16
            why = "unimplemented" if "status 3" in str(e) else str(e)
            print(f"{name:<20}oneDNN has no {dtype} LSTM here ({why})")
            continue
        y, _ = ours_f()
        jf.run()
        _check(f"{name} y", y, jf.result(), dtype)
        dx = layer.backward(dy, dhT, dcT)[0]
        jb.run()
        _check(f"{name} dx", dx, jb.result(), dtype)
        fns = [ours_f, jf.run, ours_fb, lambda: (jf.run(), jb.run())]
        if torch is not None:
            fns += _torch_passes(torch, dtype, x, h0, c0, w, dy)
        times, spread = interleaved(fns, reps=reps)
        (t_f, t_df, t_fb, t_db), t_torch = times[:4], times[4:] or (None, None)
        for i, (p, t_ours, t_dnn, flops, sp) in enumerate((
                ("fwd", t_f, t_df, fwd_flops, spread[:2]),
                ("fwd+bwd", t_fb, t_db, 3 * fwd_flops, spread[2:4]))):
            row = ratio_row(flops, t_ours, t_dnn, peak, shape=name, T=T, N=N, C=C, K=K, pass_=p,
                            threads=threads, impl=jf.impl, spread=max(sp),
                            torch=flops / t_torch[i] * 1e-9 if torch is not None else None)
            rows.append(row)
            print(f"{name:<20}{p:<8}{row['ours']:>8.1f}{row['onednn']:>8.1f}{row['ratio']:>12.2f}"
                  f"{row['pct_peak']:>8.1f}%{100 * row['spread']:>7.0f}%"
                  + (f"{row['torch']:>8.1f}" if torch else "") + f"  {jf.impl}", flush=True)
    return finish_report(f"lstm-{dtype}-{threads}t", rows, ("fwd", "fwd+bwd"))


def _torch_passes(torch, dtype, x, h0, c0, w, dy):
    """torch.nn.LSTM forward, and forward + backward, on the same weights."""
    T, N, C = x.shape
    K = h0.shape[1]
    tdt = torch.float32 if dtype == "f32" else torch.bfloat16
    m = torch.nn.LSTM(C, K).to(tdt)
    with torch.no_grad():
        for param, value in zip((m.weight_ih_l0, m.weight_hh_l0, m.bias_ih_l0), w):
            param.copy_(torch.from_numpy(value))
        m.bias_hh_l0.zero_()
    tx, th, tc, tdy = (torch.from_numpy(a).to(tdt) for a in (x, h0[None], c0[None], dy))
    tx.requires_grad_(True)

    def fwd_bwd():
        y, _ = m(tx, (th, tc))
        y.backward(tdy)
    return [lambda: m(tx, (th, tc)), fwd_bwd]


def _check(what, ours, theirs, dtype):
    # bf16: both sides round x, h and weights to bf16, at different points
    err = np.abs(ours - theirs).max() / (np.abs(theirs).max() + 1e-30)
    if err > (1e-4 if dtype == "f32" else 3e-2):
        raise AssertionError(f"{what}: ours and oneDNN differ by {err:.2e} (relative to max)")
