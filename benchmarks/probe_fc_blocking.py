"""fc's functional forward and forward+backward under other blockings, against
PyTorch's in the same rounds (issue 17: func/torch at 2 threads on the
Xeon). A probe, not a benchmark: its numbers go to benchmarks/RESULTS.md by
hand.

    taskset -c 2,3 python -m benchmarks.probe_fc_blocking --threads 2

Per quick shape: PyTorch's F.linear (and its autograd backward), then
fc.forward (and fc.backward) under the config tables here and under each
candidate blocking (bn, bc, bk of the [fwd] table, every pass's blocking;
the tables' specs and chunks otherwise), timed in rotated rounds
(report_sides): times over PyTorch's, paired by round (under 1: faster than
PyTorch). Every candidate's results are checked against PyTorch's first."""
import argparse

import numpy as np

from benchmarks.common import machine, quick_shapes, report_sides, set_threads, torch_threads
from brgemm.info import kernel_path
from primitives import fc

QUICK = ("square_1k", "square_1k_n1k", "square_4k")
BLOCKINGS = ((128, 128, 64), (64, 64, 64), (128, 64, 64), (64, 128, 64), (128, 128, 128),
             (256, 128, 64))


def sides(N, C, K, torch, rng):
    F = torch.nn.functional
    x, dy, w = (rng.standard_normal(s).astype(np.float32) for s in ((N, C), (N, K), (K, C)))
    b = rng.standard_normal(K).astype(np.float32)
    tx, tw, tb, tdy = (torch.from_numpy(a) for a in (x, w, b, dy))
    gx, gw, gb = (t.clone().requires_grad_() for t in (tx, tw, tb))

    def torch_both():
        gx.grad = gw.grad = gb.grad = None
        F.linear(gx, gw, gb).backward(tdy)
    torch_both()
    want = [F.linear(tx, tw, tb).numpy(), gx.grad.numpy(), gw.grad.numpy(), gb.grad.numpy()]
    fwd, both = {"torch": lambda: F.linear(tx, tw, tb)}, {"torch": torch_both}
    g = fc.geometry(N, C, K, path=kernel_path("f32"))
    table = (g.bn, g.bc, g.bk)
    for blocks in (None,) + tuple(b_ for b_ in BLOCKINGS if b_ != table):
        cfg = None if blocks is None else {"fwd": dict(zip(("bn", "bc", "bk"), blocks))}
        label = f"table {table}" if blocks is None else str(blocks)
        got = [fc.forward(x, w, b, config=cfg)] + list(fc.backward(dy, x, w, config=cfg))
        for name, a, r in zip(("y", "dx", "dw", "db"), got, want):
            err = np.abs(a - r).max() / np.abs(r).max()
            assert err < 1e-4, (label, name, err)
        fwd[label] = lambda cfg=cfg: fc.forward(x, w, b, config=cfg)
        both[label] = lambda cfg=cfg: (fc.forward(x, w, b, config=cfg),
                                       fc.backward(dy, x, w, config=cfg))
    return fwd, both


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.probe_fc_blocking", description=__doc__)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--shapes", default=",".join(QUICK), help="names from fc_sizes")
    args = ap.parse_args(argv)
    set_threads(args.threads, onednn=False)
    torch = torch_threads(args.threads)
    print(f"fc blockings against PyTorch {torch.__version__}, f32, {machine()}, path "
          f"{kernel_path('f32')!r}, {args.threads} threads")
    rng = np.random.default_rng(0)
    for (N, C, K), name in quick_shapes("fc_sizes", True, args.shapes.split(",")):
        fwd, both = sides(N, C, K, torch, rng)
        for what, fns in (("fwd", fwd), ("fwd+bwd", both)):
            report_sides(f"{name} N={N} C={C} K={K} {what}", fns, {}, args.reps, "torch")


if __name__ == "__main__":
    main()
