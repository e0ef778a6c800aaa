"""Convolution forward, backward-data and weight update on the 20 distinct
ResNet-50 layers: ours against oneDNN in the same run, same threads.

Minibatch: one image per thread (the seed paper's per-core minibatch of 1).
Layer path: tensors already in our blocked layouts and plans cached; only the
plan replay is timed, as oneDNN is timed on its own 'any' formats with the
reorders outside. func/ours: the functional forms (conv.forward, and
conv.backward against the layer's bwd and upd plans run one after the
other, the update's shares summed) on NCHW arrays, conversions included,
relative to the layer path. Outputs are checked against oneDNN's
before timing.

With --vs torch: the functional forms against PyTorch's own calls on the same
NCHW arrays (F.conv2d; forward + autograd backward), same threads and dtype,
and against the layer path (fwd, bwd and upd plans, the update's shares summed
into a plain dW as Conv2d.backward does)."""
import numpy as np

import brgemm
from brgemm.info import kernel_path
from benchmarks.common import (MAIN_ROUNDS, VsTable, check_close, compare, finish_functional,
                               finish_report, func_over_ours, functional_row, functional_setup,
                               interleaved, layer_peak, machine, quick_shapes, ratio_row,
                               set_threads)
from primitives import conv, reuse

QUICK = ("res2a_branch2b", "res3a_branch2b", "res4a_branch2c", "res5a_branch2b")


def run(quick=False, dtype="f32", threads=None, shape_set="resnet50_conv",
        passes=("fwd", "bwd", "upd"), vs=("onednn",)):
    threads = set_threads(threads, onednn="onednn" in vs)
    return compare(vs, lambda: _vs_onednn(quick, dtype, threads, shape_set, passes),
                   lambda: _functional(quick, dtype, threads, shape_set))


def layer(rng, N, C, K, H, W, R, S, st, pd, dtype, npdt):
    """Random x, w, dy of one layer, its geometry, the passes whose weights are
    VNNI-packed (as Conv2d keeps them) and the blocked tensors the layer path
    runs on."""
    x = rng.standard_normal((N, C, H, W)).astype(npdt)
    w = (rng.standard_normal((K, C, R, S)) / np.sqrt(C * R * S)).astype(npdt)
    g = conv.geometry(N, C, K, H, W, R, S, (st, st), (pd, pd), path=kernel_path(dtype))
    dy = rng.standard_normal((N, K, g.P, g.Q)).astype(npdt)
    vnni = conv.vnni_passes(g, dtype, "cpu")
    wb, wt = conv.layer_weights(w, g, dtype, vnni)
    blocked = dict(x=conv.block_x(x, g, dtype), w=wb, wt=wt,
                   dyp=conv.block_y(dy, g, dtype, bordered=True),
                   y=brgemm.aligned_empty((g.N, g.Kb, g.P, g.Q, g.bk), np.float32),
                   dx=brgemm.aligned_empty((g.N, g.Cb, g.Hp, g.Wp, g.bc), np.float32),
                   dw=conv.update_output(g), dw_sum=np.empty(conv.update_output(g)[0].size, np.float32),
                   upd=conv.update_inputs(x, dy, g, dtype, vnni="upd" in vnni))
    return x, w, dy, g, vnni, blocked


def layer_backward(g, t, plans):
    """The layer path's backward as the main job times it: backward-data's
    and the update's plans (plans["bwd"], plans["upd"]) on the blocked
    tensors t (_layer's), one after the other, the update's shares summed."""
    shares = t["dw"].reshape(g.splits, -1)

    def run():
        plans["bwd"].run(dyp=t["dyp"], wt=t["wt"], dx=t["dx"])
        plans["upd"].run(dw=t["dw"], **t["upd"])
        if g.splits > 1:
            brgemm.layouts.column_sums(shares, out=t["dw_sum"])
    return run


