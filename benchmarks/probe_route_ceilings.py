"""Probe (issue 17): how close to the layer path any functional forward can
come on small images, route by route. The functional contract hands the
forward x as NCHW and w as K x C R S, fresh on every call; the kernel's
vectors run along one dimension of its output, and the output must end up
NCHW. Two orientations are left on layers whose weights outweigh their
images (conv.columns' rule: 7 x 7 outputs with many channels):

- pixel vectors (conv.columns' forward: w read in place as the broadcast
  operand, x's im2col tiles as the vector operand): no copy of w, but N P Q
  output pixels fill ceil(N P Q / 16) vectors, lanes left empty where 16
  does not divide N P Q (98 pixels at N = 2: 7 vectors for 6.125);
- channel vectors (the layer's orientation: full vectors of output
  channels): w must be transposed into tiles, here in the plan itself, tile
  by tile just before its calls read it (fc's plan_copying on the im2col
  matrix, y^T = x_cols^T w^T).

Per layer where the rule allows conv.columns at N = threads, all in the same
rotated rounds: the layer path's forward plan on blocked tensors made before
(the main job's "ours"), conv.forward on the plain arrays (the main job's
"func"), and each orientation's plan ALONE on operands made before (im2col
tiles, or the im2col matrix transposed): neither the im2col copy nor y's
transposition into NCHW is timed, so each plan's layer/plan is a ceiling on
what a functional forward taking that orientation can reach. Then, for the
pixel route, im2col alone and im2col followed by the plan ("chain"): the
chain's excess over the two alone is what the plan pays for reading tiles
another core has just written, and im2col for overwriting tiles the other
cores have read.

The backward (--pass bwd) likewise, on the layers where conv.backward takes
conv.columns for both passes (R S > 1): the layer path's backward-data and
update plans, conv.backward, conv.columns' two plans alone on operands made
before ("plans": dx^c = dy^T w and dW = dy x^c^T, both with full vectors
along C R S; backward-data on w in place or, where the config's
columns_copies_w says so, as fc's copying plan, as the call makes it), and all of conv.backward's steps one after the other
("chain": dy^T, the data plan, dx^c summed into dx, x's transposed im2col
tiles, the update plan on dy in place).

    python -m benchmarks.probe_route_ceilings [--threads T] [--reps 9] [--pass fwd|bwd]
        [--widths 32,48,64]

--widths (bwd): after each layer's line, its backward-data and update plans
alone at each of these widths along C R S (the tiles' bd; the library's are
conv.COLUMNS_DATA_WIDTH and conv.COLUMNS_UPDATE_WIDTH), beside the layer
path's two plans alone, and backward-data as fc's copying plan (w's tiles
copied by the plan as its calls need them: conv.columns_data_copying, what
the config's columns_copies_w picks), ms medians of the same rotated rounds.

Columns: ms medians; func/layer, the ceilings layer/plan (paired per round;
> 1 would be faster than the layer), the pixel route's lane use (fwd).
Speeds only: conv.columns is checked in tests/test_conv_columns.py, and
the forward's plans here against float64 once before timing."""
import argparse
import statistics

import numpy as np

from benchmarks.common import interleaved_samples, machine, paired_ratio, read_shapes, set_threads
from benchmarks.conv import layer as conv_layer
from benchmarks.conv import layer_backward
from benchmarks.stages import columns_backward_steps
from brgemm.arrays import aligned_empty
from brgemm.im2col import image_to_columns
from brgemm.info import kernel_path
from brgemm.layouts import from_blocks, nblocks, pick_block
from primitives import conv, fc


def _orientations(x, w, g):
    """The forward's runs on operands made here: the pixel-vector plan, the
    channel-vector plan, im2col alone, and im2col then the pixel-vector plan
    (the chain); both plans' results checked against float64 first."""
    (bd, bp), CRS, NPQ = conv.columns(g, "f32", "cpu"), g.C * g.R * g.S, g.N * g.P * g.Q
    taps = ((g.R, g.S), (g.sh, g.sw), (g.ph, g.pw))
    xc = image_to_columns(x, *taps, bd, bp)  # the pixel route's tiles
    xct = np.ascontiguousarray(image_to_columns(x, *taps, CRS, NPQ)[0, 0].T)  # [N P Q][C R S]
    w2 = w.reshape(g.K, CRS)
    pix = conv.columns_plan(g, "f32", bd, bp)
    yc = np.empty((g.K, NPQ), np.float32)
    gf = fc.geometry(NPQ, CRS, g.K, path=kernel_path("f32"))
    chan = fc.plan_copying(gf, "fwd")
    yt = np.empty((NPQ, g.K), np.float32)
    wt = np.empty(chan.extent["wt"], np.float32)
    runs = (lambda: pix.run(w=w2, xc=xc, yc=yc), lambda: chan.run(x=xct, w=w2, y=yt, wt=wt),
            lambda: image_to_columns(x, *taps, bd, bp, out=xc))
    for run in runs[:2]:
        run()
    ref = w2.astype(np.float64) @ xct.T.astype(np.float64)  # [K][N P Q]
    scale = np.abs(w2).astype(np.float64) @ np.abs(xct.T).astype(np.float64)
    for name, got in (("pixel vectors", yc), ("channel vectors", yt.T)):
        err = np.max(np.abs(got - ref) / (scale + 1e-30))
        if err > 1e-5:
            raise SystemExit(f"{name}: result off by {err:.1e} of sum |w||x|")
    return runs + (lambda: (runs[2](), runs[0]()),)


