"""FC forward, backward-data and weight update: ours against oneDNN's inner
product (and optionally PyTorch's F.linear path) in the same run, same
threads, same data type.

Ours, layer path: fc.Linear with its blocked buffers and cached plans; only the
plan replay is timed, as oneDNN is timed on its own blocked ('any') formats
with reorders outside. Ours, functional path: fc.forward / fc.backward on plain
arrays with the layout conversions included (backward covers bwd and upd, so
its ratio is against the layer's bwd + upd). Each shape's outputs are checked
against oneDNN's before it is timed."""
import numpy as np

import brgemm
from benchmarks.common import finish_report, interleaved, machine, ratio_row, read_shapes, set_threads
from brgemm.backend import cpu
from brgemm.layouts import from_blocks, to_blocks
from primitives import fc


def _check(name, ours, theirs, dtype):
    err = np.abs(ours - theirs).max() / (np.abs(theirs).max() + 1e-30)
    if err > (1e-4 if dtype == "f32" else 2e-2):
        raise AssertionError(f"{name}: ours and oneDNN differ by {err:.2e} (relative to max)")


def run(quick=False, dtype="f32", threads=None, shape_set="fc_sizes",
        passes=("fwd", "bwd", "upd"), vs=("onednn",)):
    threads = set_threads(threads)
    from benchmarks.onednn import Job  # after OMP_NUM_THREADS: one OpenMP runtime for both
    torch = None
    if "torch" in vs:
        import torch
        torch.set_num_threads(threads)
    rng = np.random.default_rng()
    shapes = read_shapes(shape_set)[:3] if quick else read_shapes(shape_set)
    peak = cpu.fma_peak(0.2)[0] * threads
    npdt = np.float32 if dtype == "f32" else brgemm.bfloat16
    print(f"fc {dtype}, {threads} threads, {machine()}; peak {peak:.0f} GFLOP/s (measured f32 "
          f"FMA x threads); median of {5 if quick else 7}, ours and oneDNN interleaved")
    head = (f"{'shape':<15}{'pass':<5}{'ours':>8}{'func':>8}{'oneDNN':>8}{'ours/oneDNN':>12}"
            f"{'func/ours':>10}{'ours %pk':>9}{'spread':>8}" + (f"{'torch':>8}" if torch else "")
            + "  oneDNN impl")
    print(head + "\n" + "-" * len(head))
    rows = []
    for (N, C, K), name in shapes:
        x = rng.standard_normal((N, C)).astype(npdt)
        dy = rng.standard_normal((N, K)).astype(npdt)
        lin = fc.Linear(C, K, bias=False, dtype=dtype, rng=rng)
        g = lin.prepare(N)
        w = lin.weight.astype(npdt)
        xb, dyb = to_blocks(x, g.bn, g.bc), to_blocks(dy, g.bn, g.bk)
        lin.forward_blocked(xb)
        flops = 2.0 * N * C * K
        for p in passes:
            try:
                job = Job.ip(p, x if p != "bwd" else None, w if p != "upd" else None,
                             dy if p != "fwd" else None, dtype)
            except RuntimeError as e:  # e.g. no bf16 inner product for this CPU in oneDNN
                print(f"{name:<15}{p:<5} oneDNN cannot run this here: {e}")
                continue
            ours = {"fwd": lambda: lin.forward_blocked(xb),
                    "bwd": lambda: lin.backward_data_blocked(dyb),
                    "upd": lambda: lin.update_blocked(dyb)}[p]
            ours()
            job.run()
            got = {"fwd": lambda: from_blocks(lin.y, N, K), "bwd": lambda: from_blocks(lin.dx, N, C),
                   "upd": lambda: lin.grad_weight}[p]()
            _check(f"{name} {p}", got, job.result(), dtype)
            func = {"fwd": lambda: fc.forward(x, w, dtype=dtype),
                    "bwd": lambda: fc.backward(dy, x, w, dtype=dtype), "upd": None}[p]
            fns = [ours, job.run] + ([func] if func else [])
            if torch is not None:
                tx, tw, tdy = (torch.from_numpy(a.astype(np.float32)).to(
                    torch.float32 if dtype == "f32" else torch.bfloat16) for a in (x, w, dy))
                fns.append({"fwd": lambda: torch.nn.functional.linear(tx, tw),
                            "bwd": lambda: tdy @ tw, "upd": lambda: tdy.t() @ tx}[p])
            times, spread = interleaved(fns, reps=5 if quick else 7)
            t_ours, t_dnn = times[0], times[1]
            t_func = times[2] if func else None
            if p == "bwd" and t_func:  # the functional backward also does the update
                t_func_ref = t_ours + interleaved([lambda: lin.update_blocked(dyb)], reps=3)[0][0]
            else:
                t_func_ref = t_ours
            r = ratio_row(flops, t_ours, t_dnn, peak, shape=name, N=N, C=C, K=K, pass_=p,
                          dtype=dtype, threads=threads, spread=max(spread[:2]), impl=job.impl,
                          func=flops / t_func * 1e-9 if t_func else None,
                          func_over_ours=t_func_ref / t_func if t_func else None,
                          torch=flops / times[-1] * 1e-9 if torch is not None else None)
            rows.append(r)
            fr = f"{r['func']:>8.1f}" if r["func"] else f"{'-':>8}"
            fo = f"{r['func_over_ours']:>10.2f}" if r["func_over_ours"] else f"{'-':>10}"
            print(f"{name:<15}{p:<5}{r['ours']:>8.1f}{fr}{r['onednn']:>8.1f}{r['ratio']:>12.2f}{fo}"
                  f"{r['pct_peak']:>8.1f}%{100 * r['spread']:>7.0f}%"
                  + (f"{r['torch']:>8.1f}" if torch else "")
                  + f"  {job.impl}", flush=True)
    return finish_report(f"fc-{dtype}-{threads}t", rows, passes)
