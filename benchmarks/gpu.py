"""The CUDA backend against PyTorch (cuBLAS, cuDNN) in the same run, on the same GPU.

    python -m benchmarks.gpu [--quick] [--what gemm,fc,fcgemm,conv,lstm] [--dtypes bf16,f32]

Ours: a recorded plan replayed on PyTorch device tensors (DLPack, no copies),
every tensor of the plan's size filled with random data. Both sides are
captured in a CUDA graph and replayed, so neither pays Python or launch
overhead; time per replay is the median of 5 batches of CUDA-event-timed
replays. Layout conversions are not timed (ours reads blocked layouts, as
the layer classes keep them). GEMM checks its result against torch first.
"""
import argparse
import dataclasses
import statistics

import numpy as np
import torch
import torch.nn.functional as F

import brgemm
from benchmarks.common import read_shapes
from brgemm.machine import (cuda_has_tensor_cores, cuda_launch_settings, cuda_launches,
                            cuda_max_clusters, device_name, unavailable_reason)
from brgemm.recorder import Recorder
from primitives import fc, gemm


class Graph:
    """fn() captured `inner` times over in one CUDA graph (after two warm-up
    calls on a side stream); batch(outer) replays it `outer` times between
    two CUDA events and gives milliseconds per call of fn. inner 1 is a graph
    launch per call, which the host may not issue as fast as the GPU runs a
    few-microsecond kernel; inner > 1 runs the calls back to back on the GPU."""

    def __init__(self, fn, inner):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        self.graph, self.inner = torch.cuda.CUDAGraph(), inner
        with torch.cuda.graph(self.graph):
            for _ in range(inner):
                fn()
        self.graph.replay()

    def batch(self, outer):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(outer):
            self.graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / (outer * self.inner)


def spread(times):
    """(max - min) / median of repeated timings."""
    return (max(times) - min(times)) / statistics.median(times)


def graph_time(fn, reps, inner=1, batches=9):
    """Milliseconds per call of fn from a CUDA graph: the median of `batches`
    batches of `reps` replays, and the batches' spread."""
    g = Graph(fn, inner)
    times = [g.batch(reps) for _ in range(batches)]
    return statistics.median(times), spread(times)


def plain_time(fn, reps):
    """graph_time's numbers without a graph (each call launched from Python)."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / reps)
    med = statistics.median(times)
    return med, (max(times) - min(times)) / med


# the two ways of timing a pass: (graph calls per replay, replays per batch)
MODES = {"replay": (1, 40), "in-graph": (20, 4)}


def paired_time(ours_fn, theirs_fn, mode, rounds=9):
    """Ours and theirs in alternating batches (clock and neighbour drift hit
    both alike): the medians of their per-call times, their spreads, and the
    median of the rounds' ratios (theirs / ours)."""
    inner, outer = MODES[mode]
    graphs = Graph(ours_fn, inner), Graph(theirs_fn, inner)
    ours, theirs = [], []
    for _ in range(rounds):
        ours.append(graphs[0].batch(outer))
        theirs.append(graphs[1].batch(outer))
    ratio = statistics.median(t / o for o, t in zip(ours, theirs))
    return statistics.median(ours), statistics.median(theirs), spread(ours), spread(theirs), ratio


def plan_tensors(plan):
    """Random device tensors for every tensor of a plan, of the size it touches."""
    out = {}
    for name, dt in plan.tensors.items():
        t = torch.randn(max(plan.extent[name], 1), device="cuda")
        out[name] = t.bfloat16() if dt == "bf16" else t
    return out


def replay(plan, tensors):
    return lambda: plan.run(backend="cuda", **tensors)


def tflops(flops, ms):
    return flops / ms / 1e9


def row(name, flops, ours, theirs, spread, what, ratio=None):
    ratio = theirs / ours if ratio is None else ratio
    print(f"{name:<26}{tflops(flops, ours):>9.1f}{tflops(flops, theirs):>9.1f}"
          f"{ratio:>9.2f}{ours * 1e3:>10.1f}{theirs * 1e3:>10.1f}{spread:>8.2f}  {what}")


HEAD = (f"{'shape':<26}{'ours TF':>9}{'torch TF':>9}{'ratio':>9}{'ours us':>10}{'torch us':>10}"
        f"{'spread':>8}  torch side")


def paired_row(name, flops, ours_fn, theirs_fn, mode, what):
    """One row timed by paired_time; spread: ours' / torch's."""
    ours, theirs, s_ours, s_theirs, ratio = paired_time(ours_fn, theirs_fn, mode)
    row(name, flops, ours, theirs, s_ours, f"{what}; spread torch {s_theirs:.2f}", ratio)
    return ratio


