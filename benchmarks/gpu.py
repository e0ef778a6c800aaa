"""The CUDA backend against PyTorch (cuBLAS, cuDNN) in the same run, on the same GPU.

    python -m benchmarks.gpu [--quick] [--what gemm,fc,conv,lstm] [--dtypes bf16,f32]

Ours: a recorded plan replayed on PyTorch device tensors (DLPack, no copies),
every tensor of the plan's size filled with random data. Both sides are
captured in a CUDA graph and replayed, so neither pays Python or launch
overhead; time per replay is the median of 5 batches of CUDA-event-timed
replays. Layout conversions are not timed (ours reads blocked layouts, as
the layer classes keep them). GEMM checks its result against torch first.
"""
import argparse
import statistics

import numpy as np
import torch
import torch.nn.functional as F

import brgemm
from benchmarks.common import read_shapes
from brgemm.machine import (cuda_has_tensor_cores, cuda_launch_settings, cuda_launches,
                            cuda_max_clusters, device_name, unavailable_reason)
from primitives import conv, fc, gemm, lstm


def graph_time(fn, reps):
    """Milliseconds per call of fn replayed from a CUDA graph (median of 5 batches)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / reps)
    return statistics.median(times), (max(times) - min(times)) / statistics.median(times)


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


def row(name, flops, ours, theirs, spread, what):
    print(f"{name:<26}{tflops(flops, ours):>9.1f}{tflops(flops, theirs):>9.1f}"
          f"{theirs / ours:>9.2f}{ours * 1e3:>10.1f}{theirs * 1e3:>10.1f}{spread:>8.2f}  {what}")


HEAD = (f"{'shape':<26}{'ours TF':>9}{'torch TF':>9}{'ratio':>9}{'ours us':>10}{'torch us':>10}"
        f"{'spread':>8}  torch side")


def run_gemm(quick, dtypes):
    """GEMM-shaped plans: C = A @ B as 128 x 128 blocks (bf16 also 128 x 256),
    the whole K in one call."""
    print(f"\nGEMM plans on {device_name('cuda')} (ours: f32 C; torch: C in the input dtype)")
    print(HEAD)
    shapes = [(4096, 4096, 4096), (8192, 8192, 8192)] if not quick else [(4096, 4096, 4096)]
    for dtype, (M, N, K), bn in [(d, s, bn) for d in dtypes for s in shapes
                                 for bn in ((128, 256) if d == "bf16" else (128,))]:
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
        reps = 20 if M <= 4096 else 5
        ours, spread = graph_time(replay(p, dict(A=A, B=B, C=C)), reps)
        theirs, _ = graph_time(lambda: torch.matmul(A, B), reps)
        row(f"{M}x{N}x{K} {dtype}", 2 * M * N * K, ours, theirs, spread,
            f"torch.matmul; ours blocks 128 x {bn}; launch {cuda_launches(p)}")


# the FC blocks tried per shape and pass, best kept: (bn, bc, bk)
FC_BLOCKS = [(64, 64, 64), (64, 64, 128), (128, 64, 128), (64, 128, 128), (128, 128, 128),
             (128, 128, 256)]


def timed_with(fn, **settings):
    """fn() with the CUDA backend's launch settings changed for its duration."""
    with cuda_launch_settings(**settings):
        return fn()


