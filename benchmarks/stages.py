"""Where a functional call's time goes: conv.forward / conv.backward,
fc.forward / fc.backward and lstm.forward / lstm.backward (f32; one
lstm.Saved between them) on the quick shapes, their steps (layout
copies, plans) replayed in the order the call makes them and each timed
there, so every step finds the caches as the call leaves them; "other" is
the whole call less its steps (Python: argument checks, plan look-up). N =
threads for conv (one image per thread), as the benchmarks, unless --images.

    python -m benchmarks.stages [--threads T] [--images N] [--only conv|fc|lstm]

Each line: the call's median ms, then each step's median ms, medians of 15
rounds after two warm-ups. The steps are the blocked path's (the one the
layer path needs copies for); where the call takes another path
(conv.pointwise, conv.reads_x_nchw, conv.copies_w_nchw and conv.copies_x_rows,
fc.reads_w, fc.copies_wt and fc.copies_w: their plans copy W's tiles
themselves) the line says which;
conv.columns' lines show its own steps, as the call takes them. Lines
marked * time a path's steps alone, taken by the call or not
(the blocked steps beside conv.columns' lines, conv.columns on other small
images, fc.reads_w), to show what it would cost;
after each conv line, the layer path's own plans of that pass alone; fc's
last line per shape, the layer path's passes (fc.Linear) alone.
lstm's lines (forward, and forward+backward as a training step makes them;
then the layer path's, lstm.LSTM, the same way) are the calls themselves
under the profiler: each layout copy and plan run,
by the method that made it, medians of 15 calls profiled one by one (the
call's median without the profiler first)."""
import argparse
import cProfile
import collections
import dataclasses
import pstats
import statistics
import time

import numpy as np

from benchmarks.common import machine, quick_shapes, read_shapes, set_threads
from brgemm import im2col, layouts as L
from brgemm.arrays import Scratch, aligned_empty
from brgemm.info import kernel_path
from brgemm.machine import cpu_threads
from primitives import conv, fc, lstm
from primitives.conv_plans import update_inputs, update_output


def _steps(steps, whole=None, rounds=15):
    """Median ms of whole() and of each step of `steps` (name, fn) run in
    order; without whole, their sum (a path the call does not take)."""
    for _ in range(2):
        for _, fn in steps + [("", whole or (lambda: None))]:
            fn()
    t_whole, t_steps = [], [[] for _ in steps]
    for _ in range(rounds):
        t0 = time.perf_counter()
        if whole:
            whole()
        t_whole.append(time.perf_counter() - t0)
        for i, (_, fn) in enumerate(steps):
            t0 = time.perf_counter()
            fn()
            t_steps[i].append(time.perf_counter() - t0)
    ms = [1e3 * statistics.median(t) for t in t_steps]
    if whole is None:
        return sum(ms), [(name, m) for (name, _), m in zip(steps, ms)]
    whole_ms = 1e3 * statistics.median(t_whole)
    return whole_ms, [(name, m) for (name, _), m in zip(steps, ms)] + \
        [("other", whole_ms - sum(ms))]


def _line(name, pass_, path, whole, steps):
    print(f"{name:<16}{pass_:<5}{path:<10}{whole:>8.3f} ms = "
          + " + ".join(f"{n} {m:.3f}" for n, m in steps), flush=True)


def _x_in_place(name, g, x, w, wb, y, st, pd):
    """The line of conv.forward where it reads x in place: its plan on w's
    blocked copy (nchw_x), or on w as given, copying w's tiles itself
    (nchw_w), or on x's rows copied by its tasks (nchw_r)."""
    if not conv.reads_x_nchw(g, "f32", "cpu", x):
        pr = conv.nchw_ring_plan(g)
        r_slots, r_rings = (np.empty(pr.extent[t], np.float32) for t in ("y", "xr"))
        _line(name, "fwd", "nchw_r", *_steps([
            ("w", lambda: conv.block_w(w, g, "f32", out=wb)),
            ("plan+y", lambda: pr.run(x=x, w=wb, xr=r_rings, y=r_slots, out=y))],
            lambda: conv.forward(x, w, st, pd)))
        return
    if conv.copies_w_nchw(g, None, w):
        pc = conv.nchw_copying_plan(g)
        c_slots, c_wt = (np.empty(pc.extent[t], np.float32) for t in ("y", "wt"))
        _line(name, "fwd", "nchw_w", *_steps([
            ("plan+y", lambda: pc.run(x=x, w=w, wt=c_wt, y=c_slots, out=y))],
            lambda: conv.forward(x, w, st, pd)))
        return
    px = conv.nchw_plan(g, "f32", False, x_nchw=True)
    x_slots = np.empty(px.extent["y"], np.float32)
    _line(name, "fwd", "nchw_x", *_steps([
        ("w", lambda: conv.block_w(w, g, "f32", out=wb)),
        ("plan+y", lambda: px.run(x=x, w=wb, y=x_slots, out=y))],
        lambda: conv.forward(x, w, st, pd)))


