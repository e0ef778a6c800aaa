"""Probe (issue 17): whether the pages x lies in (4 KiB or 2 MiB: transparent
huge pages) move the forward's plans on the 3x3 layers, the layer's plan on
blocked x and the NCHW plan reading x in place (conv.reads_x_nchw), N =
threads; each array copied into anonymous memory madvised MADV_NOHUGEPAGE
or MADV_HUGEPAGE (and touched), beside NumPy's own allocation (NumPy
madvises large arrays for huge pages where the kernel lets it). Prints the
host's THP settings and AnonHugePages. Sides timed interleaved (rotated
rounds, paired ratios over the layer plan on NumPy's memory).

    python -m benchmarks.probe_pages [--threads T] [--reps 9] [--shapes ...]"""
import argparse
import mmap

import numpy as np

from benchmarks.common import quick_shapes, report_sides as report, set_threads
from brgemm.arrays import aligned_empty
from brgemm.info import kernel_path
from primitives import conv


def paged(a, huge):
    """a copied into fresh anonymous memory madvised for (or against) huge pages."""
    m = mmap.mmap(-1, a.nbytes + (2 << 20))
    m.madvise(mmap.MADV_HUGEPAGE if huge else mmap.MADV_NOHUGEPAGE)
    buf = np.frombuffer(m, np.uint8)
    off = (-buf.ctypes.data) % (2 << 20)  # start on a 2 MiB boundary
    out = buf[off:off + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def meminfo():
    for line in open("/proc/meminfo"):
        if line.startswith("AnonHugePages"):
            return line.split(":")[1].strip()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int)
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--shapes", default="res2a_branch2b,res3a_branch2b")
    args = parser.parse_args()
    for f in ("enabled", "defrag"):
        try:
            print(f"THP {f}:", open(f"/sys/kernel/mm/transparent_hugepage/{f}").read().strip())
        except OSError as e:
            print(f"THP {f}: {e}")
    print("AnonHugePages before:", meminfo())
    N = set_threads(args.threads, onednn=False)
    for (C, K, H, W, R, S, st, pd), name in quick_shapes("resnet50_conv", True,
                                                         tuple(args.shapes.split(","))):
        st, pd = (st, st), (pd, pd)
        rng = np.random.default_rng(0)
        x = rng.standard_normal((N, C, H, W)).astype(np.float32)
        w = (rng.standard_normal((K, C, R, S)) / np.sqrt(R * S * C)).astype(np.float32)
        g = conv.geometry(N, C, K, H, W, R, S, st, pd, path=kernel_path("f32"))
        xb, wb = conv.block_x(x, g, "f32"), conv.block_w(w, g, "f32")
        y = aligned_empty((g.N, g.Kb, g.P, g.Q, g.bk), np.float32)
        layer, px = conv.plan(g, "fwd", "f32"), conv.nchw_plan(g, "f32", False, x_nchw=True)
        out = np.empty((N, K, g.P, g.Q), np.float32)
        ys = aligned_empty((px.extent["y"],), np.float32)
        xb4, xbh, x4, xh = paged(xb, False), paged(xb, True), paged(x, False), paged(x, True)
        out4, y4 = paged(out, False), paged(y, False)
        print(f"{name}: AnonHugePages with the copies: {meminfo()}", flush=True)
        sides = {"layer plan": lambda: layer.run(x=xb, w=wb, y=y),
                 "layer plan, x and y 4K pages": lambda: layer.run(x=xb4, w=wb, y=y4),
                 "layer plan, x huge pages": lambda: layer.run(x=xbh, w=wb, y=y),
                 "x in place": lambda: px.run(x=x, w=wb, out=out, y=ys),
                 "x in place, x and out 4K pages": lambda: px.run(x=x4, w=wb, out=out4, y=ys),
                 "x in place, x huge pages": lambda: px.run(x=xh, w=wb, out=out, y=ys)}
        report(f"{name} forward, N = {N}, {N} threads", sides, dict.fromkeys(sides, layer.flops),
               args.reps, "layer plan")


if __name__ == "__main__":
    main()
