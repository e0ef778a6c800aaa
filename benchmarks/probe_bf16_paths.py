"""Probe (issue 17): the bf16 functional forwards' paths that read w in place
against the blocked ones, on bf16 arrays, each side timed interleaved in one
process (rotated rounds, medians, paired ratios over the layer's plan):

    python -m benchmarks.probe_bf16_paths [--threads T] [--reps 7] [--parts conv,fc,fc_plain]

conv: res4a_branch2c (1x1; conv.pointwise_pairs: x's rows in VNNI pairs, w in
place) and res5a_branch2b (conv.columns: im2col tiles, w in place), N =
threads, against the blocked path's steps as conv.forward makes them where
those rules say no (x and w blocked, w in VNNI pairs where the kernel path
wants them, y stored into NCHW by the plan) and the same with w's copy kept.
fc: square_1k and square_4k (N 256; fc's t path where fc.small_batch: W in
place, x^T's tiles in VNNI pairs) against the tiles path's steps (W^T's tiles
in pairs, x read in place, y stored in bf16 by the plan). Speeds only: no
result is checked (tests/test_conv_bf16.py, tests/test_sweep_fc.py do).
fc_plain: fc.forward's tiles path with W^T's tiles kept, its plan on plain x
and y against the layer's on blocked ones (with the copies around it)."""
import argparse

import numpy as np

import brgemm
from benchmarks.common import report_sides as report, set_threads
from brgemm.im2col import image_to_columns
from brgemm.info import kernel_path
from brgemm.layouts import to_blocks
from brgemm.vnni import vnni_tiles
from primitives import conv, fc
from primitives.conv_plans import vnni_passes
from primitives.fc_plans import plan as fc_plan
from primitives.fc_plans import vnni_passes as fc_vnni_passes

BF16 = brgemm.bfloat16


def _conv(rng, threads, reps):
    for name, (C, K, H, W, R, pad) in (("res4a_branch2c", (256, 1024, 14, 14, 1, 0)),
                                       ("res5a_branch2b", (512, 512, 7, 7, 3, 1))):
        N = threads
        x = rng.standard_normal((N, C, H, W)).astype(BF16)
        w = rng.standard_normal((K, C, R, R)).astype(BF16)
        g = conv.geometry(N, C, K, H, W, R, R, (1, 1), (pad, pad), path=kernel_path("bf16"))
        v = "fwd" in vnni_passes(g, "bf16", "cpu")
        xb, wb = conv.block_x(x, g, "bf16"), conv.block_w(w, g, "bf16", vnni=v)
        yb = np.empty((N, g.Kb, g.P, g.Q, g.bk), np.float32)
        layer, pn = conv.plan(g, "fwd", "bf16", v), conv.nchw_plan(g, "bf16", v, True)
        slots, y = np.empty(pn.extent["y"], np.float32), np.empty((N, K, g.P, g.Q), BF16)

        def blocked(kept=False):
            conv.block_x(x, g, "bf16", out=xb)
            if not kept:
                conv.block_w(w, g, "bf16", vnni=v, out=wb)
            pn.run(x=xb, w=wb, y=slots, out=y)
        sides = {"layer": lambda: layer.run(x=xb, w=wb, y=yb),
                 "conv.forward": lambda: conv.forward(x, w, 1, pad, dtype="bf16"),
                 "blocked, NCHW stores": blocked,
                 "the same, w kept": lambda: blocked(True)}
        blocks = conv.columns(g, "bf16", "cpu")
        if blocks:  # conv.columns' steps, whether the rule takes them or not
            (bd, bp), cv = blocks, conv.columns_vnni(g, "bf16", "cpu", blocks[0])
            pc, PQ = conv.columns_plan(g, "bf16", bd, bp, vnni=cv), g.P * g.Q
            xc = image_to_columns(x, (R, R), (1, 1), (pad, pad), bd, bp)
            xv, yc = np.empty_like(xc), np.empty((K, N * PQ), np.float32)

            def columns():
                image_to_columns(x, (R, R), (1, 1), (pad, pad), bd, bp, out=xc)
                pc.run(w=w, xc=vnni_tiles(xc, out=xv) if cv else xc, yc=yc)
                to_blocks(yc, K, PQ, swap_grid=True, dtype=BF16, out=y.reshape(N, 1, K, PQ))
            sides["conv.columns' steps"] = columns
        report(f"{name} bf16 forward, N = {N}, {threads} threads", sides, {}, reps, "layer")


