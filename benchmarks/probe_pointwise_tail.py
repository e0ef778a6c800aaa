"""Probe (issue 17): conv's pointwise forward with each image's last pixels
computed apart (conv_pointwise.pointwise_tail) against the same call without
(the config's pointwise_tail off: a 13th vector per row of 196 pixels, 4 of
its 16 lanes used), the tail in calls of 8 (the default), 16 and 64 rows of
w (pointwise_tail_rows), and the layer's plan on blocked tensors, on the 1x1 layers
whose pixels are no whole number of vectors (res4a_branch2c's 14 x 14; N =
threads, as the main job), in rotated rounds (medians; time over the layer's
plan paired by round, > 1: slower). Backward passes too, where `--bwd`.

    python -m benchmarks.probe_pointwise_tail [--threads T] [--reps 15] [--images N]"""
import argparse

import numpy as np

from benchmarks.common import machine, report_sides, set_threads
from benchmarks.conv import layer
from primitives import conv

OFF = {"fwd": {"pointwise_tail": False}}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--images", type=int, help="N (default: the threads)")
    args = ap.parse_args()
    threads = set_threads(args.threads, onednn=False)
    N = args.images or threads
    rng = np.random.default_rng()
    print(f"{machine()}, {threads} threads, N = {N}")
    for C, K, H, W in ((256, 1024, 14, 14), (512, 256, 14, 14), (1024, 256, 14, 14)):
        x, w, _, g, _, t = layer(rng, N, C, K, H, W, 1, 1, 1, 0, "f32", np.float32)
        p = conv.plan(g, "fwd")
        assert np.allclose(conv.forward(x, w), conv.forward(x, w, config=OFF), rtol=1e-4,
                           atol=1e-4)
        flops = 2.0 * N * C * K * H * W
        sides = {"layer": lambda: p.run(x=t["x"], w=t["w"], y=t["y"]),
                 "no tail": lambda: conv.forward(x, w, config=OFF)}
        for rows in (8, 16, 64):
            cfg = {"fwd": {"pointwise_tail_rows": rows}}
            sides[f"tail, {rows} rows"] = lambda cfg=cfg: conv.forward(x, w, config=cfg)
        report_sides(f"C {C} K {K} {H} x {W} forward", sides, dict.fromkeys(sides, flops),
                     args.reps, "layer")


if __name__ == "__main__":
    main()
