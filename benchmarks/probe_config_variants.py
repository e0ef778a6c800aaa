"""Probe (issue 17): conv.forward under config variants in the main job's
setting. Each timed call comes right after oneDNN's run of the same layer, as
the main job's functional call does (its caches left as oneDNN leaves them),
in rotated rounds; every variant is passed as config= (so all of them pay the
same argument checks: a config= call is not remembered, primitives.call_memo),
beside the layer path's forward plan on blocked tensors. Identical settings
under two labels show the noise.

    python -m benchmarks.probe_config_variants --threads T --layers res2a_branch2b,...
        [--variants '{"label": {fwd settings}, ...}'] [--reps 21]

Prints, per layer, the layer plan's median ms and each variant's speed over
it (layer time / call time; 1.0 = the layer path's speed)."""
import argparse
import json
import statistics
import time

import numpy as np

from benchmarks.common import read_shapes, set_threads
from brgemm.info import kernel_path
from primitives import conv

VARIANTS = {"default": {}, "blocked": {"nchw_x": False, "nchw_x_rows": False},
            "ring": {"nchw_x": False, "nchw_x_rows": True}, "x_nchw": {"nchw_x": True}}


def _rounds(fns, before, reps):
    """Median ms of each of fns, each call right after before(), rounds rotated."""
    times = {k: [] for k in fns}
    for r in range(reps + 2):
        for name, fn in fns.items():
            before()
            t0 = time.perf_counter()
            fn()
            if r >= 2:  # two warm-up rounds
                times[name].append(time.perf_counter() - t0)
    return {k: 1e3 * statistics.median(v) for k, v in times.items()}


def main(argv=None):
    from benchmarks.onednn import Job
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--layers", default="res2a_branch2b,res3a_branch2b")
    parser.add_argument("--variants", type=json.loads, default=VARIANTS)
    parser.add_argument("--reps", type=int, default=21)
    args = parser.parse_args(argv)
    set_threads(args.threads)
    N, rng = args.threads, np.random.default_rng()
    for (C, K, H, W, R, S, st, pd), name in read_shapes("resnet50_conv"):
        if name not in args.layers.split(","):
            continue
        x = rng.standard_normal((N, C, H, W)).astype(np.float32)
        w = rng.standard_normal((K, C, R, S)).astype(np.float32)
        g = conv.geometry(N, C, K, H, W, R, S, (st, st), (pd, pd), path=kernel_path("f32"))
        xb, wb = conv.block_x(x, g, "f32"), conv.block_w(w, g, "f32")
        yb = np.empty((N, g.Kb, g.P, g.Q, g.bk), np.float32)
        layer = conv.plan(g, "fwd", "f32")
        job = Job.conv("fwd", N, C, K, H, W, R, S, (st, st), (pd, pd), x=x, w=w, dtype="f32")
        want = conv.forward(x, w, st, pd).astype(np.float64)
        fns = {"layer": lambda: layer.run(x=xb, w=wb, y=yb)}
        for label, settings in args.variants.items():
            cfg = {"fwd": settings}
            got = conv.forward(x, w, st, pd, config=cfg)
            if not np.allclose(got, want, rtol=1e-4, atol=1e-3 * np.abs(want).max()):
                raise SystemExit(f"{name} {label}: the result differs from the defaults'")
            fns[label] = (lambda cfg: lambda: conv.forward(x, w, st, pd, config=cfg))(cfg)
        ms = _rounds(fns, job.run, args.reps)
        print(f"{name:<16} {args.threads} threads: layer {ms['layer']:.3f} ms; over it: "
              + "  ".join(f"{k} {ms['layer'] / v:.3f}" for k, v in ms.items() if k != "layer"),
              flush=True)


if __name__ == "__main__":
    main()
