"""Probe (issue 17): conv.forward (or, --pass bwd, conv.backward) under
config variants in the main job's setting. Each timed call comes right after
oneDNN's run of the same layer and pass, as the main job's functional call
does (its caches left as oneDNN leaves them), in rotated rounds; every
variant is passed as config= (so all of them pay the same argument checks: a
config= call is not remembered, primitives.call_memo), beside the layer
path's plans on blocked tensors (bwd: backward-data and the update, as the
main job's layer_backward). Identical settings under two labels show the
noise. A variant's settings go into the config's [fwd] table (where conv's
functional routes and its pointwise plans read theirs), or, named
"bwd:label", into [bwd]; settings keyed by pass ({"fwd": {..}, "bwd": {..}})
are the whole config.

    python -m benchmarks.probe_config_variants --threads T --layers res2a_branch2b,...
        [--pass fwd|bwd] [--variants '{"label": {settings}, ...}'] [--reps 21] [--looped]

Prints, per layer and variant, the layer path's and the call's median ms,
each timed as the main job times them, and the ratio (1.0 = the layer path's
speed). --looped: the main job's own timing (each fn looped for 50 ms a
round, all in rotated rounds), where the default times single calls, each
right after oneDNN's: the coldest case, which the main job meets once a
loop."""
import argparse
import json
import statistics
import time

import numpy as np

from benchmarks.common import interleaved_samples, paired_ratio, read_shapes, set_threads
from benchmarks.conv import layer as conv_layer  # the main job's layer and blocked tensors
from benchmarks.conv import layer_backward
from primitives import conv

VARIANTS = {"default": {}, "blocked": {"nchw_x": False, "nchw_x_rows": False},
            "ring": {"nchw_x": False, "nchw_x_rows": True}, "x_nchw": {"nchw_x": True}}


def _rounds(layer, variants, before, reps):
    """{label: (the layer's median ms, the variant's median ms)}: per round,
    each variant in turn as the main job times a functional call: before()
    (oneDNN's run), the layer path timed, before() again, the variant timed.
    So every variant finds the caches as the layer and oneDNN leave them (a
    variant run right after another finds their shared operands in cache and
    reads faster: the order must not decide)."""
    times = {k: ([], []) for k in variants}
    for r in range(reps + 2):
        for name, fn in variants.items():
            for side, f in enumerate((layer, fn)):
                before()
                t0 = time.perf_counter()
                f()
                if r >= 2:  # two warm-up rounds
                    times[name][side].append(time.perf_counter() - t0)
    return {k: tuple(1e3 * statistics.median(s) for s in v) for k, v in times.items()}


def _looped(layer, variants, before, reps):
    """_rounds' table as the main job times its rows: the layer path, oneDNN's
    run and every variant in rotated rounds, each looped for 50 ms a round
    (benchmarks.common.interleaved_samples), so that only a loop's first call
    finds the caches as the fn before it left them; the layer's ms is its
    median, each ratio the median over rounds of layer / variant."""
    names = list(variants)
    samples = interleaved_samples([layer, before] + [variants[k] for k in names], reps,
                                  rotate=True)
    lay = samples[0]
    return {k: (1e3 * statistics.median(lay), 1e3 * statistics.median(s),
                paired_ratio(lay, s)) for k, s in zip(names, samples[2:])}


def _results(out):
    return out if isinstance(out, tuple) else (out,)


def _sides(pass_, rng, N, dims):
    """(the layer path's plans of pass_ on the main job's layer, oneDNN's job of
    that pass, call(config): the functional call of that pass with config=)."""
    from benchmarks.onednn import Job
    C, K, H, W, R, S, st, pd = dims
    x, w, dy, g, vnni, t = conv_layer(rng, N, *dims, "f32", np.float32)
    job = Job.conv(pass_, N, C, K, H, W, R, S, (st, st), (pd, pd), x=x if pass_ == "fwd" else None,
                   w=w, dy=dy if pass_ == "bwd" else None, dtype="f32")
    if pass_ == "fwd":
        layer = conv.plan(g, "fwd", "f32", "fwd" in vnni)
        return (lambda: layer.run(x=t["x"], w=t["w"], y=t["y"]), job,
                lambda cfg: conv.forward(x, w, st, pd, config=cfg))
    plans = {p: conv.plan(g, p, "f32", p in vnni) for p in ("bwd", "upd")}
    return (layer_backward(g, t, plans), job,
            lambda cfg: conv.backward(dy, x, w, st, pd, config=cfg)[:2])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--layers", default="res2a_branch2b,res3a_branch2b")
    parser.add_argument("--variants", type=json.loads, default=VARIANTS)
    parser.add_argument("--reps", type=int, default=21)
    parser.add_argument("--pass", dest="pass_", choices=("fwd", "bwd"), default="fwd")
    parser.add_argument("--looped", action="store_true",
                        help="time as the main job does: each fn looped, in rotated rounds")
    args = parser.parse_args(argv)
    set_threads(args.threads)
    N, rng = args.threads, np.random.default_rng()
    for (C, K, H, W, R, S, st, pd), name in read_shapes("resnet50_conv"):
        if name not in args.layers.split(","):
            continue
        layer, job, call = _sides(args.pass_, rng, N, (C, K, H, W, R, S, st, pd))
        want = [np.asarray(a, np.float64) for a in _results(call(None))]
        fns = {}
        for label, settings in args.variants.items():
            cfg = settings if set(settings) & {"fwd", "bwd", "upd"} else {
                "bwd" if label.startswith("bwd:") else "fwd": settings}
            got = _results(call(cfg))
            for a, b in zip(got, want):
                if not np.allclose(a, b, rtol=1e-4, atol=1e-3 * np.abs(b).max()):
                    raise SystemExit(f"{name} {label}: the result differs from the defaults'")
            fns[label] = (lambda cfg: lambda: call(cfg))(cfg)
        if args.looped:
            ms = _looped(layer, fns, job.run, args.reps)
        else:
            ms = {k: (a, b, a / b) for k, (a, b) in _rounds(layer, fns, job.run,
                                                             args.reps).items()}
        print(f"{name:<16} {args.pass_} {args.threads} threads"
              f"{', looped' if args.looped else ''}, ms (layer / call, ratio): "
              + "  ".join(f"{k} {a:.3f} / {b:.3f} ({r:.3f})" for k, (a, b, r) in ms.items()),
              flush=True)


if __name__ == "__main__":
    main()