def _conv(N):
    rng = np.random.default_rng(0)
    for (C, K, H, W, R, S, st, pd), name in read_shapes("resnet50_conv"):
        if name not in ("res2a_branch2b", "res3a_branch2b", "res4a_branch2c", "res5a_branch2b"):
            continue
        x = rng.standard_normal((N, C, H, W)).astype(np.float32)
        w = rng.standard_normal((K, C, R, S)).astype(np.float32)
        g = conv.geometry(N, C, K, H, W, R, S, (st, st), (pd, pd), path=kernel_path("f32"))
        dy = rng.standard_normal((N, K, g.P, g.Q)).astype(np.float32)
        xb, wb, wt = conv.block_x(x, g, "f32"), conv.block_w(w, g, "f32"), \
            conv.block_w(w, g, "f32", True)
        yb = np.empty((N, g.Kb, g.P, g.Q, g.bk), np.float32)
        dyp = conv.block_y(dy, g, "f32", bordered=True)
        dxb = np.empty((N, g.Cb, g.Hp, g.Wp, g.bc), np.float32)
        buffer = Scratch().get
        ui, dw = update_inputs(x, dy, g, "f32", buffer), update_output(g)
        pf, pb, pu = (conv.plan(g, p, "f32") for p in ("fwd", "bwd", "upd"))
        y, dx, dwp = np.empty((N, K, g.P, g.Q), np.float32), np.empty_like(x), np.empty_like(w)
        path, bpath = ("pointwise" if conv.pointwise(g, "f32", "cpu") else
                       "columns" if conv.columns(g, "f32", "cpu", p) else "blocked"
                       for p in ("fwd", "bwd"))
        if conv.stores_nchw(g, "f32", "cpu", np.float32):  # the plan stores y itself
            pn = conv.nchw_plan(g, "f32", False)
            slots = np.empty(pn.extent["y"], np.float32)
            out = [("plan+y", lambda: pn.run(x=xb, w=wb, y=slots, out=y))]
        else:
            out = [("plan", lambda: pf.run(x=xb, w=wb, y=yb)),
                   ("y", lambda: conv.unblock_y(yb, g, np.float32, out=y))]
        in_place = path == "blocked" and (conv.reads_x_nchw(g, "f32", "cpu", x)
                                          or conv.copies_x_rows(g, "f32", "cpu", x))
        if in_place:
            _x_in_place(name, g, x, w, wb, y, st, pd)
        # the blocked steps alone where they are not the call's
        alone = path == "columns" or in_place
        _line(name, "fwd", "blocked*" if alone else path, *_steps([
            ("x", lambda: conv.block_x(x, g, "f32", out=xb)),
            ("w", lambda: conv.block_w(w, g, "f32", out=wb))] + out,
            None if alone else lambda: conv.forward(x, w, st, pd)))
        layer = _steps([], lambda: pf.run(x=xb, w=wb, y=yb))[0]
        print(f"{'':<31}the layer path's forward plan alone: {layer:.3f} ms", flush=True)
        if path == "blocked" and H <= 14:  # conv.columns' forward, alone
            _line(name, "fwd", "columns*", *_steps(_columns_steps(x, w, g)))
        if conv.stores_nchw_dx(g, "f32", "cpu", np.float32):  # the plan stores dx itself
            pn = conv.nchw_dx_plan(g, "f32", False)
            dx_slots = np.empty(pn.extent["dx"], np.float32)
            data = [("plan+dx", lambda: pn.run(dyp=dyp, wt=wt, dx=dx_slots, out=dx))]
        else:
            data = [("plan", lambda: pb.run(dyp=dyp, wt=wt, dx=dxb)),
                    ("dx", lambda: conv.unblock_x(dxb, g, np.float32, out=dx))]
        if conv.reads_x(g, "f32", "cpu", x) and path == "blocked":  # x in place, dyp
            px = conv.x_plan(g)
            dwt = np.empty((g.splits, g.Kb, g.Cb, R, S, g.bc, g.bk), np.float32)
            upd = [("upd", lambda: px.run(dw=dwt, x=x, dyp=dyp)),
                   ("dw", lambda: conv.unblock_dw(dwt, g, np.float32, out=dwp, c_rows=True))]
        elif conv.reads_dy(g, "f32", "cpu", dy):  # the update reads dy in place
            pd_ = conv.dy_plan(g)
            upd = [("x", lambda: conv.block_x(x, g, "f32", out=xb)),
                   ("upd", lambda: pd_.run(dw=dw, dyt=dy, x=xb)),
                   ("dw", lambda: conv.unblock_dw(dw, g, np.float32, out=dwp))]
        else:
            upd = [("x+dy", lambda: update_inputs(x, dy, g, "f32", buffer)),
                   ("upd", lambda: pu.run(dw=dw, **ui)),
                   ("dw", lambda: conv.unblock_dw(dw, g, np.float32, out=dwp))]
        _line(name, "bwd", "blocked*" if bpath == "columns" else bpath, *_steps([
            ("dy", lambda: conv.block_y(dy, g, "f32", bordered=True, out=dyp)),
            ("wt", lambda: conv.block_w(w, g, "f32", True, out=wt))] + data + upd,
            None if bpath == "columns" else lambda: conv.backward(dy, x, w, st, pd)))
        layer = [_steps([], lambda: p.run(**a))[0] for p, a in (
            (pb, dict(dyp=dyp, wt=wt, dx=dxb)), (pu, ui | dict(dw=dw)))]
        print(f"{'':<31}the layer path's backward-data and update plans alone: {layer[0]:.3f}"
              f" + {layer[1]:.3f} ms", flush=True)
        if path == "pointwise":  # what the pointwise call's steps are
            _line(name, "fwd", "pointwise*", *_steps(_pointwise_forward(x, w, g, y)))
            _line(name, "bwd", "pointwise*", *_steps(_pointwise_backward(x, w, dy, g, dx)))
        if "columns" in (path, bpath):  # the call's own steps (the blocked* lines: not its)
            _columns_lines(name, x, w, dy, dx, g, (st, pd), (path, bpath))


