"""Probe (issue 17): res5a_branch2b's functional forward (C = K = 512, 7 x 7,
3x3, padding 1; N = threads) part by part and under candidate configs, all
sides of a part timed interleaved in one process (rotated rounds, medians,
paired ratios over the part's first side):

    python -m benchmarks.probe_res5a [--threads T] [--reps 7] [--parts forward,steps,backward]

forward: under this machine's table and each candidate (CANDIDATES, fwd
keys over the table's), the layer's plan on blocked x, w, y and the whole
conv.forward call; under the table and the first candidate also the call's
steps: the NCHW-storing plan alone (x and w copied before), the w copy
alone, back to back, and the w copy then the plan (the copy's cost where
the plan has just read the tiles it rewrites); PyTorch's F.conv2d beside.
steps: the call's steps by hand under the table and the first candidate,
with x's copy too, the plan's images staggered, x in two buffers in turn.
backward: the table's and MOVES_BACKWARD's conv.backward, conv.forward + conv.backward
and the layer's three plans (bk is every pass's blocking: a kept bk moves
the backward too). Speeds only: no result is checked (tests/test_conv*.py)."""
import argparse

import numpy as np

from benchmarks.common import report_sides as report, set_threads
from brgemm import plan as bplan
from brgemm.arrays import aligned_empty
from brgemm.info import kernel_path
from primitives import conv
from primitives.conv_forward import forward_nest
from primitives.conv_in_place import _task_slots
from primitives.conv_plans import _loops

C = K = 512
H = W = 7
KNPQ = {"spec": "KNpq", "call_kb": 128, "w_reuse": 8}  # the Xeon's table but bk, spelled out
# fwd keys over the table's (bk 32 there since the fifteenth session); bk 16,
# call_kb 32 or 64 and w_reuse 1 measured and not kept (benchmarks/RESULTS.md,
# issue 17, fifteenth session, conv23)
CANDIDATES = {
    "bk 64": dict(KNPQ, bk=64),
    "bk 32, bc 128": dict(KNPQ, bk=32, bc=128),
    "bk 32, bc 128, call_kb 256": dict(KNPQ, bk=32, bc=128, call_kb=256),
    "bk 32, bc 32": dict(KNPQ, bk=32, bc=32),
    "bk 32, call_kb 256": dict(KNPQ, bk=32, call_kb=256),
}
MOVES_BACKWARD = ("bk 64", "bk 32, bc 128", "bk 32, bc 32")  # blockings every pass shares


