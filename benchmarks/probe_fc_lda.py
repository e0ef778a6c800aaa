"""Probe (issue 17): fc.forward's plain plan on rows 4 KiB apart (C = 1024)
against rows 4160 B apart (C = 1040), same blocking (square_1k's table: N
256, K 1024, bn 128, bc 128, bk 64, chunk 4, KNc), each against the layer
plan (fc.Linear on blocked x) of its own shape: whether set conflicts of
power-of-two row strides cost the functional form (W^T's tiles kept:
reuse=, and copied per call).

    python -m benchmarks.probe_fc_lda [--threads T] [--reps 15]"""
import argparse
import statistics

import numpy as np

from benchmarks.common import interleaved_samples, paired_ratio, set_threads
from brgemm.layouts import to_blocks
from primitives import fc, reuse


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int)
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    threads = set_threads(args.threads, onednn=False)
    cfg = {"fwd": {"spec": "KNc", "bn": 128, "bc": 128, "bk": 64, "chunk": 4}}
    rng = np.random.default_rng(0)
    sides, names = [], []
    for C in (1024, 1040):
        N, K = 256, 1024
        lin = fc.Linear(C, K, rng=rng, config=cfg)
        g = lin.prepare(N)
        x = rng.standard_normal((N, C)).astype(np.float32)
        xb, key = to_blocks(x, g.bn, g.bc), reuse.Key(("probe_fc_lda", C))
        sides += [lambda lin=lin, xb=xb: lin.forward_blocked(xb),
                  lambda x=x, lin=lin, key=key: fc.forward(x, lin.weight, lin.bias, reuse=key,
                                                           config=cfg),
                  lambda x=x, lin=lin: fc.forward(x, lin.weight, lin.bias, config=cfg)]
        names += [f"C {C} layer", f"C {C} kept", f"C {C} func"]
    s = interleaved_samples(sides, reps=args.reps, rotate=True)
    print(f"fc N 256 K 1024, {threads} threads, {args.reps} rotated rounds: ms, over its layer")
    for i, name in enumerate(names):
        base = s[i - i % 3]
        print(f"  {name:<16}{1e3 * statistics.median(s[i]):9.3f}{paired_ratio(s[i], base):8.3f}")


if __name__ == "__main__":
    main()