def run_fc(quick, dtypes):
    print(f"\nFC layers (blocked layouts, fc.toml's \"cuda\" tables), best of blocks {FC_BLOCKS} "
          "per shape and pass; bf16 also without 128 x 256 tiles (no wide), without "
          "splitting reductions over clusters (no split), and with 64-row tiles always on the "
          "two-blocks-per-SM entry point (2/SM) or never (1/SM)")
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
                best, tried = None, []
                for blocks in FC_BLOCKS[:3] if dtype == "f32" else FC_BLOCKS:
                    g = fc.geometry(N, C, K, blocks=blocks, path="cuda")
                    p = fc.plan(g, pass_, dtype)
                    tensors = plan_tensors(p)
                    t, spread = graph_time(replay(p, tensors), 20)
                    tried.append(f"{blocks[0]},{blocks[1]},{blocks[2]}:{t * 1e3:.1f}")
                    if best is None or t < best[0]:
                        best = (t, spread, blocks, p, tensors)
                theirs, _ = graph_time(theirs_fn[pass_], 20)
                t, spread, blocks, p, tensors = best
                extra = ""
                if dtype == "bf16":
                    shape = cuda_launches(p)
                    narrow, off, small, large = (
                        timed_with(lambda: graph_time(replay(p, tensors), 20)[0], **kw) * 1e3
                        for kw in ({"wide_tiles": False}, {"max_cluster": 1},
                                   {"small_tiles": True}, {"small_tiles": False}))
                    extra = (f"; launch {shape}; no wide {narrow:.1f} us, no split {off:.1f} "
                             f"us, 2/SM {small:.1f} us, 1/SM {large:.1f} us; "
                             f"tried {' '.join(tried)}")
                row(f"{name} {pass_} {dtype}", 2 * N * C * K, t, theirs, spread,
                    f"{theirs_name[pass_]}; ours blocks {blocks}{extra}")


# forward for the GPU: every loop parallel (a task per output row block), one
# kernel call per task (all of C, R, S), wider
# output-channel and pixel blocks than the CPU's cache-sized defaults
CONV_GPU = {"fwd": {"spec": "NKPQ", "bc": 64, "bk": 128, "bq": 64, "call_kb": 1 << 20}}


def run_conv(quick, dtypes, N=32):
    print(f"\nResNet-50 convolutions, minibatch {N}, forward (ours: blocked layouts; torch: "
          "cuDNN, channels_last)")
    print(HEAD)
    shapes = read_shapes("resnet50_conv")
    shapes = shapes[:4] if quick else shapes
    for dtype in [d for d in dtypes if d == "bf16"]:
        tdt = torch.bfloat16
        for (C, K, H, W, R, S, stride, pad), name in shapes:
            g = conv.geometry(N, C, K, H, W, R, S, (stride, stride), (pad, pad), CONV_GPU)
            p = conv.plan(g, "fwd", dtype)
            ours, spread = graph_time(replay(p, plan_tensors(p)), 20)
            x = torch.randn(N, C, H, W, device="cuda").to(tdt).to(memory_format=torch.channels_last)
            w = torch.randn(K, C, R, S, device="cuda").to(tdt).to(memory_format=torch.channels_last)
            theirs, _ = graph_time(lambda: F.conv2d(x, w, stride=stride, padding=pad), 20)
            flops = 2 * N * K * C * R * S * g.P * g.Q
            row(f"{name} fwd {dtype}", flops, ours, theirs, spread, "F.conv2d")


def run_lstm(quick, dtypes):
    print("\nLSTM forward, one layer (ours: input projection + recurrent plans, blocked; torch: "
          "cuDNN nn.LSTM)")
    print(HEAD)
    shapes = read_shapes("gnmt_lstm")[:2] if quick else read_shapes("gnmt_lstm")
    for dtype in dtypes:
        tdt = torch.bfloat16 if dtype == "bf16" else torch.float32
        for (T, N, C, K), name in shapes:
            layer = lstm.LSTM(C, K, dtype=dtype)
            layer.prepare(T, N)
            plans = [layer.plans["proj"], layer.plans["rec"]]
            tensors = [plan_tensors(p) for p in plans]
            ours, spread = graph_time(lambda: [p.run(backend="cuda", **t)
                                               for p, t in zip(plans, tensors)], 5)
            ref = torch.nn.LSTM(C, K).cuda().to(tdt)
            x = torch.randn(T, N, C, device="cuda").to(tdt)
            theirs, _ = graph_time(lambda: ref(x), 5)
            flops = 2 * T * N * 4 * K * (C + K)
            row(f"{name} fwd {dtype}", flops, ours, theirs, spread, "nn.LSTM")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--what", default="gemm,fc,conv,lstm")
    parser.add_argument("--dtypes", default="bf16,f32")
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
    for what in args.what.split(","):
        {"gemm": run_gemm, "fc": run_fc, "conv": run_conv, "lstm": run_lstm}[what](
            args.quick, args.dtypes.split(","))


if __name__ == "__main__":
    np.random.seed(0)
    main()
