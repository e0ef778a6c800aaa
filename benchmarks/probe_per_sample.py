"""Probe (torch.func over primitives.nn): per-sample gradients,
torch.func.vmap(torch.func.grad(loss)) over a batch of single samples, with
our Linear and Conv2d (primitives.nn_transforms: the forward one call on the
whole batch, the gradients one call per sample) against torch.nn's, the same
parameters and data, in rotated rounds (medians; ours over torch's time,
paired by round: > 1, ours slower).

    python -m benchmarks.probe_per_sample [--threads T] [--batch 64] [--reps 9]"""
import argparse

import torch
from torch.func import functional_call, grad, vmap

from benchmarks.common import machine, report_sides, set_threads
from primitives import nn as pnn

LAYERS = {"Linear(512, 64)": (lambda: torch.nn.Linear(512, 64), (512,)),
          "Conv2d(16, 32, 3, padding=1) on 8 x 8": (
              lambda: torch.nn.Conv2d(16, 32, 3, padding=1), (16, 8, 8))}


def per_sample(module, x, c):
    """A function computing the per-sample gradients of sum(y * c) for module."""
    params = {k: v.detach() for k, v in module.named_parameters()}
    f = vmap(grad(lambda p, x, c: (functional_call(module, p, (x,)) * c).sum()),
             in_dims=(None, 0, 0))
    return lambda: f(params, x, c)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--reps", type=int, default=9)
    args = ap.parse_args()
    threads = set_threads(args.threads, onednn=False)
    torch.set_num_threads(threads)
    print(f"{machine()}, {threads} threads, batch {args.batch}")
    for name, (make, shape) in LAYERS.items():
        torch.manual_seed(0)
        ref = make()
        ours = pnn.convert(make())
        ours.load_state_dict(ref.state_dict())
        x = torch.randn(args.batch, *shape)
        c = torch.randn_like(vmap(ref)(x))
        sides = {"torch": per_sample(ref, x, c), "ours": per_sample(ours, x, c)}
        want, got = sides["torch"](), sides["ours"]()
        assert all(torch.allclose(got[k], want[k], rtol=1e-4, atol=1e-4) for k in want), name
        report_sides(f"{name}, per-sample gradients", sides, {}, args.reps, "torch")


if __name__ == "__main__":
    main()
