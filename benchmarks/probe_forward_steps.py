"""Probe (issue 17): conv.forward's blocked NCHW path step by step on the
benchmark's 3x3 layers at N = threads, all sides of a layer timed
interleaved in one process (rotated rounds, medians, paired ratios over the
layer's plan):

    python -m benchmarks.probe_forward_steps [--threads T] [--reps 9]
                                             [--shapes res2a_branch2b,...] [--orders]

Sides per layer: the layer's plan on blocked x, w, y (the func/layer
yardstick); the NCHW-storing plan (conv.nchw_plan, this machine's table)
alone, x and w blocked before; the same after x's copy, and after x's and
w's; conv.forward as routed here, and with w's blocked copy kept across calls
(reuse=), with x copied into blocks (the config's nchw_x off) and with x
read in place where the rule allows (nchw_x on); the
NCHW-storing plan reading x in place (conv.reads_x_nchw) alone, w blocked
before; with --orders, conv.forward in the loop orders ORDERS names;
PyTorch's F.conv2d. (The x copy filled inside the plan by the threads that
read it, a task per image, measured no faster: benchmarks/RESULTS.md, issue
17, sixteenth session, conv24.) Speeds only: tests/test_conv*.py check results."""
import argparse

import numpy as np

from benchmarks.common import quick_shapes, report_sides as report, set_threads
from brgemm.arrays import aligned_empty
from brgemm.info import kernel_path
from primitives import conv, reuse

SHAPES = ("res2a_branch2b", "res3a_branch2b", "res5a_branch2b")
# output blocks outer, so that each thread reads only the weight tiles it
# copied (the w copy splits by blocks of w) and every image instead
ORDERS = {"res2a_branch2b": {"KNpq, bk 32": {"spec": "KNpq", "bk": 32}},
          "res3a_branch2b": {"KNpq": {"spec": "KNpq"}}}


def sides_of(name, C, K, H, W, R, S, st, pd, N, orders=False):
    st, pd = (st, st), (pd, pd)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = (rng.standard_normal((K, C, R, S)) / np.sqrt(R * S * C)).astype(np.float32)
    g = conv.geometry(N, C, K, H, W, R, S, st, pd, path=kernel_path("f32"))
    print(f"{name}: N {N}, bk {g.bk} bc {g.bc} spec {g.specs[0]} call_kb {g.call_kb[0]} "
          f"w_reuse {g.w_reuse[0]}", flush=True)
    xb, wb = conv.block_x(x, g, "f32"), conv.block_w(w, g, "f32")
    y = aligned_empty((g.N, g.Kb, g.P, g.Q, g.bk), np.float32)
    layer, pn = conv.plan(g, "fwd", "f32"), conv.nchw_plan(g, "f32", False)
    px = conv.nchw_plan(g, "f32", False, x_nchw=True) if conv.reads_x_nchw(
        g, "f32", "cpu", x) else None
    out, ys = np.empty((N, K, g.P, g.Q), np.float32), aligned_empty((pn.extent["y"],), np.float32)

    def nchw(copy_x=False, copy_w=False):
        if copy_x:
            conv.block_x(x, g, "f32", out=xb)
        if copy_w:
            conv.block_w(w, g, "f32", out=wb)
        pn.run(x=xb, w=wb, out=out, y=ys)
    key = reuse.Key(f"probe {name}")
    sides = {"layer plan": lambda: layer.run(x=xb, w=wb, y=y),
             "nchw plan alone": nchw,
             "x copy + nchw plan": lambda: nchw(True),
             "x, w copies + nchw plan": lambda: nchw(True, True),
             "conv.forward": lambda: conv.forward(x, w, st, pd),
             "conv.forward, w kept": lambda: conv.forward(x, w, st, pd, reuse=key),
             "conv.forward, x copied first": lambda: conv.forward(
                 x, w, st, pd, config={"fwd": {"nchw_x": False, "nchw_x_rows": False}}),
             "conv.forward, x's rows copied": lambda: conv.forward(
                 x, w, st, pd, config={"fwd": {"nchw_x": False, "nchw_x_rows": True}}),
             "conv.forward, nchw_x on": lambda: conv.forward(x, w, st, pd,
                                                             config={"fwd": {"nchw_x": True}})}
    if px is not None:
        sides["x in place, nchw plan alone"] = lambda: px.run(x=x, w=wb, out=out, y=ys)
    for order, keys in (ORDERS.get(name, {}) if orders else {}).items():
        sides[f"conv.forward, {order}"] = lambda cfg={"fwd": keys}: (
            conv.forward(x, w, st, pd, config=cfg))
    try:
        import torch
        torch.set_num_threads(N)
        tx, tw = torch.from_numpy(x), torch.from_numpy(w)
        sides["F.conv2d"] = lambda: torch.nn.functional.conv2d(tx, tw, stride=st, padding=pd)
    except ImportError:
        pass
    return sides, dict.fromkeys(sides, layer.flops)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int)
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--orders", action="store_true", help="the ORDERS sides too")
    args = parser.parse_args()
    threads = set_threads(args.threads, onednn=False)
    for (C, K, H, W, R, S, st, pd), name in quick_shapes("resnet50_conv", True,
                                                         tuple(args.shapes.split(","))):
        sides, flops = sides_of(name, C, K, H, W, R, S, st, pd, threads, args.orders)
        report(f"{name} forward, N = {threads}, {threads} threads", sides, flops, args.reps,
               "layer plan")


if __name__ == "__main__":
    main()