def _columns_lines(name, x, w, dy, dx, g, args, paths):
    """conv.forward's and conv.backward's lines where they take conv.columns
    (paths: the forward's and the backward's), each call's own steps."""
    if paths[0] == "columns":
        _line(name, "fwd", "columns", *_steps(_columns_steps(x, w, g),
                                              lambda: conv.forward(x, w, *args)))
    if paths[1] == "columns":
        _line(name, "bwd", "columns", *_steps(columns_backward_steps(x, w, dy, g, dx),
                                              lambda: conv.backward(dy, x, w, *args)))


def _pointwise_forward(x, w, g, y):
    """The steps of conv.forward's pointwise path: where the config's
    pointwise_rows says so, x's copy on whole-line rows, then the plan."""
    hx = conv.pointwise_rows(g)
    p = conv.pointwise_plan(g, "f32", conv.pointwise(g, "f32", "cpu"), hx=hx)
    tail = conv.pointwise_tail(g)
    # each image's last pixels, where the plan computes them apart (conv._pointwise)
    xt, yt = (np.empty((rows, g.N * tail), np.float32) for rows in (g.C, g.K))
    tails = dict(xt=xt, yt=yt) if tail else {}
    steps = []
    if hx:
        xr = aligned_empty((g.N, g.C, hx), np.float32)
        steps.append(("x rows", lambda: conv.rows_on_lines(x, hx, out=xr)))
    if tail:
        steps.append(("x tail", lambda: conv.gather_tail(x, xt, g, tail)))
    steps.append(("plan", lambda: p.run(w=w, x=xr if hx else x, y=y, **tails)))
    if tail:
        steps.append(("y tail", lambda: conv.store_tail(yt, y, g, tail)))
    return steps


