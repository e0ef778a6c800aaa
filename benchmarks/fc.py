"""FC forward, backward-data and weight update: ours against oneDNN's inner
product (and optionally PyTorch's F.linear path) in the same run, same
threads, same data type.

Ours, layer path: fc.Linear with its blocked buffers and cached plans; only the
plan replay is timed, as oneDNN is timed on its own blocked ('any') formats
with reorders outside. Ours, functional path: fc.forward / fc.backward on plain
arrays with the layout conversions included (backward covers bwd and upd, so
its ratio is against the layer's bwd and upd run one after the other). Each shape's outputs are checked
against oneDNN's before it is timed.

With --vs torch: fc.forward and fc.forward + fc.backward (with a bias) against
PyTorch's F.linear (forward, and autograd backward) on the same arrays, same
threads and dtype, and against the layer path (fc.Linear's blocked passes)."""
import numpy as np

import brgemm
from benchmarks.common import (MAIN_ROUNDS, VsTable, check_close, compare, finish_functional,
                               finish_report, func_over_ours, functional_row, functional_setup,
                               interleaved, layer_peak, machine, ratio_row, read_shapes,
                               set_threads)
from brgemm.layouts import from_blocks, to_blocks
from primitives import fc, reuse


def run(quick=False, dtype="f32", threads=None, shape_set="fc_sizes",
        passes=("fwd", "bwd", "upd"), vs=("onednn",)):
    threads = set_threads(threads, onednn="onednn" in vs)
    return compare(vs, lambda: _vs_onednn(quick, dtype, threads, shape_set, passes),
                   lambda: _functional(quick, dtype, threads, shape_set))


def layer(rng, N, C, K, dtype):
    """Random x [N, C] and dy [N, K] of dtype's NumPy type, the main job's layer
    (fc.Linear without a bias, its forward run once) and its weights w as
    that type, and x, dy blocked as the layer path reads them."""
    npdt = np.float32 if dtype == "f32" else brgemm.bfloat16
    x = rng.standard_normal((N, C)).astype(npdt)
    dy = rng.standard_normal((N, K)).astype(npdt)
    lin = fc.Linear(C, K, bias=False, dtype=dtype, rng=rng)
    g = lin.prepare(N)
    xb, dyb = to_blocks(x, g.bn, g.bc), to_blocks(dy, g.bn, g.bk)
    lin.forward_blocked(xb)
    return x, lin.weight.astype(npdt), dy, lin, xb, dyb


def _vs_onednn(quick, dtype, threads, shape_set, passes):
    from benchmarks.onednn import Job  # after OMP_NUM_THREADS: one OpenMP runtime for both
    rng = np.random.default_rng()
    shapes = read_shapes(shape_set)[:3] if quick else read_shapes(shape_set)
    peak, unit = layer_peak(dtype, threads)
    print(f"fc {dtype}, {threads} threads, {machine()}; peak {peak:.0f} GFLOP/s (one core's "
          f"{unit} peak x threads); median of {MAIN_ROUNDS}, ours and oneDNN interleaved")
    table = VsTable(15, 5, func_gflops=True)
    table.head()
    rows = []
    for (N, C, K), name in shapes:
        x, w, dy, lin, xb, dyb = layer(rng, N, C, K, dtype)
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
            check_close(f"{name} {p}", got, job.result(), dtype, "oneDNN")
            func = {"fwd": lambda: fc.forward(x, w, dtype=dtype),
                    "bwd": lambda: fc.backward(dy, x, w, dtype=dtype), "upd": None}[p]
            # the functional backward also does the update: it is compared with the
            # layer's backward-data and update run one after the other, as a training
            # step runs them (each looped alone would find its operands in cache)
            upd = [lambda: (lin.backward_data_blocked(dyb), lin.update_blocked(dyb))] \
                if p == "bwd" and func else []
            fns = [ours, job.run] + ([func] if func else []) + upd
            times, spread, rounds = interleaved(fns, reps=MAIN_ROUNDS, rounds=True)
            t_ours, t_dnn = times[0], times[1]
            t_func = times[2] if func else None
            r = ratio_row(flops, t_ours, t_dnn, peak, shape=name, N=N, C=C, K=K, pass_=p,
                          dtype=dtype, threads=threads, spread=max(spread[:2]), impl=job.impl,
                          func=flops / t_func * 1e-9 if t_func else None,
                          func_over_ours=func_over_ours(rounds, [3 if upd else 0], 2)
                          if func else None)
            rows.append(r)
            table.line(r)
    return finish_report(f"fc-{dtype}-{threads}t", rows, passes)


def _functional(quick, dtype, threads, shape_set):
    """fc.forward and fc.forward + fc.backward against PyTorch and the layer path."""
    torch, npdt, tdt, reps = functional_setup(threads, dtype, quick, lambda version: (
        f"fc functional {dtype}, {threads} threads: fc.forward / fc.backward (with bias) against "
        f"PyTorch {version} (F.linear, autograd backward) and our layer path"))
    F = torch.nn.functional
    rng = np.random.default_rng()
    rows = []
    for (N, C, K), name in read_shapes(shape_set)[:3] if quick else read_shapes(shape_set):
        lin = fc.Linear(C, K, dtype=dtype, rng=rng)
        g = lin.prepare(N)
        x, dy = (rng.standard_normal(s).astype(npdt) for s in ((N, C), (N, K)))
        w, b = lin.weight.astype(npdt), lin.bias.astype(npdt)
        xb, dyb = to_blocks(x, g.bn, g.bc), to_blocks(dy, g.bn, g.bk)
        tx, tw, tb, tdy = (torch.from_numpy(a.astype(np.float32)).to(tdt) for a in (x, w, b, dy))
        gx, gw, gb = (t.clone().requires_grad_() for t in (tx, tw, tb))
        key = reuse.Key(("benchmark", name))  # the weights do not change in this loop

        def func_fwd_bwd(key=None):
            fc.forward(x, w, b, dtype=dtype, reuse=key)
            return fc.backward(dy, x, w, dtype=dtype, reuse=key)

        def torch_fwd_bwd():
            gx.grad = gw.grad = gb.grad = None
            F.linear(gx, gw, gb).backward(tdy)

        def layer_fwd_bwd():
            lin.forward_blocked(xb)
            lin.backward_blocked(dyb)

        torch_fwd_bwd()
        dx, dw, db = func_fwd_bwd()
        for what, ours, theirs in (("y", fc.forward(x, w, b, dtype=dtype), F.linear(tx, tw, tb)),
                                   ("dx", dx, gx.grad), ("dw", dw, gw.grad), ("db", db, gb.grad)):
            check_close(f"{name} {what}", ours, theirs.float().numpy(), dtype, "PyTorch")
        rows.append(functional_row(name, "fwd", lambda: fc.forward(x, w, b, dtype=dtype),
                                   lambda: F.linear(tx, tw, tb), lambda: lin.forward_blocked(xb),
                                   lambda: fc.forward(x, w, b, dtype=dtype, reuse=key), reps,
                                   dtype=dtype, threads=threads, N=N, C=C, K=K))
        rows.append(functional_row(name, "fwd+bwd", func_fwd_bwd, torch_fwd_bwd, layer_fwd_bwd,
                                   lambda: func_fwd_bwd(key), reps, dtype=dtype, threads=threads,
                                   N=N, C=C, K=K))
    return finish_functional(f"fc-functional-{dtype}-{threads}t", rows)
