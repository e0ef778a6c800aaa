"""conv's configs on this machine, as benchmarks.fc_configs does for fc: each
chosen layer's plans (fwd, bwd, upd; N = threads, one image per thread)
under the default config and candidates on the same blocking, timed
interleaved, and the candidates that beat the default at every thread count
asked for, as TOML tables for this machine's kernel path
(["f32@amx".fwd."N=..,C=..,..."]). PyTorch's F.conv2d forward and its
autograd backward (data and weights together) are timed beside them, for
scale (--torch). --functional times the functional calls (conv.forward for
fwd, conv.backward for bwd and upd: copies included) instead of the plans.

    python -m benchmarks.conv_configs --threads 16 --save t16.json
    taskset -c 2,3 python -m benchmarks.conv_configs --threads 2 --with t16.json --out tuned.toml

Candidates (conv.toml's comments say what each key does): the loop order
with the outer two parallel loops swapped (which operand a thread keeps in
cache while the other streams), call_kb the default's or 128, and for fwd
and bwd the pixel blocks that share each call's weight blocks (w_reuse 1,
4 or 8); for fwd also output channels in blocks of 32 (bk: every pass's
blocking, so a kept bk moves bwd and upd too); for upd call_kb 64 or 256
and the flat nest. Kept as fc_configs
keeps them: at least WIN faster in this run and in each earlier one."""
import argparse
import json

import numpy as np

from benchmarks.common import machine, quick_shapes, set_threads
from benchmarks.fc_configs import WIN, time_all
from brgemm.arrays import aligned_empty
from brgemm.config import write_config
from brgemm.info import kernel_path
from primitives import conv
from primitives._config import settings
from primitives.conv_plans import SHAPE

QUICK = ("res2a_branch2b", "res3a_branch2b", "res4a_branch2c", "res5a_branch2b")


def _swapped(spec):
    """spec with its first two (parallel) letters swapped, e.g. NKpq -> KNpq."""
    return spec[1] + spec[0] + spec[2:] if spec[:2].isupper() and "|" not in spec else spec


def candidates(default, pass_):
    """Configs of one pass, the default first; each changes only that pass's
    keys, except fwd's bk (the blocking every pass shares)."""
    spec, kb = default["spec"], default["call_kb"]
    if pass_ in ("fwd", "bwd"):
        base = dict(spec=spec, call_kb=kb, w_reuse=default["w_reuse"])
        grid = [dict(base, spec=s, call_kb=k, w_reuse=r) for s in (spec, _swapped(spec))
                for k in (kb, 128) for r in (1, 4, 8)]
        grid = [c for c in grid if c["spec"] == spec or c["w_reuse"] != 4]
        if pass_ == "fwd" and default["bk"] != 32:
            grid += [dict(base, bk=32), dict(base, bk=32, call_kb=128),
                     dict(base, bk=32, spec=_swapped(spec)), dict(base, bk=32, w_reuse=8)]
    else:
        base = dict(spec=spec, call_kb=kb, flat=default["flat"])
        grid = [dict(spec=s, call_kb=k, flat=f) for s in (spec, _swapped(spec))
                for k in (kb, 256) for f in (False, True)]
    return [base] + [c for c in grid if c != base]


def _shape(N, C, K, H, W, R, S, st, pd):
    return dict(zip(SHAPE, (N, C, K, H, W, R, S, st, st, pd, pd)))


def _runner(dims, st, pd, pass_, cfg, threads, data, functional=False):
    """A function that replays one pass of the layer whose `pass_` config is
    cfg; functional: that makes the functional call instead (conv.forward
    for fwd, conv.backward for bwd and upd), copies included."""
    N, C, K, H, W, R, S = dims
    path = kernel_path("f32")
    shape = _shape(*dims, st, pd)
    others = {p: settings("conv", p, shape, conv.SCHEMA[p], path=path) for p in conv.SCHEMA}
    others[pass_] = {**others[pass_], **cfg}
    g = conv.geometry(*dims, (st, st), (pd, pd), config=others, path=path)
    x, w, dy = data
    if functional and pass_ == "fwd":
        return lambda: conv.forward(x, w, st, pd, config=others)
    if functional:
        return lambda: conv.backward(dy, x, w, st, pd, config=others)
    p = conv.plan(g, pass_, "f32")
    if pass_ == "fwd":
        args = dict(x=conv.block_x(x, g, "f32"), w=conv.block_w(w, g, "f32"),
                    y=aligned_empty((N, g.Kb, g.P, g.Q, g.bk), np.float32))
    elif pass_ == "bwd":
        args = dict(dyp=conv.block_y(dy, g, "f32", bordered=True),
                    wt=conv.block_w(w, g, "f32", transposed=True),
                    dx=aligned_empty((N, g.Cb, g.Hp, g.Wp, g.bc), np.float32))
    else:
        args = dict(dw=conv.update_output(g), **conv.update_inputs(x, dy, g, "f32"))
    return lambda: p.run(threads=threads, **args)


def _torch(data, st, pd):
    """PyTorch's forward, and its forward + autograd backward, on the same arrays."""
    import torch
    F = torch.nn.functional
    tx, tw, tdy = (torch.from_numpy(a) for a in data)
    gx, gw = tx.clone().requires_grad_(), tw.clone().requires_grad_()

    def both():
        gx.grad = gw.grad = None
        F.conv2d(gx, gw, stride=st, padding=pd).backward(tdy)
    return [lambda: F.conv2d(tx, tw, stride=st, padding=pd), both]