def _pointwise_backward(x, w, dy, g, dx):
    """The steps of conv.backward's pointwise path (1x1, stride 1) where
    pointwise_classes is off: backward-data's plan (w read in place as the
    kernel's transposed A, dy and dx in place), x's transposed tiles,
    the update's plan (dy in place, dW in w's layout) and its shares' sum;
    where conv.pointwise_copies_dy, dy's tiles and x in place instead, then
    dW^T transposed ("dw")."""
    gt = dataclasses.replace(g, C=g.K, K=g.C, bc=g.bk, bk=g.bc)
    swap = conv.pointwise_copies_dy(g)
    gu, a, b = (gt, x, dy) if swap else (g, dy, x)  # the update's geometry, in place, copied
    HW, bx = g.H * g.W, conv.pointwise_x_block(gu)
    bp, shares = conv.pointwise_update(gu, "f32", "cpu", a)
    bt = L.to_blocks(b.reshape(g.N * gu.C, HW), bp, bx, transpose=True)
    parts, dw = np.empty((shares, g.K * g.C), np.float32), np.empty(g.K * g.C, np.float32)
    data = conv.pointwise_plan(gt, "f32", conv.pointwise(gt, "f32", "cpu"), w_t=True)
    upd = conv.pointwise_update_plan(gu, bp, shares)
    steps = [("plan+dx", lambda: data.run(w=w.reshape(g.K, g.C), x=dy, y=dx)),
             ("dyt" if swap else "xt", lambda: L.to_blocks(b.reshape(g.N * gu.C, HW), bp, bx,
                                                         transpose=True, out=bt)),
             ("upd", lambda: upd.run(dy=a, xt=bt, dw=parts))]
    if shares > 1:
        steps.append(("sum", lambda: L.column_sums(parts, out=dw)))
    if swap:
        dwp = np.empty((g.K, g.C, 1, 1), np.float32)
        steps.append(("dw", lambda: conv.dw_from_transposed(parts[0].reshape(g.C, g.K), dwp)))
    return steps


