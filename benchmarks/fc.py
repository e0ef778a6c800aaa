"""FC forward, backward-data and weight update: ours against PyTorch's CPU
F.linear path (oneDNN/MKL inside) in the same run, same threads, same dtype.

Layer path: fc.Linear with its blocked buffers and cached plans; only the plan
replay is timed (layouts converted once, outside, as for oneDNN's blocked
formats). Functional path: fc.forward / fc.backward on plain arrays, layout
conversions included. PyTorch: F.linear for fwd, dy @ W for bwd, dy^T @ x for
upd, the products its autograd runs."""
import numpy as np

import brgemm
from benchmarks.common import geomean, interleaved, machine, read_shapes, set_threads
from brgemm.backend import cpu
from primitives import fc
from brgemm.layouts import to_blocks


def run(quick=False, dtype="f32", threads=None, passes=("fwd", "bwd", "upd"), vs=("torch",)):
    threads = set_threads(threads)
    import torch  # after OMP_NUM_THREADS is set
    torch.set_num_threads(threads)
    rng = np.random.default_rng()
    shapes = read_shapes("fc_sizes")
    if quick:
        shapes = shapes[:3]
    peak = cpu.fma_peak(0.2)[0] * threads
    npdt = np.float32 if dtype == "f32" else brgemm.bfloat16
    tdt = torch.float32 if dtype == "f32" else torch.bfloat16
    print(f"fc, {dtype}, {threads} threads, {machine()}; peak {peak:.0f} GFLOP/s "
          f"(measured f32 FMA x threads); median of 7, interleaved")
    print(f"{'shape':<16}{'pass':<5}{'layer GF/s':>11}{'func GF/s':>10}{'torch GF/s':>11}"
          f"{'layer/torch':>12}{'func/layer':>11}{'layer %pk':>10}")
    ratios = {p: [] for p in passes}
    for (N, C, K), name in shapes:
        x = rng.standard_normal((N, C)).astype(npdt)
        dy = rng.standard_normal((N, K)).astype(npdt)
        lin = fc.Linear(C, K, dtype=dtype, rng=rng)
        g = lin.prepare(N)
        xb = to_blocks(x, g.bn, g.bc)
        dyb = to_blocks(dy, g.bn, g.bk)
        lin.forward_blocked(xb)
        w = lin.weight.astype(npdt)
        tx, tw, tdy = (torch.from_numpy(a.astype(np.float32)).to(tdt) for a in (x, w, dy))
        flops = 2.0 * N * C * K
        for p in passes:
            ours = {"fwd": lambda: lin.forward_blocked(xb),
                    "bwd": lambda: lin.backward_data_blocked(dyb),
                    "upd": lambda: lin.update_blocked(dyb)}[p]
            func = {"fwd": lambda: fc.forward(x, w, dtype=dtype),
                    "bwd": lambda: fc.backward(dy, x, w, dtype=dtype),  # bwd + upd together
                    "upd": None}[p]
            theirs = {"fwd": lambda: torch.nn.functional.linear(tx, tw),
                      "bwd": lambda: tdy @ tw,
                      "upd": lambda: tdy.t() @ tx}[p]
            fns = [ours, theirs] + ([func] if func else [])
            (t_ours, t_theirs, *t_func), _ = interleaved(fns, reps=5 if quick else 7)
            if p == "bwd" and t_func:  # functional backward does both passes: compare with both
                t_layer_both = t_ours + interleaved([lambda: lin.update_blocked(dyb)], reps=3)[0][0]
                func_ratio = t_layer_both / t_func[0]
            else:
                func_ratio = t_ours / t_func[0] if t_func else float("nan")
            g_ours, g_theirs = flops / t_ours * 1e-9, flops / t_theirs * 1e-9
            g_func = flops / t_func[0] * 1e-9 if t_func else float("nan")
            ratios[p].append(g_ours / g_theirs)
            print(f"{name:<16}{p:<5}{g_ours:>11.1f}{g_func:>10.1f}{g_theirs:>11.1f}"
                  f"{g_ours / g_theirs:>12.2f}{func_ratio:>11.2f}{100 * g_ours / peak:>9.1f}%",
                  flush=True)
    for p in passes:
        print(f"geomean layer/torch {p}: {geomean(ratios[p]):.2f}")
    return ratios
