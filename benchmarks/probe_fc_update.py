"""fc's weight update by part (issue 17): why it runs further from the FMA
peak than the forward on some hosts. A probe, not a benchmark: its numbers
go to benchmarks/RESULTS.md by hand.

    taskset -c 2,3 python -m benchmarks.probe_fc_update --threads 2

Per quick shape: (1) kernels alone, one thread, the same blocks every call
(data in L1/L2): the forward's call shape against the update's and a few
other update shapes; (2) the layer plans at --threads (fwd, upd, upd with x's
transpose, the transpose alone) and one thread's bare replay (time_bare);
(3) the update's plan under other blockings and loop orders, each timed
interleaved with the default's (paired ratios, under 1 = faster); (4) the
functional backward and its update's parts."""
import argparse
import os
import statistics

import numpy as np

from benchmarks.common import (interleaved_samples, machine, paired_ratio, path_peak,
                               quick_shapes, set_threads)
from brgemm import Kernel
from brgemm.arrays import aligned_empty
from brgemm.backend import cpu as cpu_backend
from brgemm.info import kernel_path
from brgemm.layouts import to_blocks, transpose_blocks
from primitives import fc
from primitives._config import settings

QUICK = ("square_1k", "square_1k_n1k", "square_4k")


def gf(flops, t):
    return flops / t * 1e-9


def kernels_alone(g, N, peak1, reps=5):
    """GF/s of single kernel calls repeated on the same blocks, one thread."""
    shapes = {"fwd": (g.bn, g.bk, g.bc, min(g.chunk["fwd"], g.Cb)),
              "upd": (g.bc, g.bk, g.bn, g.Nb),
              "upd bn=N": (g.bc, g.bk, g.bn * g.Nb, 1),
              "upd bk=32": (g.bc, 32, g.bn, g.Nb),
              "upd bk=128": (g.bc, 128, g.bn, g.Nb),
              "upd bc=64": (64, g.bk, g.bn, g.Nb)}
    rng = np.random.default_rng(0)
    timers = []
    for name, (m, n, k, count) in shapes.items():
        A = rng.standard_normal((count, m, k)).astype(np.float32)
        B = rng.standard_normal((count, k, n)).astype(np.float32)
        C = np.zeros((m, n), np.float32)
        kern = Kernel(m, n, k, beta=0.0)
        calls = max(1, int(0.03 / (2.0 * m * n * k * count / (peak1 * 1e9))))
        timers.append((name, 2.0 * m * n * k * count * calls,
                       lambda kern=kern, A=A, B=B, C=C, calls=calls: kern.time_native(A, B, C, calls)))
    samples = [[] for _ in timers]
    for _ in range(reps):
        for s, (_, _, t) in zip(samples, timers):
            s.append(t())
    for (name, flops, _), s in zip(timers, samples):
        m, n, k, count = shapes[name]
        r = gf(flops, statistics.median(s))
        print(f"  kernel {name:11s} m{m} n{n} k{k} x{count}: {r:6.1f} GF/s  {100 * r / peak1:3.0f}%")


def nts_replay(plan):
    """A second CPU replay of `plan` whose beta-0 f32 kernels store C with
    non-temporal stores (a probe-only switch in kernels/cpu/brgemm_cpu.c)."""
    os.environ["BRGEMM_PROBE_NTS"] = "1"
    try:
        return cpu_backend.PlanReplay(plan)
    finally:
        del os.environ["BRGEMM_PROBE_NTS"]