def _columns_steps(x, w, g):
    """The steps of conv.forward's columns path as the call takes them:
    im2col, the plan (its reduction in shares where conv.columns_shares says
    so), the shares' sum, y^c into y."""
    bd, bp = conv.columns_blocks(g)
    PQ, taps = g.P * g.Q, ((g.R, g.S), (g.sh, g.sw), (g.ph, g.pw))
    shares = conv.columns_shares(g, "f32", bd, cpu_threads())
    xc = im2col.image_to_columns(x, *taps, bd, bp)
    yc, y = np.empty((g.K, g.N * PQ), np.float32), np.empty((g.N, g.K, g.P, g.Q), np.float32)
    parts = yc if shares == 1 else np.empty((shares, yc.size), np.float32)
    p = conv.columns_plan(g, "f32", bd, bp, shares=shares)
    br = conv.columns_y_rows(g)  # y's tiles, as conv.forward copies them
    steps = [("x", lambda: im2col.image_to_columns(x, *taps, bd, bp, out=xc)),
             ("plan", lambda: p.run(w=w, xc=xc, yc=parts))]
    if shares > 1:
        steps.append(("sum", lambda: L.column_sums(parts, out=yc.reshape(-1))))
    return steps + [("y", lambda: L.to_blocks(yc, br, PQ, swap_grid=True,
                                              out=y.reshape(g.N, g.K // br, br, PQ)))]


def columns_backward_steps(x, w, dy, g, dx):
    """The steps (name, fn) of conv.backward's columns path (both passes),
    as the call takes them, on operands made here (dW on a 64-byte line, as
    the call's, so that the update streams it): dy^T, backward-data's plan (w
    in place, or its tiles copied by the plan where the config's
    columns_copies_w says so), dx^c summed into dx, x's transposed im2col
    tiles, the update's plan (dy in place). Also benchmarks.probe_route_ceilings'."""
    PQ, D, cols = g.P * g.Q, g.C * g.R * g.S, g.N * g.P * g.Q
    taps = ((g.R, g.S), (g.sh, g.sw), (g.ph, g.pw))
    dyt, dxc = np.empty((cols, g.K), np.float32), aligned_empty((cols, D), np.float32)
    if g.columns_copies_w:
        pd_ = conv.columns_data_copying(g)
        tiles = np.empty(pd_.extent["wt"], np.float32)
        data = lambda: pd_.run(dy=dyt, w=w.reshape(g.K, D), dx=dxc, wt=tiles)  # noqa: E731
    else:
        pd_ = conv.columns_plan(g, "f32", *conv.columns_data_blocks(g), "bwd")
        data = lambda: pd_.run(dyt=dyt, w=w, dxc=dxc)  # noqa: E731
    bu = conv.columns_update_width(g)
    xct = im2col.image_to_columns(x, *taps, bu, PQ, transposed=True)
    pu, dw = conv.columns_plan(g, "f32", bu, PQ, "upd"), aligned_empty(w.shape, np.float32)
    dy4 = dy.reshape(g.N, 1, g.K, PQ)
    return [("dyt", lambda: L.from_blocks(dy4, g.K, cols, transpose=True, swap_grid=True,
                                          out=dyt)),
            ("data", data),
            ("dx", lambda: im2col.columns_to_image(dxc, x.shape, *taps, out=dx)),
            ("xct", lambda: im2col.image_to_columns(x, *taps, bu, PQ, transposed=True, out=xct)),
            ("upd", lambda: pu.run(dy=dy, xct=xct, dw=dw))]


def _fc(threads):
    rng = np.random.default_rng(0)
    for (N, C, K), name in read_shapes("fc_sizes")[:3]:
        x, w = (rng.standard_normal(s).astype(np.float32) for s in ((N, C), (K, C)))
        b, dy = rng.standard_normal(K).astype(np.float32), rng.standard_normal((N, K)).astype(
            np.float32)
        g = fc.geometry(N, C, K, path=kernel_path("f32"))
        wtiles = L.to_blocks(w, g.bc, g.bk, transpose=True, swap_grid=True)
        wt = L.to_blocks(w, g.bk, g.bc, swap_grid=True)
        gu = fc.plain_update(g, path=kernel_path("f32"))  # the update's own minibatch block
        xb, dyt = L.to_blocks(x, gu.bn, gu.bc), L.to_blocks(dy, gu.bk, gu.bn, transpose=True)
        # on 64-byte lines, as fc's results are (the update streams dW only there)
        y, dx, dw = (aligned_empty(s, np.float32) for s in ((N, K), (N, C), (K, C)))
        db = np.empty(K, np.float32)
        pf = fc.plan(g, "fwd", "f32", has_bias=True, plain=True)
        pb, pu = fc.plan(g, "bwd", "f32", plain=True), fc.plan(gu, "upd", "f32", plain=True)
        path = "reads_w" if fc.reads_w(g, "f32", "cpu", x, w, None) else "blocked"
        forward = [("w", lambda: L.to_blocks(w, g.bc, g.bk, transpose=True, swap_grid=True,
                                             out=wtiles)),
                   ("plan", lambda: pf.run(x=x, y=y, w=wtiles, b=b))]
        if path == "blocked" and fc.copies_wt(g, cpu_threads()):  # its plan copies W^T's tiles
            pfc = fc.plan_copying(g, "fwd", has_bias=True)
            ftiles = np.empty(pfc.extent["wt"], np.float32)
            path, forward = "copying", [("plan", lambda: pfc.run(x=x, w=w, wt=ftiles, y=y, b=b))]
        _line(name, "fwd", path, *_steps(forward, lambda: fc.forward(x, w, b)))
        xt = L.to_blocks(x, g.bc, g.bn, transpose=True)
        yt = np.empty((g.Kb, g.Nb, g.bk, g.bn), np.float32)
        pt = fc.plan_t(g, has_bias=True)
        _line(name, "fwd", "reads_w*", *_steps([  # fc.reads_w's forward, taken or not
            ("x", lambda: L.to_blocks(x, g.bc, g.bn, transpose=True, out=xt)),
            ("plan", lambda: pt.run(w=w, xt=xt, yt=yt, y=y, b=b))]))
        data = [("wt", lambda: L.to_blocks(w, g.bk, g.bc, swap_grid=True, out=wt)),
                ("plan", lambda: pb.run(dy=dy, dx=dx, wt=wt))]
        if fc.copies_w(g, cpu_threads()):  # backward-data's plan copies W's tiles itself
            pc = fc.plan_copying(g)
            tiles = np.empty(pc.extent["wt"], np.float32)
            data = [("plan", lambda: pc.run(dy=dy, w=w, wt=tiles, dx=dx))]
        _line(name, "bwd", "copying" if len(data) == 1 else "blocked", *_steps(data + [
            ("x", lambda: L.to_blocks(x, gu.bn, gu.bc, out=xb)),
            ("dyT+db", lambda: L.to_blocks(dy, gu.bk, gu.bn, transpose=True, out=dyt, sums=db)),
            ("upd", lambda: pu.run(dw=dw, x=xb, dyt=dyt))],
            lambda: fc.backward(dy, x, w)))
        lin = fc.Linear(C, K, rng=rng)  # the layer path: its plans on blocked operands
        lin.prepare(N)
        lx, ldy = L.to_blocks(x, lin.g.bn, lin.g.bc), L.to_blocks(dy, lin.g.bn, lin.g.bk)
        lin.forward_blocked(lx)
        _, (f, b_, u) = _steps([("fwd", lambda: lin.forward_blocked(lx)),
                                ("bwd", lambda: lin.backward_data_blocked(ldy)),
                                ("upd", lambda: lin.update_blocked(ldy))])
        print(f"{'':<31}the layer path's passes alone: fwd {f[1]:.3f}, bwd {b_[1]:.3f}, "
              f"upd {u[1]:.3f} ms", flush=True)


_NATIVE = {("plan.py", "run"): "plan", ("layouts.py", "to_blocks"): "to_blocks",
           ("layouts.py", "from_blocks"): "from_blocks",
           ("layouts.py", "transpose_blocks"): "transpose", ("layouts.py", "column_sums"): "sums"}


def _profiled(fn, rounds=15):
    """(median ms of fn(), [(step, median ms)]): each plan run and layout copy
    inside fn, named by what ran and the method that called it, each call
    profiled on its own (a median is robust to a call that other work delayed)."""
    for _ in range(2):
        fn()
    t = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    steps = collections.defaultdict(list)
    for _ in range(rounds):
        prof = cProfile.Profile(time.perf_counter)
        prof.runcall(fn)
        this = collections.Counter()
        for (path, _, name), (*_, callers) in pstats.Stats(prof).stats.items():
            what = _NATIVE.get((path.rsplit("/", 1)[-1], name))
            for (cpath, _, caller), (*_, cumulative) in (callers.items() if what else ()):
                if "/primitives/" in cpath:
                    this[f"{what} in {caller}"] += 1e3 * cumulative
        for step, ms in this.items():
            steps[step].append(ms)
    medians = {step: statistics.median(ms) for step, ms in steps.items()}
    return 1e3 * statistics.median(t), sorted(medians.items(), key=lambda kv: -kv[1])


def _lstm():
    rng = np.random.default_rng(0)
    for (T, N, C, K), name in quick_shapes("gnmt_lstm", True, ("small_t10_n64",
                                                                "single_step_t1")):
        x, h0, c0, dy, dhT, dcT = (rng.standard_normal(s).astype(np.float32) for s in (
            (T, N, C), (N, K), (N, K), (T, N, K), (N, K), (N, K)))
        # weights as torch.nn.LSTM draws them: with unit ones the gates saturate
        # and the backward's products underflow to subnormals, which slow the
        # Xeon's GEMMs down (RESULTS.md, issue 17, eleventh session)
        w_ih, w_hh, b = (rng.uniform(-1, 1, s).astype(np.float32) / np.float32(np.sqrt(K))
                         for s in ((4 * K, C), (4 * K, K), (4 * K,)))
        saved = lstm.Saved()

        def fwd():
            lstm.forward(x, h0, c0, w_ih, w_hh, b, saved=saved)

        def fwd_bwd():  # as a training step: the backward's weight tiles come after a forward
            fwd()
            lstm.backward(dy, dhT, dcT, x, h0, c0, w_ih, w_hh, b, saved=saved)
        fwd()
        path = "+".join(sorted(lstm.reads_in_place(saved.layer.g, "f32", "cpu", x, w_ih, w_hh,
                                                   None))) or "blocked"
        _line(name, "fwd", path, *_profiled(fwd))
        _line(name, "f+b", path, *_profiled(fwd_bwd))
        layer = lstm.LSTM(C, K, rng=rng)  # the layer path, weights kept blocked
        _line(name, "fwd", "layer", *_profiled(lambda: layer.forward(x, h0, c0)))
        _line(name, "f+b", "layer", *_profiled(lambda: (layer.forward(x, h0, c0),
                                                         layer.backward(dy, dhT, dcT))))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.stages", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, help="threads (default: all cores)")
    parser.add_argument("--images", type=int, help="conv's N (default: the threads)")
    parser.add_argument("--only", choices=("conv", "fc", "lstm"), help="one primitive's calls")
    args = parser.parse_args(argv)
    threads = set_threads(args.threads, onednn=False)
    print(f"functional calls' steps, f32, {threads} threads, {machine()}")
    if args.only in (None, "conv"):
        _conv(args.images or threads)
    if args.only in (None, "fc"):
        _fc(threads)
    if args.only in (None, "lstm"):
        _lstm()


if __name__ == "__main__":
    main()
