"""fc's weight update by part (issue 17): why it runs further from the FMA
peak than the forward on some hosts. A probe, not a benchmark: its numbers
go to benchmarks/RESULTS.md by hand.

    taskset -c 2,3 python -m benchmarks.probe_fc_update --threads 2

Per quick shape: (1) kernels alone, one thread, the same blocks every call
(data in L1/L2): the forward's call shape against the update's, and the
update's with one block over the minibatch; one core's FMA peak, measured
again before each shape (the lent host's speed drifts); (2) one thread's
bare replay (time_bare) of the layer's forward and update plans; (3) in the
same rotated rounds at --threads: the layer's forward plan, its update plan
(with and without x's transpose, update_blocked), the update plan in calls
of one block (chunk 1) and on one block over the minibatch (bn), the
functional backward's update plan with the same variants, and the whole
fc.backward with chunk 1; paired time ratios against each one's reference
(REF; under 1 = faster). The first version (b60dc6f) also tried loop orders,
dW tile sizes and non-temporal dW stores (with an uncommitted switch in
kernels/cpu/brgemm_cpu.c that added LIBXSMM_GEMM_FLAG_ALIGN_C_NTS_HINT to
beta-0 f32 kernels), and ran at 16 threads too (benchmarks/RESULTS.md, upd22)."""
import argparse
import dataclasses
import statistics

import numpy as np

from benchmarks.common import (interleaved_samples, machine, paired_ratio, path_peak,
                               quick_shapes, set_threads)
from brgemm import Kernel
from brgemm.arrays import aligned_empty
from brgemm.info import kernel_path
from brgemm.layouts import to_blocks
from primitives import fc
from primitives._config import settings

QUICK = ("square_1k", "square_1k_n1k", "square_4k")
REF = {"upd plan": "fwd plan", "update_blocked": "upd plan", "upd chunk 1": "upd plan",
       "upd bn=N": "upd plan", "func upd plan": "upd plan", "func upd plan chunk 1": "func upd plan",
       "func upd plan bn=N": "func upd plan", "func backward chunk 1": "func backward"}


def gf(flops, t):
    return flops / t * 1e-9


def kernels_alone(g, N, peak1, reps=5):
    """GF/s of single kernel calls repeated on the same blocks, one thread."""
    shapes = {"fwd": (g.bn, g.bk, g.bc, min(g.chunk["fwd"], g.Cb)),
              "upd": (g.bc, g.bk, g.bn, g.Nb),
              "upd bn=N": (g.bc, g.bk, g.bn * g.Nb, 1)}
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


def configs(N, C, K, path, **upd):
    """fc's config tables for this shape here, with `upd` over the [upd] one."""
    cfg = {p: settings("fc", p, {"N": N, "C": C, "K": K}, fc.SCHEMA[p], path=path)
           for p in fc.SCHEMA}
    cfg["upd"].update(upd)
    return cfg


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
        print(f"{name}: peak now {path_peak(path)[0]:.0f} GF/s per core")
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
        fns = {"fwd plan": lambda: lin.plans["fwd"].run(x=xb, w=lin.w, y=lin.y),
               "upd plan": lambda: pu.run(**t),
               "update_blocked": lambda: lin.update_blocked(dyb)}
        # the update's plan under other reduction blockings (same data)
        for label, blocks, upd in (("chunk 1", None, dict(chunk=1)),
                                   ("bn=N", (min(N, 256), g.bc, g.bk), {})):
            v = fc.Linear(C, K, bias=False, blocks=blocks, config=configs(N, C, K, path, **upd))
            gv = v.prepare(N)
            xv, dv = to_blocks(x, gv.bn, gv.bc), to_blocks(dy, gv.bn, gv.bk)
            v.forward_blocked(xv)
            v.update_blocked(dv)
            fns[f"upd {label}"] = lambda v=v, dv=dv: v.plans["upd"].run(xt=v.xt, dy=dv, dw=v.dw)
        # the functional backward's update plan, its variants, and the whole call
        gp = fc.geometry(N, C, K, path=path)
        dw = aligned_empty((K, C), np.float32)
        db = np.empty(K, np.float32)
        for label, gv in (("", gp), (" chunk 1", dataclasses.replace(gp, chunks=gp.chunks[:2] + (1,))),
                          (" bn=N", dataclasses.replace(gp, bn=min(N, 256)))):
            pp = fc.plan(gv, "upd", "f32", plain=True)
            tx = to_blocks(x, gv.bn, gv.bc)
            tdy = to_blocks(dy, gv.bk, gv.bn, transpose=True, sums=db)
            fns["func upd plan" + label] = lambda pp=pp, tx=tx, tdy=tdy: pp.run(dw=dw, x=tx, dyt=tdy)
        c1 = configs(N, C, K, path, chunk=1)
        fns.update({"func backward": lambda: fc.backward(dy, x, w),
                    "func backward chunk 1": lambda: fc.backward(dy, x, w, config=c1)})
        ref = fc.backward(dy, x, w)
        got = fc.backward(dy, x, w, config=c1)
        assert all(np.allclose(a, b, rtol=1e-4, atol=1e-3) for a, b in zip(ref, got))
        names = list(fns)
        s = interleaved_samples([fns[n] for n in names], reps=reps, rotate=True)
        for n, si in zip(names, s):
            med = statistics.median(si)
            rate = gf(flops, med)
            r = REF.get(n)
            extra = f"  / {r} x{paired_ratio(si, s[names.index(r)]):5.2f}" if r else ""
            print(f"  {n:22s} {1e3 * med:8.3f} ms  {rate:7.1f} GF/s {100 * rate / peak1 / threads:4.0f}%"
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
