"""Probe (issue 17): conv.columns against the other routes, per pass and per
machine. On the ResNet-50 layers where conv.columns' rule allows it at N =
threads (7 x 7 outputs with many channels), conv.forward and conv.backward
with the config's `columns` on and off (whatever this machine's table
says), and the layer path's plans, all in the same rotated rounds:

    python -m benchmarks.probe_columns [--threads T] [--reps 9]

Per layer: ms medians of the layer's forward plan, conv.forward with
columns on and off, the layer's backward-data and update plans run one after
the other, conv.backward with columns on and off; then each functional
call's time over the layer's (func/layer, paired by round; > 1: the
functional call is the faster). Speeds only: both routes' results are
checked in tests/test_conv_columns.py."""
import argparse
import statistics

import numpy as np

from benchmarks.common import interleaved_samples, machine, paired_ratio, read_shapes, set_threads
from benchmarks.conv import layer as conv_layer
from benchmarks.conv import layer_backward
from primitives import conv


ON = {"fwd": {"columns": True}, "bwd": {"columns": True}}
OFF = {"fwd": {"columns": False}, "bwd": {"columns": False}}


def _sides(N, C, K, H, W, R, S, st, pd, rng):
    x, w, dy, g, vnni, t = conv_layer(rng, N, C, K, H, W, R, S, st, pd, "f32", np.float32)
    plans = {p: conv.plan(g, p, "f32", p in vnni) for p in ("fwd", "bwd", "upd")}
    
    return g, {"layer fwd": lambda: plans["fwd"].run(x=t["x"], w=t["w"], y=t["y"]),
               "fwd on": lambda: conv.forward(x, w, st, pd, config=ON),
               "fwd off": lambda: conv.forward(x, w, st, pd, config=OFF),
               "layer bwd": layer_backward(g, t, plans),
               "bwd on": lambda: conv.backward(dy, x, w, st, pd, config=ON),
               "bwd off": lambda: conv.backward(dy, x, w, st, pd, config=OFF)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int)
    ap.add_argument("--reps", type=int, default=9)
    args = ap.parse_args()
    threads = set_threads(args.threads, onednn=False)
    rng = np.random.default_rng()
    print(f"conv.columns on / off, f32, N = {threads} threads, {machine()}; {args.reps} rotated "
          "rounds, ms medians, func/layer paired")
    head = (f"{'layer':<17}{'lay fwd':>8}{'on':>8}{'off':>8}{'lay bwd':>8}{'on':>8}{'off':>8}"
            f"{'  f/l fwd on / off':>19}{'  f/l bwd on / off':>19}")
    print(head + "\n" + "-" * len(head))
    for (C, K, H, W, R, S, st, pd), name in read_shapes("resnet50_conv"):
        g = conv.geometry(threads, C, K, H, W, R, S, (st, st), (pd, pd), config=ON)
        if not conv.columns(g, "f32", "cpu"):
            continue  # the rule rules conv.columns out, whatever the config
        g, sides = _sides(threads, C, K, H, W, R, S, st, pd, rng)
        s = dict(zip(sides, interleaved_samples(list(sides.values()), reps=args.reps,
                                                rotate=True)))
        ms = "".join(f"{1e3 * statistics.median(v):8.3f}" for v in s.values())
        fl = [paired_ratio(s[f"layer {p}"], s[f"{p} {o}"]) for p in ("fwd", "bwd")
              for o in ("on", "off")]
        print(f"{name:<17}{ms}{fl[0]:>11.2f} / {fl[1]:.2f}{fl[2]:>12.2f} / {fl[3]:.2f}",
              flush=True)


if __name__ == "__main__":
    main()