def c_str(cfg):
    return " ".join(f"{k} {v}" for k, v in cfg.items())


def run(threads, names=QUICK, out=None, save=None, earlier=(), with_torch=False,
        functional=False, passes=("fwd", "bwd", "upd"), extra=None):
    """extra: {pass: [config, ...]}, candidates tried besides candidates()'s."""
    rng = np.random.default_rng(0)
    path = kernel_path("f32")
    what = "functional calls" if functional else "layer plans"
    print(f"conv configs, f32, {what}, N = {threads}, {machine()}, kernel path {path!r}, "
          f"{threads} threads; median of interleaved rounds")
    speeds, wins = {}, []
    for (C, K, H, W, R, S, st, pd), name in quick_shapes("resnet50_conv", True, names):
        N = threads
        dims = (N, C, K, H, W, R, S)
        P, Q = (H + 2 * pd - R) // st + 1, (W + 2 * pd - S) // st + 1
        data = (rng.standard_normal((N, C, H, W)).astype(np.float32),
                (rng.standard_normal((K, C, R, S)) / np.sqrt(C * R * S)).astype(np.float32),
                rng.standard_normal((N, K, P, Q)).astype(np.float32))
        shape = _shape(*dims, st, pd)
        best = {}
        for pass_ in passes:
            default = settings("conv", pass_, shape, conv.SCHEMA[pass_], path=path)
            cands = candidates(default, pass_)
            cands += [c for c in (extra or {}).get(pass_, []) if c not in cands]
            med, spread = time_all([_runner(dims, st, pd, pass_, c, threads, data, functional)
                                    for c in cands])
            for c, m, s in zip(cands, med, spread):
                speeds[f"{name} {pass_} {c_str(c)}"] = med[0] / m
                print(f"{name:15s} {pass_}  {c_str(c):34s} {1e3 * m:8.3f} ms  "
                      f"x{med[0] / m:5.2f}  spread {100 * s:3.0f}%", flush=True)
            every = [[speeds[f"{name} {pass_} {c_str(c)}"]]
                     + [e["speeds"].get(f"{name} {pass_} {c_str(c)}", 0) for e in earlier]
                     for c in cands]
            pick = max(range(1, len(cands)), key=lambda i: min(every[i]), default=None)
            best[pass_] = 1e3 * med[0]
            if pick is not None and min(every[pick]) >= 1 + WIN:
                wins.append((pass_, shape, cands[pick], every[pick]))
                best[pass_] = 1e3 * med[pick]
        if with_torch:
            (t_fwd, t_both), _ = time_all(_torch(data, st, pd))
            print(f"{name:15s} torch fwd {1e3 * t_fwd:.3f} ms, fwd+bwd {1e3 * t_both:.3f} ms; "
                  f"{what}, each pass's best here: "
                  + ", ".join(f"{p} {t:.3f}" for p, t in best.items()) + " ms", flush=True)
    if save:
        with open(save, "w") as f:
            json.dump(dict(threads=threads, speeds=speeds), f)
    print(f"\nkept (at least {100 * WIN:.0f}% faster in this run and the earlier ones):")
    # N is the thread count: a kept config is written for each run's N
    images = sorted({threads} | {e["threads"] for e in earlier})
    for pass_, shape, cfg, sp in wins:
        for N in images:
            at = dict(shape, N=N)
            key = ",".join(f"{k}={v}" for k, v in at.items())
            print(f'["{path}".{pass_}."{key}"] {c_str(cfg)}  x{" x".join(f"{s:.2f}" for s in sp)}')
            if out:
                write_config(out, pass_, at, cfg)
    return wins


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.conv_configs", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, required=True, help="threads (and images)")
    parser.add_argument("--shapes", default=",".join(QUICK),
                        help="layers of the resnet50_conv set, comma-separated")
    parser.add_argument("--out", help="a TOML file the kept candidates are merged into")
    parser.add_argument("--save", help="a JSON file for this run's speeds (for --with)")
    parser.add_argument("--with", dest="earlier", action="append", default=[],
                        help="an earlier run's --save file, whose speeds must agree")
    parser.add_argument("--torch", action="store_true", help="time PyTorch's calls beside")
    parser.add_argument("--functional", action="store_true",
                        help="time conv.forward / conv.backward instead of the layer's plans")
    parser.add_argument("--passes", default="fwd,bwd,upd", help="passes, comma-separated")
    parser.add_argument("--extra", type=json.loads, default={},
                        help='more candidates, as JSON: {"fwd": [{"spec": "KNpq", ...}, ...]}')
    args = parser.parse_args(argv)
    threads = set_threads(args.threads, onednn=False)
    if args.torch:
        import torch
        torch.set_num_threads(threads)
    earlier = []
    for path in args.earlier:
        with open(path) as f:
            earlier.append(json.load(f))
    run(threads, tuple(args.shapes.split(",")), args.out, args.save, earlier, args.torch,
        args.functional, tuple(args.passes.split(",")), args.extra)


if __name__ == "__main__":
    main()