def _data(N, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    w = (rng.standard_normal((K, C, 3, 3)) / np.sqrt(9 * C)).astype(np.float32)
    dy = rng.standard_normal((N, K, H, W)).astype(np.float32)
    return x, w, dy


def _layer(x, w, dy, cfg):
    """The geometry under cfg, and the layer path's blocked tensors and plans."""
    g = conv.geometry(x.shape[0], C, K, H, W, 3, 3, (1, 1), (1, 1), config=cfg,
                      path=kernel_path("f32"))
    t = dict(x=conv.block_x(x, g, "f32"), w=conv.block_w(w, g, "f32"),
             wt=conv.block_w(w, g, "f32", transposed=True),
             y=aligned_empty((g.N, g.Kb, g.P, g.Q, g.bk), np.float32),
             dyp=conv.block_y(dy, g, "f32", bordered=True),
             dx=aligned_empty((g.N, g.Cb, g.Hp, g.Wp, g.bc), np.float32),
             dw=conv.update_output(g), upd=conv.update_inputs(x, dy, g, "f32"))
    return g, t, {p: conv.plan(g, p, "f32") for p in ("fwd", "bwd", "upd")}


def _add_conv2d(sides, flops, x, w, N, like):
    """PyTorch's F.conv2d on the same x and w as a side (its flops those of
    side `like`), where torch is installed."""
    torch = _torch(N)
    if torch is not None:
        tx, tw = torch.from_numpy(x), torch.from_numpy(w)
        sides["F.conv2d"] = lambda: torch.nn.functional.conv2d(tx, tw, padding=1)
        flops["F.conv2d"] = flops[like]


def _torch(threads):
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(threads)
    return torch


def forward_sides(N):
    x, w, dy = _data(N, 0)
    configs = {"table": None, **{k: {"fwd": v} for k, v in CANDIDATES.items()}}
    sides, flops = {}, {}
    for i, (name, cfg) in enumerate(configs.items()):
        g, t, plans = _layer(x, w, dy, cfg)
        print(f"{name}: bk {g.bk} bc {g.bc} spec {g.specs[0]} call_kb {g.call_kb[0]} "
              f"w_reuse {g.w_reuse[0]}", flush=True)
        sides[f"layer plan, {name}"] = lambda p=plans["fwd"], t=t: p.run(x=t["x"], w=t["w"],
                                                                          y=t["y"])
        sides[f"conv.forward, {name}"] = lambda cfg=cfg: conv.forward(x, w, 1, 1, config=cfg)
        flops[f"layer plan, {name}"] = flops[f"conv.forward, {name}"] = plans["fwd"].flops
        if i < 2:  # the call's steps
            pn = conv.nchw_plan(g, "f32", False)
            out = np.empty((N, K, H, W), np.float32)
            ys = aligned_empty((pn.extent["y"],), np.float32)
            wb = t["w"]

            def nchw(pn=pn, t=t, out=out, ys=ys, wb=wb):
                pn.run(x=t["x"], w=wb, out=out, y=ys)

            def copy(g=g, wb=wb):
                conv.block_w(w, g, "f32", out=wb)

            sides[f"nchw plan, {name}"] = nchw
            sides[f"w copy, {name}"] = copy
            sides[f"w copy + nchw plan, {name}"] = lambda nchw=nchw, copy=copy: (copy(), nchw())
            flops[f"nchw plan, {name}"] = flops[f"w copy + nchw plan, {name}"] = pn.flops
    _add_conv2d(sides, flops, x, w, N, "layer plan, table")
    return sides, flops


class Staggered:
    """A forward nest's loops with each output block's images rotated: task
    (k, n) computes image (n + k N / Kb) mod N, so that with output blocks
    outer (KNpq) the threads start on different images, each on the one it
    copied (the x copy splits by image), rather than all on image 0."""

    def __init__(self, loops, g):
        self.loops, self.g = loops, g

    def walk(self):
        g = self.g
        for phase, task, at in self.loops.walk():
            yield phase, task, dict(at, n=(at["n"] + at["k"] * g.N // g.Kb) % g.N)


def staggered_nchw_plan(g):
    """conv.nchw_plan's calls on Staggered loops (f32)."""
    PQ = g.P * g.Q
    rec = bplan.Recorder({"x": "f32", "w": "f32", "y": "f32", "out": "f32"}, spec=g.specs[0])
    forward_nest(rec, Staggered(_loops(g, "fwd"), g), g, "f32", False,
                 tile=_task_slots(g.bq * g.bk, g.w_reuse[0]),
                 epilogue=lambda n, k, pixel: (
                     bplan.store_t("out", (n * g.K + k * g.bk) * PQ + pixel, PQ),))
    return rec.finish()


def steps_sides(N):
    """conv.forward's steps by hand (x copy, w copy, NCHW-storing plan) under
    the table and bk 64, with the plan's images staggered (Staggered) and
    with x copied into two buffers in turn."""
    x, w, dy = _data(N, 2)
    sides, flops = {}, {}
    for name, cfg in (("table", None), ("bk 64", {"fwd": CANDIDATES["bk 64"]})):
        g, t, plans = _layer(x, w, dy, cfg)
        pn, ps = conv.nchw_plan(g, "f32", False), staggered_nchw_plan(g)
        out = np.empty((N, K, H, W), np.float32)
        ys = aligned_empty((pn.extent["y"],), np.float32)
        xb, wb, xb2 = t["x"], t["w"], np.empty_like(t["x"])
        turn = [0]

        def run(p, copy_x=True, copy_w=True, two=False, g=g, xb=xb, wb=wb, xb2=xb2, out=out,
                ys=ys):
            xs = xb2 if two and turn[0] else xb
            turn[0] ^= 1
            if copy_x:
                conv.block_x(x, g, "f32", out=xs)
            if copy_w:
                conv.block_w(w, g, "f32", out=wb)
            p.run(x=xs, w=wb, out=out, y=ys)
        sides[f"nchw plan, {name}"] = lambda run=run, pn=pn: run(pn, False, False)
        sides[f"nchw plan staggered, {name}"] = lambda run=run, ps=ps: run(ps, False, False)
        sides[f"x copy + plan, {name}"] = lambda run=run, pn=pn: run(pn, True, False)
        sides[f"x, w copies + plan, {name}"] = lambda run=run, pn=pn: run(pn)
        sides[f"x, w copies + staggered, {name}"] = lambda run=run, ps=ps: run(ps)
        sides[f"x (2 bufs), w + plan, {name}"] = lambda run=run, pn=pn: run(pn, two=True)
        sides[f"conv.forward, {name}"] = lambda cfg=cfg: conv.forward(x, w, 1, 1, config=cfg)
        for k in list(sides)[-7:]:
            flops[k] = pn.flops
    _add_conv2d(sides, flops, x, w, N, "nchw plan, table")
    return sides, flops


def backward_sides(N):
    x, w, dy = _data(N, 1)
    sides = {}
    for name, cfg in (("table", None), *((k, {"fwd": CANDIDATES[k]}) for k in MOVES_BACKWARD)):
        g, t, plans = _layer(x, w, dy, cfg)

        def layer(t=t, plans=plans, g=g):
            plans["fwd"].run(x=t["x"], w=t["w"], y=t["y"])
            plans["bwd"].run(dyp=t["dyp"], wt=t["wt"], dx=t["dx"])
            plans["upd"].run(dw=t["dw"], **t["upd"])

        sides[f"layer fwd+bwd+upd, {name}"] = layer
        sides[f"conv.backward, {name}"] = lambda cfg=cfg: conv.backward(dy, x, w, 1, 1, config=cfg)
        sides[f"conv.forward + backward, {name}"] = lambda cfg=cfg: (
            conv.forward(x, w, 1, 1, config=cfg), conv.backward(dy, x, w, 1, 1, config=cfg))
    torch = _torch(N)
    if torch is not None:
        tx, tw, tdy = (torch.from_numpy(a) for a in (x, w, dy))

        def torch_both():
            xa, wa = tx.clone().requires_grad_(), tw.clone().requires_grad_()
            torch.nn.functional.conv2d(xa, wa, padding=1).backward(tdy)
        sides["torch fwd+bwd"] = torch_both
    return sides, {}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--parts", default="forward,steps,backward")
    args = parser.parse_args()
    threads = set_threads(args.threads, onednn=False)
    parts = args.parts.split(",")
    if "forward" in parts:
        sides, flops = forward_sides(threads)
        report(f"res5a_branch2b forward, N = {threads}, {threads} threads", sides, flops,
               args.reps, "layer plan, table")
    if "steps" in parts:
        sides, flops = steps_sides(threads)
        report(f"res5a_branch2b forward steps, N = {threads}, {threads} threads", sides, flops,
               args.reps, "nchw plan, table")
    if "backward" in parts:
        sides, flops = backward_sides(threads)
        report(f"res5a_branch2b backward, N = {threads}, {threads} threads", sides, flops,
               args.reps, "layer fwd+bwd+upd, table")


if __name__ == "__main__":
    main()