def _backward(dy, x, w, g):
    """conv.backward's columns steps on operands made here
    (benchmarks.stages.columns_backward_steps): (the two plans alone, all
    steps in the call's order)."""
    steps = [fn for _, fn in columns_backward_steps(x, w, dy, g, np.empty_like(x))]
    for step in steps:
        step()
    return (lambda: (steps[1](), steps[4]()),
            lambda: [step() for step in steps])


def _widths(dy, x, w, g, t, plans, widths, reps):
    """The backward's two columns plans alone at each width along C R S, and
    the layer path's backward-data and update plans alone (ms medians)."""
    cols, D, taps = g.N * g.P * g.Q, g.C * g.R * g.S, ((g.R, g.S), (g.sh, g.sw), (g.ph, g.pw))
    bp = conv.columns_data_blocks(g)[1]  # the call's pixel blocks; widths vary below
    dy4 = dy.reshape(g.N, 1, g.K, g.P * g.Q)  # dy^T as conv.backward makes it
    dyt = from_blocks(dy4, g.K, cols, transpose=True, swap_grid=True)
    # dW on a 64-byte line, as conv.backward's: the update streams it only there
    dxc, dw = np.empty((cols, D), np.float32), aligned_empty(w.shape, np.float32)
    sides = {"layer bwd": lambda: plans["bwd"].run(dyp=t["dyp"], wt=t["wt"], dx=t["dx"]),
             "layer upd": lambda: plans["upd"].run(dw=t["dw"], **t["upd"])}
    for width in widths:
        bd = pick_block(D, width, 16)
        data = conv.columns_plan(g, "f32", bd, bp, "bwd")
        upd = conv.columns_plan(g, "f32", bd, g.P * g.Q, "upd")
        xct = image_to_columns(x, *taps, bd, g.P * g.Q, transposed=True)
        sides[f"data {bd}"] = lambda data=data: data.run(dyt=dyt, w=w, dxc=dxc)
        sides[f"upd {bd}"] = lambda upd=upd, xct=xct: upd.run(dy=dy, xct=xct, dw=dw)
    copying = conv.columns_data_copying(g)  # dx^c = dy^T w as fc's backward-data
    wt = np.empty(copying.extent["wt"], np.float32)
    sides["data copying"] = lambda: copying.run(dy=dyt, w=w.reshape(g.K, D), wt=wt, dx=dxc)
    s = interleaved_samples(list(sides.values()), reps=reps, rotate=True)
    print("    plans alone, ms: " + ", ".join(f"{k} {1e3 * statistics.median(v):.3f}"
                                          for k, v in zip(sides, s)), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--pass", dest="pass_", choices=("fwd", "bwd"), default="fwd")
    ap.add_argument("--widths", type=lambda v: [int(w) for w in v.split(",")], default=[])
    args = ap.parse_args()
    threads = set_threads(args.threads, onednn=False)
    rng = np.random.default_rng()
    fwd = args.pass_ == "fwd"
    print(f"route ceilings of the functional {'forward' if fwd else 'backward'}, f32, N = "
          f"{threads} threads, {machine()}; {args.reps} rotated rounds, ms medians, ratios paired")
    head = (f"{'layer':<17}{'layer':>8}{'func':>8}"
            + (f"{'pixels':>8}{'chans':>8}{'im2col':>8}{'chain':>8}{'func/lay':>10}{'lay/pix':>9}"
               f"{'lay/chan':>9}{'lanes':>7}" if fwd else
               f"{'plans':>8}{'chain':>8}{'func/lay':>10}{'lay/plans':>10}{'lay/chain':>10}"))
    print(head + "\n" + "-" * len(head))
    for (C, K, H, W, R, S, st, pd), name in read_shapes("resnet50_conv"):
        g = conv.geometry(threads, C, K, H, W, R, S, (st, st), (pd, pd))
        if not conv.columns(g, "f32", "cpu", args.pass_) or (not fwd and R * S == 1):
            continue  # the rule rules conv.columns out (its backward-data: R S > 1 too)
        x, w, dy, g, vnni, t = conv_layer(rng, threads, C, K, H, W, R, S, st, pd, "f32",
                                          np.float32)
        plans = {p: conv.plan(g, p, "f32", p in vnni) for p in ("fwd", "bwd", "upd")}
        if fwd:
            sides = [lambda: plans["fwd"].run(x=t["x"], w=t["w"], y=t["y"]),
                     lambda: conv.forward(x, w, st, pd), *_orientations(x, w, g)]
        else:
            sides = [layer_backward(g, t, plans), lambda: conv.backward(dy, x, w, st, pd),
                     *_backward(dy, x, w, g)]
        s = interleaved_samples(sides, reps=args.reps, rotate=True)
        ms = "".join(f"{1e3 * statistics.median(v):8.3f}" for v in s)
        ratios = [paired_ratio(s[0], v) for v in s[1:]]
        if fwd:
            NPQ = g.N * g.P * g.Q
            print(f"{name:<17}{ms}{ratios[0]:10.2f}{ratios[1]:9.2f}{ratios[2]:9.2f}"
                  f"{NPQ / (16 * nblocks(NPQ, 16)):7.3f}", flush=True)
        else:
            print(f"{name:<17}{ms}{ratios[0]:10.2f}{ratios[1]:10.2f}{ratios[2]:10.2f}", flush=True)
            if args.widths:
                _widths(dy, x, w, g, t, plans, args.widths, args.reps)


if __name__ == "__main__":
    main()