def run_gemm(quick, dtypes, skip_tma=False):
    """GEMM-shaped plans: C = A @ B as 128 x 256 blocks (f32: 128 x 128), the
    whole K in one call."""
    print(f"\nGEMM plans on {device_name('cuda')} (ours: f32 C; torch: C in the input dtype); "
          "9 alternating rounds of 40 graph replays, medians")
    print(HEAD)
    shapes = [(4096, 4096, 4096), (8192, 8192, 8192)] if not quick else [(4096, 4096, 4096)]
    for dtype, (M, N, K), bn in [(d, s, bn) for d in dtypes for s in shapes
                                 for bn in ((256,) if d == "bf16" else (128,))]:
        if dtype == "f32" and M > 4096:
            continue
        cfg = {"fwd": {"spec": "IJk", "bm": 128, "bn": bn, "bk": 64, "kc": K}}
        p = gemm.plan(M, N, K, dtype, cfg)
        tdt = torch.bfloat16 if dtype == "bf16" else torch.float32
        A, B = torch.randn(M, K, device="cuda").to(tdt), torch.randn(K, N, device="cuda").to(tdt)
        C = torch.empty(M, N, device="cuda")
        p.run(backend="cuda", A=A, B=B, C=C)
        ref = torch.matmul(A.float(), B.float())
        err = ((C - ref).abs().max() / ref.abs().max()).item()
        assert err < 1e-4, f"gemm {M}x{N}x{K} {dtype}: relative error {err:.2e}"
        ours_fn, theirs_fn = replay(p, dict(A=A, B=B, C=C)), lambda: torch.matmul(A, B)
        paired_row(f"{M}x{N}x{K} {dtype}", 2 * M * N * K, ours_fn, theirs_fn, "replay",
                   f"torch.matmul; ours blocks 128 x {bn}; launch {cuda_launches(p)}")
        reps = 20 if M <= 4096 else 5  # the earlier method: each side alone, 5 batches
        ours, s_ours = graph_time(ours_fn, reps, batches=5)
        theirs, s_theirs = graph_time(theirs_fn, reps, batches=5)
        print(f"  each side alone (5 batches of {reps}): ours {ours * 1e3:.1f} us (spread "
              f"{s_ours:.2f}), torch {theirs * 1e3:.1f} us ({s_theirs:.2f}), {theirs / ours:.2f}")
        if dtype == "bf16":  # the same plan on 128 x 128 tiles (GEMM_TILES)
            for name, kw in GEMM_TILES[:1 if skip_tma else 3]:
                with cuda_launch_settings(wide_tiles=False, **kw):
                    C.fill_(float("nan"))
                    p.run(backend="cuda", A=A, B=B, C=C)
                    err = ((C - ref).abs().max() / ref.abs().max()).item()
                    t, sp = graph_time(replay(p, dict(A=A, B=B, C=C)), reps, batches=5)
                    print(f"  {name} [{launch_text(p)}]: {t * 1e3:.1f} us (spread {sp:.2f}), "
                          f"{theirs / t:.2f} of torch alone, error {err:.1e}")


# the FC blocks tried per shape and pass, best kept: (bn, bc, bk)
FC_BLOCKS = [(64, 64, 64), (64, 64, 128), (128, 64, 128), (64, 128, 128), (128, 128, 128),
             (128, 128, 256)]
# launches timed on the library's blocks of each bf16 pass besides its default:
# the TMA path not persistent; with --variants also the
# launch before the small-problem path, no kernel index in the launch
# argument, no programmatic launch (none in clusters), and the small-problem
# path forced to (tile rows, columns, cluster, entry)
TMA = {"tma_loads": True, "tma_persistent": False}
TMA_PERSISTENT = {"tma_loads": True, "tma_persistent": True}
VARIANTS = [("tma not persistent", TMA)]
OLD_VARIANTS = [("before", {"split_tiles": False}), ("no uniform", {"uniform_args": False}),
                ("no PDL", {"programmatic_launch": False}),
                ("no clustered PDL", {"clustered_pdl": False})]
# the launches timed against torch in paired rounds besides the default (in-graph;
# the default has TMA loads, TMA in clusters and vectorized stores on, and the
# small-problem path on TMA by its model): cp.async; launches that deal tiles
# over blocks on cp.async, the small path by its cp.async model (as before)
PAIRED = [("cp.async", {"tma_loads": False}), ("tma_parts off", {"tma_parts": False})]
# the GEMM plans also on 128 x 128 tiles: cp.async, then TMA
GEMM_TILES = [("128x128 cp.async", {"tma_loads": False}), ("128x128 tma", TMA),
              ("128x128 tma persistent", TMA_PERSISTENT)]