def _fc(rng, threads, reps):
    for name, (N, C, K) in (("square_1k", (256, 1024, 1024)), ("square_4k", (256, 4096, 4096))):
        x, w = rng.standard_normal((N, C)).astype(BF16), rng.standard_normal((K, C)).astype(BF16)
        b = rng.standard_normal(K).astype(np.float32)
        lin = fc.Linear(C, K, dtype="bf16", rng=rng)
        gl = lin.prepare(N)
        xb = to_blocks(x, gl.bn, gl.bc)
        g = fc.geometry(N, C, K, path=kernel_path("bf16"))
        v = "fwd" in fc_vnni_passes(g, "bf16", "cpu", plain=True)
        pt = fc.plan_t(g, has_bias=True, dtype="bf16", vnni=v)
        pp = fc_plan(g, "fwd", "bf16", has_bias=True, plain=True, vnni=v, bf16_out=True)
        xt = np.empty((g.Cb, g.Nb, g.bc, g.bn), BF16)
        yt, y32 = np.empty((g.Kb, g.Nb, g.bk, g.bn), np.float32), np.empty((N, K), np.float32)
        wt, y = np.empty((g.Kb, g.Cb, g.bc, g.bk), BF16), np.empty((N, K), BF16)

        def t_path():
            to_blocks(x, g.bc, g.bn, transpose=True, vnni=v, out=xt)
            pt.run(w=w, xt=xt, yt=yt, y=y, b=b)

        def tiles_path():
            to_blocks(w, g.bc, g.bk, transpose=True, swap_grid=True, vnni=v, out=wt)
            pp.run(x=x, w=wt, y=y32, y16=y, b=b)
        report(f"{name} bf16 forward, {threads} threads (small_batch: {fc.small_batch(g)})",
               {"layer": lambda: lin.forward_blocked(xb),
                "fc.forward": lambda: fc.forward(x, w, b, dtype="bf16"),
                "t path's steps": t_path, "tiles path's steps": tiles_path}, {}, reps, "layer")


def _fc_plain(rng, threads, reps):
    """fc.forward's tiles path on AMX, W^T's tiles kept: its plan on the
    caller's x and bf16 y (rows C and K apart; the f32 results in tiles, as
    fc_plans.plan keeps them where it stores bf16) against the layer's plan
    on blocked x and y, with and without the copies of x into tiles and of y
    out of them around it, and the plain plan without its bias or its bf16
    stores (f32 y in rows K apart): which of plain rows, the bias or the
    stores cost the plain plan its time."""
    from brgemm.layouts import from_blocks
    for name, (N, C, K) in (("square_1k", (256, 1024, 1024)), ("square_1k_n1k", (1024, 1024, 1024))):
        x, w = rng.standard_normal((N, C)).astype(BF16), rng.standard_normal((K, C)).astype(BF16)
        b = rng.standard_normal(K).astype(np.float32)
        g = fc.geometry(N, C, K, path=kernel_path("bf16"))
        v = "fwd" in fc_vnni_passes(g, "bf16", "cpu", plain=True)
        wt = to_blocks(w, g.bc, g.bk, transpose=True, swap_grid=True, vnni=v)
        y32, y = np.empty((N, K), np.float32), np.empty((N, K), BF16)
        xb = to_blocks(x, g.bn, g.bc)
        yb, yb16 = (np.empty((g.Nb, g.Kb, g.bn, g.bk), d) for d in (np.float32, BF16))
        layer = fc_plan(g, "fwd", "bf16", has_bias=True, bf16_out=True, vnni=v)
        plain = fc_plan(g, "fwd", "bf16", has_bias=True, plain=True, vnni=v, bf16_out=True)
        bare = fc_plan(g, "fwd", "bf16", plain=True, vnni=v)
        ys = np.empty(plain.extent["y"], np.float32)

        def blocked():
            to_blocks(x, g.bn, g.bc, out=xb)
            layer.run(x=xb, w=wt, y=yb, y16=yb16, b=b)
            from_blocks(yb16, N, K, out=y)
        report(f"{name} bf16 forward, W^T's tiles kept, {threads} threads, spec {g.specs[0]}, "
               f"blocks {g.bn} {g.bc} {g.bk}",
               {"layer plan (x, y blocked)": lambda: layer.run(x=xb, w=wt, y=yb, y16=yb16, b=b),
                "plain plan (as fc.forward)": lambda: plain.run(x=x, w=wt, y=ys, y16=y, b=b),
                "plain plan, no bias, f32 y": lambda: bare.run(x=x, w=wt, y=y32),
                "x into tiles, layer plan, y out": blocked,
                "x into tiles alone": lambda: to_blocks(x, g.bn, g.bc, out=xb),
                "y out of tiles alone": lambda: from_blocks(yb16, N, K, out=y)},
               {}, reps, "layer plan (x, y blocked)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--parts", default="conv,fc")
    args = parser.parse_args()
    threads = set_threads(args.threads, onednn=False)
    rng = np.random.default_rng()
    for part in args.parts.split(","):
        {"conv": _conv, "fc": _fc, "fc_plain": _fc_plain}[part](rng, threads, args.reps)


if __name__ == "__main__":
    main()
