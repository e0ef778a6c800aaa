"""Probe (issue 17): what share of the FMA peak fc's layer passes and
PyTorch's matmul reach as the operands grow from L2-sized to L3-sized, at the
threads given: whether fc's low % of peak on the Xeon at 2 threads (both
sides level there) is a matter of operand size, blocking, or threads. A
probe, not a benchmark: its numbers go to benchmarks/RESULTS.md by hand.

    taskset -c 2 python -m benchmarks.probe_fc_peak --threads 1
    taskset -c 2,3 python -m benchmarks.probe_fc_peak --threads 2 [--pass bwd]
        [--functional] [--shapes N,C,K;...] [--blockings bn,bc,bk,spec,chunk;...]

Per shape: the layer's forward on blocked x (fc.Linear.forward_blocked; --pass
bwd: backward-data on blocked dy) under the config tables and under each
blocking (every pass's bn, bc, bk, and the pass's spec and chunk: "cKN" runs
the reduction outermost, a phase a chunk), with --functional fc.forward
(fc.backward's dx) under the same configs, and torch.mm (F.linear), each
checked against float64 first, then timed in rotated rounds (report_sides):
median ms, time over the tables' layer plan paired by round, spread,
GFLOP/s; the title gives the factor from GFLOP/s to the share of the
measured peak (one core's f32 FMA peak x threads)."""
import argparse

import numpy as np

from benchmarks.common import layer_peak, machine, report_sides, set_threads, torch_threads
from brgemm.layouts import from_blocks, to_blocks
from primitives import fc

SHAPES = ((256, 256, 256), (256, 512, 512), (256, 1024, 1024), (256, 2048, 2048),
          (256, 4096, 4096), (1024, 1024, 1024))
BLOCKINGS = ("64,64,64,NKc,1024", "64,64,64,NKc,1", "64,64,64,KNc,4", "32,64,64,NKc,1024",
             "128,64,32,NKc,1024")


def sides(N, C, K, blockings, torch, rng, functional=False, pass_="fwd"):
    """name -> fn: the layer's pass under the tables and each blocking (and,
    functional, fc.forward / fc.backward's dx under the same configs), then
    PyTorch's matmul (and F.linear or its dx); each checked against float64."""
    x = rng.standard_normal((N, C)).astype(np.float32)
    dy = rng.standard_normal((N, K)).astype(np.float32)
    w = rng.standard_normal((K, C)).astype(np.float32)
    fwd = pass_ == "fwd"
    want = x.astype(np.float64) @ w.T if fwd else dy.astype(np.float64) @ w
    tol = 1e-5 * (np.abs(x).max() * C if fwd else np.abs(dy).max() * K) * np.abs(w).max()
    out = {}
    for name, cfg in [("table", None)] + [(b, _config(b, pass_)) for b in blockings]:
        lin = fc.Linear(C, K, bias=False, rng=rng, config=cfg)
        lin.weight[...] = w
        g = lin.prepare(N)
        xb, dyb = to_blocks(x, g.bn, g.bc), to_blocks(dy, g.bn, g.bk)
        lin.forward_blocked(xb)  # blocks the weights
        if fwd:
            got, run = from_blocks(lin.y, N, K), (lambda lin=lin, xb=xb: lin.forward_blocked(xb))
        else:
            lin.backward_data_blocked(dyb)
            got = from_blocks(lin.dx, N, C)
            run = (lambda lin=lin, dyb=dyb: lin.backward_data_blocked(dyb))
        _check(name, got, want, tol)
        out[name] = run
        if functional:  # the functional form on plain arrays under the same config
            call = ((lambda cfg=cfg: fc.forward(x, w, config=cfg)) if fwd else
                    (lambda cfg=cfg: fc.backward(dy, x, w, config=cfg, need_dw=False)[0]))
            _check("func " + name, call(), want, tol)
            out["func " + name] = call
    tx, tw, tdy = (torch.from_numpy(a) for a in (x, w, dy))
    out["torch.mm"] = (lambda: torch.mm(tx, tw.t())) if fwd else (lambda: torch.mm(tdy, tw))
    if functional and fwd:
        out["F.linear"] = lambda: torch.nn.functional.linear(tx, tw)
    return out


def _check(name, got, want, tol):
    err = np.abs(got - want).max()
    if err > tol:
        raise SystemExit(f"{name}: error {err:.2e} over {tol:.2e}")


def _config(text, pass_):
    """A config from "bn,bc,bk,spec,chunk": the blocking (every pass's, from
    [fwd]) and the pass's loop order and chunk."""
    bn, bc, bk, spec, chunk = text.split(",")
    cfg = {"fwd": {"bn": int(bn), "bc": int(bc), "bk": int(bk)}}
    cfg.setdefault(pass_, {}).update(spec=spec, chunk=int(chunk))
    return cfg


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--blockings", default=";".join(BLOCKINGS),
                        help="';'-separated bn,bc,bk,spec,chunk")
    parser.add_argument("--shapes", default=";".join(",".join(map(str, s)) for s in SHAPES),
                        help="';'-separated N,C,K")
    parser.add_argument("--pass", dest="pass_", choices=("fwd", "bwd"), default="fwd")
    parser.add_argument("--functional", action="store_true",
                        help="fc.forward under each config too, and F.linear")
    args = parser.parse_args()
    threads = set_threads(args.threads, onednn=False)
    torch = torch_threads(threads)
    peak, unit = layer_peak("f32", threads)
    print(f"{machine()}; {threads} threads; peak {peak:.0f} GFLOP/s ({unit} x threads)")
    rng = np.random.default_rng()
    for shape in args.shapes.split(";"):
        N, C, K = map(int, shape.split(","))
        s = sides(N, C, K, [b for b in args.blockings.split(";") if b], torch, rng,
                  args.functional, args.pass_)
        flops = 2.0 * N * C * K
        report_sides(f"{args.pass_} N {N} C {C} K {K} (GFLOP/s / peak: x{1 / peak:.5f})", s,
                     {n: flops for n in s}, args.reps, "table")


if __name__ == "__main__":
    main()
