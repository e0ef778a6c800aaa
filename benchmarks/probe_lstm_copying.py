"""lstm.forward + lstm.backward (one lstm.Saved) where the backward-data of a
weight read in place copies W's tiles inside its own plan
(lstm_strips.copies_w: fc_plans.plan_copying on dG's tiles) against the path
before it, where the forward's projection writes the backward's tiles as it
reads W (copy_rows) and the layer's plans read them back (issue 17). A probe,
not a benchmark: its numbers go to benchmarks/RESULTS.md by hand.

    taskset -c 2,3 python -m benchmarks.probe_lstm_copying --threads 2

Per shape, in the same rotated rounds (report_sides; time over "tiles from
the forward" paired by round, > 1 slower): the functional fwd+bwd with the
copying plan forced off, forced on (every weight read in place whose gates
are whole blocks), as the rule (copies_w) takes it, and the layer's
fwd+bwd on weights blocked before (what the functional forms lose to it;
--brief: the first two alone; --chunks: the copying plan on other
reduction chunks, dx_chunk in the config).
Each side's gradients are checked against the layer's first."""
import argparse
import os

import numpy as np

from benchmarks.common import machine, quick_shapes, report_sides, set_threads
from brgemm.info import kernel_path
from primitives import lstm, lstm_layer, lstm_strips

QUICK = ("single_step_t1",)


def forced(on):
    """copies_w's stand-in for one side: every weight read in place (on) or none."""
    return lambda g, in_place: (frozenset(in_place) if on and g.K % g.bk == 0
                                else frozenset())


def sides(T, N, C, K, rng, brief=False, chunks=()):
    r = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    # weights as torch.nn.LSTM draws them (benchmarks.stages says why)
    u = lambda *s: (rng.uniform(-1, 1, s) / np.sqrt(K)).astype(np.float32)  # noqa: E731
    a = dict(x=r(T, N, C), h0=r(N, K), c0=r(N, K), w_ih=u(4 * K, C), w_hh=u(4 * K, K),
             b=u(4 * K))
    d = dict(dy=r(T, N, K), dhT=r(N, K), dcT=r(N, K))
    layer = lstm.LSTM(C, K, init=False)
    layer.set_weights(a["w_ih"], a["w_hh"], a["b"])
    rule = lstm_strips.copies_w  # the layer's name of it is the one replaced per side

    def func(copies, config=None):
        saved = lstm.Saved()

        def run():
            lstm_layer.copies_w = copies
            try:
                lstm.forward(**a, config=config, saved=saved)
                return lstm.backward(**d, **a, config=config, saved=saved)
            finally:
                lstm_layer.copies_w = rule
        return run

    def layer_fb():  # as the benchmark times it: the weight gradients left in tiles
        layer.forward(a["x"], a["h0"], a["c0"])
        return layer.backward(d["dy"], d["dhT"], d["dcT"])
    out = {"tiles from the forward (before)": func(forced(False)),
           "copying in the plan (forced)": func(forced(True))}
    if not brief:
        out["the rule"] = func(rule)
    for c in chunks:  # the copying plan's chunk (fc_plans.copy_chunk: at most dx_chunk)
        out[f"copying, dx_chunk {c}"] = func(forced(True), {"fwd": {"dx_chunk": c}})
    want = [np.array(v) for v in layer_fb() + (layer.grad_w_ih, layer.grad_w_hh, layer.grad_b)]
    for name, fn in out.items():
        for got, ref in zip(fn(), want):
            err = np.abs(got - ref).max() / (np.abs(ref).max() + 1e-30)
            assert err < 1e-4, (name, err)
    if not brief:
        out["the layer (weights blocked before)"] = layer_fb
    g = lstm.geometry(T, N, C, K, path=kernel_path("f32"))
    in_place = lstm_strips.reads_in_place(g, "f32", "cpu", a["x"], a["w_ih"], a["w_hh"], None)
    return g, in_place, rule(g, in_place), out


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.probe_lstm_copying",
                                 description=__doc__)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--shapes", help="names from gnmt_lstm (default: single_step_t1)")
    ap.add_argument("--brief", action="store_true", help="the copying plan off and on alone")
    ap.add_argument("--chunks", default="", help="more copying sides: these dx_chunk values "
                    "(dividing dx_group), e.g. 4,8")
    args = ap.parse_args(argv)
    set_threads(args.threads, onednn=False)
    print(f"lstm backward-data copying probe, f32, {machine()}, path {kernel_path('f32')!r}, "
          f"{args.threads} threads, cores {sorted(os.sched_getaffinity(0))}")
    rng = np.random.default_rng(0)
    names = args.shapes.split(",") if args.shapes else QUICK
    for (T, N, C, K), name in quick_shapes("gnmt_lstm", True, names):
        g, in_place, rule, fns = sides(T, N, C, K, rng, args.brief,
                                       [int(c) for c in args.chunks.split(",") if c])
        flops = dict.fromkeys(fns, 6.0 * T * N * 4 * K * (C + K))
        report_sides(f"{name} T={T} N={N} C={C} K={K} (bn {g.bn} bc {g.bc} bk {g.bk}; read in "
                     f"place {sorted(in_place)}, the rule copies {sorted(rule)})", fns, flops,
                     args.reps, "tiles from the forward (before)")


if __name__ == "__main__":
    main()
