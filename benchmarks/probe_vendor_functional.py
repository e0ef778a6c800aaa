"""Probe (issue 17): how far the vendor's own functional calls sit from its
layer path, beside ours. Per quick conv and FC shape, f32, N = threads for
conv (one image per thread, as the main job), all sides in the same rotated
rounds:

    python -m benchmarks.probe_vendor_functional [--threads T] [--reps 9]

- ours, layer: our plans on blocked tensors made before (the main job's "ours");
- ours, functional: conv.forward / conv.backward, fc.forward / fc.backward on
  plain arrays, conversions included (the main job's "func");
- oneDNN, layer: oneDNN's primitives on their own 'any' formats, weights and
  activations reordered before (the main job's "oneDNN");
- PyTorch, functional: F.conv2d and aten's convolution_backward (dx and dW in
  one call, as autograd makes it), F.linear and the two products autograd
  runs for dx and dW (oneDNN or MKL underneath).

"bwd" is backward-data and the weight update together on every side. The
ratios are func/layer per library (> 1: the functional call is the faster),
medians of the rounds' paired ratios: the main job's func/ours, and the
same ratio for the vendor's stack (PyTorch's functional calls over oneDNN's
layer path); "dnn GF/s" is oneDNN's layer path (bwd: both passes' work).
Speeds only: our results are checked in tests/test_conv*.py and
tests/test_fc*.py, and against oneDNN's by the main job."""
import argparse
import statistics

import numpy as np

from benchmarks.common import (geomean, interleaved_samples, machine, paired_ratio, quick_shapes,
                               read_shapes, set_threads, torch_threads)
from benchmarks.conv import QUICK as CONV_QUICK
from benchmarks.conv import layer as conv_layer
from benchmarks.conv import layer_backward
from benchmarks.fc import layer as fc_layer
from benchmarks.onednn import Job
from primitives import conv, fc


def _conv_sides(torch, N, C, K, H, W, R, S, st, pd, rng):
    x, w, dy, g, vnni, t = conv_layer(rng, N, C, K, H, W, R, S, st, pd, "f32", np.float32)
    plans = {p: conv.plan(g, p, "f32", p in vnni) for p in ("fwd", "bwd", "upd")}
    jobs = {p: Job.conv(p, N, C, K, H, W, R, S, (st, st), (pd, pd),
                        x=x if p != "bwd" else None, w=w if p != "upd" else None,
                        dy=dy if p != "fwd" else None) for p in ("fwd", "bwd", "upd")}
    tx, tw, tdy = (torch.from_numpy(a) for a in (x, w, dy))
    back = torch.ops.aten.convolution_backward
    flops = 2.0 * N * K * g.P * g.Q * C * R * S
    return flops, {
        "fwd": (lambda: plans["fwd"].run(x=t["x"], w=t["w"], y=t["y"]),
                lambda: conv.forward(x, w, st, pd),
                jobs["fwd"].run,
                lambda: torch.nn.functional.conv2d(tx, tw, stride=st, padding=pd)),
        "bwd": (layer_backward(g, t, plans), lambda: conv.backward(dy, x, w, st, pd),
                lambda: (jobs["bwd"].run(), jobs["upd"].run()),
                lambda: back(tdy, tx, tw, None, [st, st], [pd, pd], [1, 1], False, [0, 0], 1,
                             [True, True, False]))}


def _fc_sides(torch, N, C, K, rng):
    x, w, dy, lin, xb, dyb = fc_layer(rng, N, C, K, "f32")  # the main job's layer
    jobs = {p: Job.ip(p, x if p != "bwd" else None, w if p != "upd" else None,
                      dy if p != "fwd" else None) for p in ("fwd", "bwd", "upd")}
    tx, tw, tdy = (torch.from_numpy(a) for a in (x, w, dy))
    return 2.0 * N * C * K, {
        "fwd": (lambda: lin.forward_blocked(xb), lambda: fc.forward(x, w), jobs["fwd"].run,
                lambda: torch.nn.functional.linear(tx, tw)),
        "bwd": (lambda: (lin.backward_data_blocked(dyb), lin.update_blocked(dyb)),
                lambda: fc.backward(dy, x, w),
                lambda: (jobs["bwd"].run(), jobs["upd"].run()),
                lambda: (tdy.mm(tw), tdy.t().mm(tx)))}


def _row(name, pass_, sides, flops, reps):
    """flops: one pass's work ("bwd" does two)."""
    layer, func, dnn, torch_fn = interleaved_samples(list(sides), reps=reps, rotate=True)
    ms = [1e3 * statistics.median(s) for s in (layer, func, dnn, torch_fn)]
    ours, vendor = paired_ratio(layer, func), paired_ratio(dnn, torch_fn)
    rate = flops * (2 if pass_ == "bwd" else 1) / statistics.median(dnn) * 1e-9
    print(f"{name:<17}{pass_:<5}" + "".join(f"{m:9.3f}" for m in ms)
          + f"{ours:11.2f}{vendor:11.2f}{rate:9.1f}", flush=True)
    return ours, vendor


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int)
    ap.add_argument("--reps", type=int, default=9)
    args = ap.parse_args()
    threads = set_threads(args.threads)
    torch = torch_threads(threads)
    rng = np.random.default_rng()
    print(f"vendor func/layer probe, f32, {threads} threads, {machine()}, PyTorch "
          f"{torch.__version__}; {args.reps} rotated rounds, ms medians, ratios paired")
    head = (f"{'shape':<17}{'pass':<5}{'ours lay':>9}{'ours fn':>9}{'dnn lay':>9}{'torch fn':>9}"
            f"{'ours f/l':>11}{'dnn f/l':>11}{'dnn GF/s':>9}")
    print(head + "\n" + "-" * len(head))
    rows = []
    for (C, K, H, W, R, S, st, pd), name in quick_shapes("resnet50_conv", True, CONV_QUICK):
        flops, sides = _conv_sides(torch, threads, C, K, H, W, R, S, st, pd, rng)
        rows += [(name, p) + _row(name, p, sides[p], flops, args.reps)
                 for p in sides]
    for (N, C, K), name in read_shapes("fc_sizes")[:3]:  # the main job's quick FC shapes
        flops, sides = _fc_sides(torch, N, C, K, rng)
        rows += [(name, p) + _row(name, p, sides[p], flops, args.reps)
                 for p in sides]
    under = [(n, p, o, v) for n, p, o, v in rows if o < 0.90]
    print(f"rows with ours f/l under 0.90: {len(under)} of {len(rows)}; the vendor's f/l on "
          "them: " + ", ".join(f"{n} {p} {o:.2f} / {v:.2f}" for n, p, o, v in under))
    under_vendor = sum(v < 0.90 for *_, v in rows)
    print(f"rows with the vendor's f/l under 0.90: {under_vendor} of {len(rows)}")
    print(f"geomean f/l: ours {geomean([o for *_, o, v in rows]):.2f}, the vendor's "
          f"{geomean([v for *_, v in rows]):.2f}")


if __name__ == "__main__":
    main()
