"""The layout copies the functional forms make, alone: GB/s (bytes read plus
written) and speed-up over one thread, at each thread count asked for. Shapes:
a ResNet-50 3x3 layer's images and weights at N = 16, and FC/LSTM matrices."""
import time

import numpy as np

from brgemm import bfloat16
from brgemm import layouts as L
from benchmarks.common import machine
from primitives import conv


def _best(fn, reps=7):
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def run(threads=(1, 2, 16)):
    from benchmarks import CORES
    threads = [t for t in threads if t <= len(CORES)]
    rng = np.random.default_rng()
    N, C, K, H = 16, 256, 256, 14
    g = conv.geometry(N, C, K, H, H, 3, 3, (1, 1), (1, 1))
    x = rng.standard_normal((N, C, H, H)).astype(np.float32)
    w = rng.standard_normal((K, C, 3, 3)).astype(np.float32)
    xb = conv.block_x(x, g, "f32")
    dw = rng.standard_normal((2, g.Kb, g.Cb, 9, g.bk, g.bc)).astype(np.float32)  # 2 shares
    m = rng.standard_normal((4096, 4096)).astype(np.float32)
    cases = {  # name: (fn(threads), bytes moved)
        "image -> blocks (x)": (lambda t: L.image_to_blocks(x, g.bc, g.Hp, g.Wp, 1, 1, threads=t),
                                2 * x.nbytes),
        "image -> blocks, pixels last": (lambda t: L.image_to_blocks(x, g.bc, H, H, pixels_last=True,
                                                                     threads=t), 2 * x.nbytes),
        "image -> blocks, bf16": (lambda t: L.image_to_blocks(x, g.bc, g.Hp, g.Wp, 1, 1,
                                                              dtype=bfloat16, threads=t),
                                  1.5 * x.nbytes),
        "blocks -> image": (lambda t: L.blocks_to_image(xb, C, H, H, 1, 1, threads=t), 2 * x.nbytes),
        "conv weights -> tiles": (lambda t: L.taps_to_blocks(w, g.bk, g.bc, threads=t), 2 * w.nbytes),
        "conv weights -> W tiles": (lambda t: L.taps_to_blocks(w, g.bk, g.bc, True, threads=t),
                                    2 * w.nbytes),
        "dW shares -> plain": (lambda t: L.taps_from_blocks(dw, K, C, (3, 3), threads=t),
                               dw.nbytes + w.nbytes),
        "matrix -> tiles": (lambda t: L.to_blocks(m, 64, 64, threads=t), 2 * m.nbytes),
        "matrix^T -> tiles": (lambda t: L.to_blocks(m, 64, 64, transpose=True, threads=t),
                              2 * m.nbytes),
        "f32 -> bf16": (lambda t: L.convert(m, bfloat16, threads=t), 1.5 * m.nbytes),
        "column sums": (lambda t: L.column_sums(m, threads=t), m.nbytes),
    }
    tiles = L.to_blocks(m, 64, 64)
    cases["tiles -> matrix"] = (lambda t: L.from_blocks(tiles, 4096, 4096, threads=t), 2 * m.nbytes)
    print(f"layout copies, {machine()}: GB/s (read + written), best of 7; speed-up over "
          f"{threads[0]} thread(s)")
    head = f"{'copy':<30}" + "".join(f"{f'{t} thr':>10}" for t in threads) + f"{'speed-up':>10}"
    print(head + "\n" + "-" * len(head))
    for name, (fn, nbytes) in cases.items():
        rates = [nbytes / _best(lambda: fn(t)) * 1e-9 for t in threads]
        print(f"{name:<30}" + "".join(f"{r:>10.1f}" for r in rates) + f"{rates[-1] / rates[0]:>10.1f}",
              flush=True)