def run(threads, reps):
    path = kernel_path("f32")
    peak1, unit = path_peak(path)
    print(f"fc update probe, f32, {machine()}, path {path!r}, {threads} threads; one core's "
          f"{unit} peak {peak1:.0f} GF/s; medians of {reps} interleaved rounds")
    rng = np.random.default_rng(0)
    for (N, C, K), name in quick_shapes("fc_sizes", True, QUICK):
        flops = 2.0 * N * C * K
        x = rng.standard_normal((N, C)).astype(np.float32)
        dy = rng.standard_normal((N, K)).astype(np.float32)
        w = rng.standard_normal((K, C)).astype(np.float32)
        lin = fc.Linear(C, K, bias=False)
        g = lin.prepare(N)
        print(f"{name} N={N} C={C} K={K}: blocks bn {g.bn} bc {g.bc} bk {g.bk}, specs {g.specs}, "
              f"chunks {g.chunks}")
        kernels_alone(g, N, peak1)
        xb, dyb = to_blocks(x, g.bn, g.bc), to_blocks(dy, g.bn, g.bk)
        lin.forward_blocked(xb)
        lin.update_blocked(dyb)
        pu = lin.plans["upd"]
        t = dict(xt=lin.xt, dy=dyb, dw=lin.dw)
        bare = {p: pl.time_bare(3, **a) / 3 for p, pl, a in (
            ("fwd", lin.plans["fwd"], dict(x=xb, w=lin.w, y=lin.y)), ("upd", pu, t))}
        print(f"  bare replay, 1 thread: fwd {gf(flops, bare['fwd']):6.1f} GF/s "
              f"{100 * gf(flops, bare['fwd']) / peak1:3.0f}%, upd {gf(flops, bare['upd']):6.1f} "
              f"{100 * gf(flops, bare['upd']) / peak1:3.0f}%")
        nts = nts_replay(pu)
        fns = {"fwd plan": lambda: lin.plans["fwd"].run(x=xb, w=lin.w, y=lin.y),
               "upd plan": lambda: pu.run(**t),
               "upd plan NTS": lambda: nts.run(t, None),
               "update_blocked": lambda: lin.update_blocked(dyb),
               "transpose x": lambda: transpose_blocks(xb, out=lin.xt)}
        # the update's plan under other blockings / loop orders (same data)
        for label, blocks, spec, chunk in (("spec CKn", None, "CKn", None),
                                           ("spec c|KCn g2", None, ("c|KCn", 2), None),
                                           ("spec k|CKn g2", None, ("k|CKn", 2), None),
                                           ("chunk 1", None, None, 1),
                                           ("bn=N", (N if N <= 512 else 256, g.bc, g.bk), None, None),
                                           ("bk=32", (g.bn, g.bc, 32), None, None),
                                           ("bk=128", (g.bn, g.bc, 128), None, None),
                                           ("bc=64", (g.bn, 64, g.bk), None, None),
                                           ("bc=256", (g.bn, 256, g.bk), None, None)):
            cfg = {p: settings("fc", p, {"N": N, "C": C, "K": K}, fc.SCHEMA[p], path=path)
                   for p in fc.SCHEMA}
            if spec:
                spec, group = spec if isinstance(spec, tuple) else (spec, None)
                cfg["upd"]["spec"] = spec
                if group:
                    cfg["upd"]["group"] = group
            if chunk:
                cfg["upd"]["chunk"] = chunk
            v = fc.Linear(C, K, bias=False, blocks=blocks, config=cfg)
            gv = v.prepare(N)
            xv, dv = to_blocks(x, gv.bn, gv.bc), to_blocks(dy, gv.bn, gv.bk)
            v.forward_blocked(xv)
            v.update_blocked(dv)
            fns[f"upd {label}"] = lambda v=v, dv=dv: v.plans["upd"].run(xt=v.xt, dy=dv, dw=v.dw)
        # the functional backward and its update's parts
        fc.backward(dy, x, w)
        gp = fc.geometry(N, C, K, path=path)
        pp = fc.plan(gp, "upd", "f32", plain=True)
        xtiles = to_blocks(x, gp.bn, gp.bc)
        db = np.empty(K, np.float32)
        dyt = to_blocks(dy, gp.bk, gp.bn, transpose=True, sums=db)
        dw = aligned_empty((K, C), np.float32)
        ppn = nts_replay(pp)
        fns.update({"func backward": lambda: fc.backward(dy, x, w),
                    "func upd plan": lambda: pp.run(dw=dw, x=xtiles, dyt=dyt),
                    "func upd plan NTS": lambda: ppn.run(dict(dw=dw, x=xtiles, dyt=dyt), None),
                    "func x tiles": lambda: to_blocks(x, gp.bn, gp.bc, out=xtiles),
                    "func dy^T tiles+db": lambda: to_blocks(dy, gp.bk, gp.bn, transpose=True,
                                                            sums=db, out=dyt)})
        names = list(fns)
        s = interleaved_samples([fns[n] for n in names], reps=reps, rotate=True)
        base = s[names.index("upd plan")]
        for n, si in zip(names, s):
            med = statistics.median(si)
            rate = gf(flops, med)
            extra = f"  /upd plan {paired_ratio(si, base):5.2f}" if n.startswith("upd") or \
                n.startswith("func upd") else ""
            print(f"  {n:20s} {1e3 * med:8.3f} ms  {rate:7.1f} GF/s {100 * rate / peak1 / threads:4.0f}%"
                  f"{extra}", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.probe_fc_update", description=__doc__)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args(argv)
    set_threads(args.threads, onednn=False)
    run(args.threads, args.reps)


if __name__ == "__main__":
    main()