FORCED = [
    (f"{tm}x{tn} c{size} {entry}", {"split_tiles": (tm, tn, size, entry)})
    for tm, tn, size, entry in ((64, 64, 1, "tc"), (64, 64, 1, "tc_small"), (64, 64, 2, "tc_small"),
                                (64, 64, 4, "tc_small"), (64, 64, 2, "tc_split"),
                                (64, 128, 1, "tc"), (64, 128, 2, "tc_small"),
                                (128, 64, 1, "tc"), (128, 64, 2, "tc_split"),
                                (128, 128, 2, "tc_split"))]


def launch_text(p):
    """The phases' launches: tasks, entry, cluster, parts, tile."""
    tables = p.replay("cuda").tables
    return "; ".join(f"{tasks} tasks {ln.entry} c{ln.cluster} x{ln.parts} {ln.tile[0]}x{ln.tile[1]}"
                     for (tasks, _, _), ln in zip(cuda_launches(p), tables.launch_details(True)))


def in_graph(fn):
    inner, outer = MODES["in-graph"]
    return graph_time(fn, outer, inner, batches=5)[0]


def run_fc(quick, dtypes, blocks=False, forced=False, skip_tma=False):
    """Per shape and pass: the library's own blocks (fc.toml's "cuda" tables,
    what fc.Linear on "cuda" takes) against torch, timed both ways; then the
    best of FC_BLOCKS (benchmark-side tuning, shown for comparison; with
    `blocks`) and, for bf16, the other launches of the library's blocks."""
    print(f"\nFC layers (blocked layouts), the library's blocks (fc.toml \"cuda\"); ratio: median "
          "of 9 alternating rounds; replay: a graph launch per call; in-graph: 20 calls per graph")
    print(HEAD)
    shapes = read_shapes("fc_sizes")[:2] if quick else read_shapes("fc_sizes")
    for dtype in dtypes:
        tdt = torch.bfloat16 if dtype == "bf16" else torch.float32
        for (N, C, K), name in shapes:
            x, w = torch.randn(N, C, device="cuda").to(tdt), torch.randn(K, C, device="cuda").to(tdt)
            dy = torch.randn(N, K, device="cuda").to(tdt)
            theirs_fn = {"fwd": lambda: F.linear(x, w), "bwd": lambda: dy @ w,
                         "upd": lambda: dy.t() @ x}
            theirs_name = {"fwd": "F.linear", "bwd": "dy @ w", "upd": "dy.t() @ x"}
            for pass_ in ("fwd", "bwd", "upd"):
                g = fc.geometry(N, C, K, path="cuda")
                p = fc.plan(g, pass_, dtype)
                ours = replay(p, plan_tensors(p))
                flops, label = 2 * N * C * K, f"{name} {pass_} {dtype}"
                what = f"{theirs_name[pass_]}; blocks {(g.bn, g.bc, g.bk)}; {launch_text(p)}"
                for mode in MODES:
                    paired_row(f"{label} {mode[:2]}", flops, ours, theirs_fn[pass_], mode, what)
                for vname, kw in PAIRED if dtype == "bf16" and not skip_tma else ():
                    with cuda_launch_settings(**kw):
                        paired_row(f"{label} in {vname}", flops, ours, theirs_fn[pass_],
                                   "in-graph", f"{theirs_name[pass_]}; {launch_text(p)}")
                if blocks:
                    best_blocks(N, C, K, pass_, dtype, theirs_fn[pass_])
                if dtype == "bf16":
                    times = []
                    for vname, kw in VARIANTS + (OLD_VARIANTS + FORCED if forced else []):
                        if skip_tma and kw.get("tma_loads"):
                            continue
                        with cuda_launch_settings(**kw):
                            shape = launch_text(p)
                            if vname[0].isdigit() and shape == launch_text_default(p):
                                continue  # the small path does not apply
                            times.append(f"{vname} [{shape}] {in_graph(ours) * 1e3:.1f}")
                    print("  launches (in-graph us): " + "; ".join(times))


def best_blocks(N, C, K, pass_, dtype, theirs_fn):
    """The best of FC_BLOCKS for one pass (in-graph), against torch."""
    tried = []
    for blocks in FC_BLOCKS[:3] if dtype == "f32" else FC_BLOCKS:
        q = fc.plan(fc.geometry(N, C, K, blocks=blocks, path="cuda"), pass_, dtype)
        tried.append((in_graph(replay(q, plan_tensors(q))) * 1e3, blocks))
    theirs = in_graph(theirs_fn) * 1e3
    best = min(tried)
    print(f"  best blocks {best[1]}: {best[0]:.1f} us, torch {theirs:.1f} us, "
          f"{theirs / best[0]:.2f}; tried " + " ".join(
              f"{b[0]},{b[1]},{b[2]}:{t:.1f}" for t, b in tried))


def launch_text_default(p):
    with cuda_launch_settings(split_tiles=False):
        return launch_text(p)