def _vs_onednn(quick, dtype, threads, shape_set, passes):
    from benchmarks.onednn import Job
    rng = np.random.default_rng()
    shapes = quick_shapes(shape_set, quick, QUICK)
    N = threads
    peak, unit = layer_peak(dtype, threads)
    npdt = np.float32 if dtype == "f32" else brgemm.bfloat16
    reps = MAIN_ROUNDS
    print(f"conv {dtype}, N={N} (one image per thread), {threads} threads, {machine()}; peak "
          f"{peak:.0f} GFLOP/s (one core's {unit} peak x threads); median of {reps}, interleaved")
    table = VsTable(17, 5, label="layer")
    table.head()
    rows = []
    for (C, K, H, W, R, S, st, pd), name in shapes:
        x, w, dy, g, vnni, t = layer(rng, N, C, K, H, W, R, S, st, pd, dtype, npdt)
        upd = t["upd"]
        flops = 2.0 * N * K * g.P * g.Q * C * R * S
        for p in passes:
            plan = conv.plan(g, p, dtype, p in vnni)
            args = {"fwd": dict(x=t["x"], w=t["w"], y=t["y"]),
                    "bwd": dict(dyp=t["dyp"], wt=t["wt"], dx=t["dx"]),
                    "upd": dict(dw=t["dw"], **upd)}[p]

            shares = t["dw"].reshape(g.splits, -1)

            def ours():  # the update's shares are summed as part of it (in C, threaded)
                plan.run(**args)
                if p == "upd" and g.splits > 1:
                    brgemm.layouts.column_sums(shares, out=t["dw_sum"])
                    shares[0] = t["dw_sum"]

            try:
                job = Job.conv(p, N, C, K, H, W, R, S, (st, st), (pd, pd), x=x if p != "bwd" else None,
                               w=w if p != "upd" else None, dy=dy if p != "fwd" else None,
                               dtype=dtype)
            except RuntimeError as e:
                print(f"{name:<17}{p:<5} oneDNN cannot run this here: {e}")
                continue
            ours()
            job.run()
            got = {"fwd": lambda: conv.unblock_y(t["y"], g, np.float32),
                   "bwd": lambda: conv.unblock_x(t["dx"], g, np.float32),
                   "upd": lambda: conv.unblock_dw(t["dw"][:1], g, np.float32)}[p]()
            check_close(f"{name} {p}", got, job.result(), dtype, "oneDNN")
            # functional forms on NCHW arrays, conversions included; conv.backward does
            # backward-data and the update, so it is compared with the layer's two
            # passes run one after the other, as a training step runs them (and as
            # the --vs torch tables' layer side does): each pass looped alone would
            # find its own operands in cache, which neither backward does
            extra = {"fwd": [lambda: conv.forward(x, w, st, pd, dtype=dtype)],
                     "bwd": [lambda: conv.backward(dy, x, w, st, pd, dtype=dtype),
                             layer_backward(g, t, {"bwd": plan, "upd": conv.plan(
                                 g, "upd", dtype, "upd" in vnni)})],
                     "upd": []}[p]
            times, spread, rounds = interleaved([ours, job.run] + extra, reps=reps, rounds=True)
            t_ours, t_dnn = times[:2]
            # the functional call (fn 2) against the layer's passes it does (0, or 3)
            f_o = func_over_ours(rounds, [3 if len(extra) > 1 else 0], 2) if extra else None
            r = ratio_row(flops, t_ours, t_dnn, peak, shape=name, pass_=p, dtype=dtype, N=N,
                          threads=threads, impl=job.impl, spread=max(spread[:2]),
                          func_over_ours=f_o)
            rows.append(r)
            table.line(r)
    return finish_report(f"conv-{dtype}-{threads}t", rows, passes)


def _functional(quick, dtype, threads, shape_set):
    """conv.forward and conv.forward + conv.backward against PyTorch and the layer path."""
    N = threads
    torch, npdt, tdt, reps = functional_setup(threads, dtype, quick, lambda version: (
        f"conv functional {dtype}, N={N}, {threads} threads: conv.forward / conv.backward on "
        f"NCHW arrays against PyTorch {version} (F.conv2d, autograd backward) and our layer path"))
    F = torch.nn.functional
    rng = np.random.default_rng()
    rows = []
    for (C, K, H, W, R, S, st, pd), name in quick_shapes(shape_set, quick, QUICK):
        x, w, dy, g, vnni, t = layer(rng, N, C, K, H, W, R, S, st, pd, dtype, npdt)
        t["dw_plain"] = np.empty((K, C, R, S), np.float32)
        tx, tw, tdy = (torch.from_numpy(a.astype(np.float32)).to(tdt) for a in (x, w, dy))
        gx, gw = tx.clone().requires_grad_(), tw.clone().requires_grad_()
        plans = {p: conv.plan(g, p, dtype, p in vnni) for p in ("fwd", "bwd", "upd")}

        def layer_fwd():
            plans["fwd"].run(x=t["x"], w=t["w"], y=t["y"])

        def layer_fwd_bwd():
            layer_fwd()
            plans["bwd"].run(dyp=t["dyp"], wt=t["wt"], dx=t["dx"])
            plans["upd"].run(dw=t["dw"], **t["upd"])
            conv.unblock_dw(t["dw"], g, np.float32, out=t["dw_plain"])

        def torch_fwd_bwd():
            gx.grad = gw.grad = None
            F.conv2d(gx, gw, stride=st, padding=pd).backward(tdy)

        def func_fwd_bwd(key=None):
            conv.forward(x, w, st, pd, dtype=dtype, reuse=key)
            return conv.backward(dy, x, w, st, pd, dtype=dtype, reuse=key)

        key = reuse.Key(("benchmark", name))  # the weights do not change in this loop

        torch_fwd_bwd()
        dx, dw = func_fwd_bwd()
        for what, ours, theirs in (("y", conv.forward(x, w, st, pd, dtype=dtype),
                                    F.conv2d(tx, tw, stride=st, padding=pd)),
                                   ("dx", dx, gx.grad), ("dw", dw, gw.grad)):
            check_close(f"{name} {what}", ours, theirs.float().numpy(), dtype, "PyTorch",
                        bf16_tol=3e-2)
        rows.append(functional_row(name, "fwd", lambda: conv.forward(x, w, st, pd, dtype=dtype),
                                   lambda: F.conv2d(tx, tw, stride=st, padding=pd), layer_fwd,
                                   lambda: conv.forward(x, w, st, pd, dtype=dtype, reuse=key),
                                   reps, dtype=dtype, threads=threads, N=N))
        rows.append(functional_row(name, "fwd+bwd", func_fwd_bwd, torch_fwd_bwd, layer_fwd_bwd,
                                   lambda: func_fwd_bwd(key), reps, dtype=dtype, threads=threads,
                                   N=N))
    return finish_functional(f"conv-functional-{dtype}-{threads}t", rows)