def bf16_gemm_plan(M, N, K, bm, bn):
    """C[M,N] = A @ B as a GEMM-shaped plan (gemm.nest, spec IJk, the whole K
    in one call of 64-deep blocks) writing bf16 C, as torch.matmul does."""
    class BF16C:  # the nest's calls with a bf16 C
        def __init__(self, rec):
            self.rec = rec

        def at(self, phase, task):
            self.rec.at(phase, task)

        def gemm(self, blk, *args, **kw):
            self.rec.gemm(dataclasses.replace(blk, c_dtype="bf16"), *args, **kw)
    rec = Recorder({"A": "bf16", "B": "bf16", "C": "bf16"}, spec="IJk")
    gemm.nest(BF16C(rec), gemm.loops("IJk", M, N, K, bm, bn, K), M, N, K, bm, bn, 64, K, "bf16")
    return rec.finish()


def run_fc_gemm(quick, dtypes, skip_tma=False):
    """The FC shapes' three products as plain GEMM-shaped plans (row-major A
    [M,K], B [K,N], bf16 C, 128 x 128 blocks) against torch.matmul (bf16 C):
    fwd M,N,K = N,K,C; bwd N,C,K; upd K,C,N."""
    print("\nFC shapes as GEMM-shaped plans, bf16 C both sides (ours: 128 x 128 blocks); "
          "in-graph, 9 alternating rounds")
    print(HEAD)
    shapes = read_shapes("fc_sizes")[:2] if quick else read_shapes("fc_sizes")
    for (N, C, K), name in shapes:
        for pass_, (M, Nn, Kk) in (("fwd", (N, K, C)), ("bwd", (N, C, K)), ("upd", (K, C, N))):
            p = bf16_gemm_plan(M, Nn, Kk, 128, 128)
            A = torch.randn(M, Kk, device="cuda").bfloat16()
            B = torch.randn(Kk, Nn, device="cuda").bfloat16()
            Cm = torch.full((M, Nn), float("nan"), device="cuda").bfloat16()
            ref = torch.matmul(A.float(), B.float())
            for vname, kw in [("default", {})] + ([] if skip_tma else PAIRED):
                with cuda_launch_settings(**kw):
                    Cm.fill_(float("nan"))
                    p.run(backend="cuda", A=A, B=B, C=Cm)
                    err = ((Cm.float() - ref).abs().max() / ref.abs().max()).item()
                    assert err < 1e-2, f"{name} {pass_} {vname}: relative error {err:.2e}"
                    paired_row(f"{name} {pass_} {vname[:13]}", 2 * M * Nn * Kk,
                               replay(p, dict(A=A, B=B, C=Cm)), lambda: torch.matmul(A, B),
                               "in-graph", f"matmul {M}x{Nn}x{Kk}; {launch_text(p)}")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--what", default="gemm,fc,conv,lstm")
    parser.add_argument("--dtypes", default="bf16,f32")
    parser.add_argument("--blocks", action="store_true",
                        help="FC: also the best of FC_BLOCKS per pass")
    parser.add_argument("--variants", action="store_true",
                        help="FC: also OLD_VARIANTS and the small-problem path forced to each "
                             "of FORCED")
    parser.add_argument("--lstm-blocks", default="",
                        help="LSTM: also these (bn x bk) blocks, forward, e.g. 64x16,64x64")
    parser.add_argument("--skip-tma", action="store_true",
                        help="time no launch on the TMA path")
    args = parser.parse_args(argv)
    if "cuda" not in brgemm.backends():
        raise SystemExit(f"no CUDA backend here: {unavailable_reason('cuda')}")
    torch.backends.cuda.matmul.allow_tf32 = False  # f32 against f32, as ours computes
    torch.backends.cudnn.allow_tf32 = False
    print(f"{device_name('cuda')}, wgmma path: {cuda_has_tensor_cores()}, torch {torch.__version__}")
    if cuda_has_tensor_cores():
        print("clusters the GPU holds at once, by size (tc, tc_small):",
              {size: (cuda_max_clusters("tc_split", size), cuda_max_clusters("tc_small", size))
               for size in range(1, 9)})
    from benchmarks.gpu_layers import run_conv, run_lstm  # they time with this module's helpers
    for what in args.what.split(","):
        extra = {"blocks": args.blocks, "forced": args.variants} if what == "fc" else {}
        extra = {**extra, "skip_tma": args.skip_tma} if what in ("gemm", "fc", "fcgemm") else extra
        extra = {"lstm_blocks": args.lstm_blocks} if what == "lstm" else extra
        {"gemm": run_gemm, "fc": run_fc, "fcgemm": run_fc_gemm, "conv": run_conv,
         "lstm": run_lstm}[what](
            args.quick, args.dtypes.split(","), **extra)


if __name__ == "__main__":
    np.random.seed(0)
    main()
