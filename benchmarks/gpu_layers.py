"""Conv and LSTM on the CUDA backend against cuDNN, part of `python -m
benchmarks.gpu --what conv,lstm`: each pass's plans as the library builds them
on "cuda" (conv.toml's and lstm.toml's "cuda" tables), timed as benchmarks.gpu
times everything (CUDA graphs, medians of batches)."""
import torch
import torch.nn.functional as F

from benchmarks.common import read_shapes
from benchmarks.gpu import HEAD, graph_time, launch_text, plain_time, plan_tensors, replay, row
from brgemm.machine import cuda_launches
from primitives import conv, lstm
from primitives.conv_update import update_form


def torch_conv_passes(N, C, K, H, W, R, S, stride, pad, tdt):
    """cuDNN's three convolution passes on channels_last tensors of random data."""
    cl = torch.channels_last
    x = torch.randn(N, C, H, W, device="cuda").to(tdt).to(memory_format=cl)
    w = torch.randn(K, C, R, S, device="cuda").to(tdt).to(memory_format=cl)
    dy = F.conv2d(x, w, stride=stride, padding=pad).normal_().contiguous(memory_format=cl)
    return {"fwd": lambda: F.conv2d(x, w, stride=stride, padding=pad),
            "bwd": lambda: torch.nn.grad.conv2d_input(x.shape, w, dy, stride, pad),
            "upd": lambda: torch.nn.grad.conv2d_weight(x, w.shape, dy, stride, pad)}


def timed(fn, batch_ms=20.0, reps=20):
    """graph_time with batches of about batch_ms (at most `reps` calls): the
    generic path's slowest plans run for tens of milliseconds a call."""
    once = graph_time(fn, 1, batches=1)[0]
    return graph_time(fn, max(1, min(reps, int(batch_ms / max(once, 1e-3)))))


def run_conv(quick, dtypes, N=32):
    """Each pass's plan as the library builds it on "cuda" (conv.toml's "cuda"
    tables) against cuDNN's pass. Plans only: the layer's layout copies and
    the weight update's sum over its shares are not in ours."""
    print(f"\nResNet-50 convolutions, minibatch {N} (ours: the plan of each pass, conv.toml "
          "\"cuda\", blocked layouts; torch: cuDNN, channels_last)")
    print(HEAD)
    shapes = read_shapes("resnet50_conv")
    shapes = shapes[:4] if quick else shapes
    for dtype in dtypes:
        tdt = torch.bfloat16 if dtype == "bf16" else torch.float32
        for (C, K, H, W, R, S, stride, pad), name in shapes:
            g = conv.geometry(N, C, K, H, W, R, S, (stride, stride), (pad, pad), path="cuda")
            theirs_fn = torch_conv_passes(N, C, K, H, W, R, S, stride, pad, tdt)
            flops = 2 * N * K * C * R * S * g.P * g.Q
            for pass_ in ("fwd", "bwd", "upd"):
                p = conv.plan(g, pass_, dtype)
                ours, spread = timed(replay(p, plan_tensors(p)))
                theirs, _ = timed(theirs_fn[pass_])
                row(f"{name} {pass_} {dtype}", flops, ours, theirs, spread,
                    f"cuDNN; {update_form(g) + '; ' if pass_ == 'upd' else ''}{launch_text(p)}")
            # the other weight-update nest, for comparison
            other = conv.geometry(N, C, K, H, W, R, S, (stride, stride), (pad, pad),
                                  {"upd": {"flat": not g.flat}}, path="cuda")
            if update_form(other) != update_form(g):
                p = conv.plan(other, "upd", dtype)
                ours, spread = timed(replay(p, plan_tensors(p)))
                row(f"{name} upd {dtype}", flops, ours, theirs, spread,
                    f"cuDNN; {update_form(other)}; {launch_text(p)}")


def torch_lstm_step(C, K, T, N, tdt):
    """cuDNN's LSTM forward, and forward + backward (gradients of x and the
    weights), on random data."""
    ref = torch.nn.LSTM(C, K).cuda().to(tdt)
    ref.flatten_parameters()  # else cuDNN compacts the weights on every call
    x = torch.randn(T, N, C, device="cuda").to(tdt).requires_grad_()
    dy = torch.randn(T, N, K, device="cuda").to(tdt)
    wrt = [x] + list(ref.parameters())

    def train():
        return torch.autograd.grad(ref(x)[0], wrt, dy)
    return (lambda: ref(x)), train


def torch_train_time(fn):
    """(ms, note) of PyTorch's forward + backward: from a CUDA graph where its
    backward can be captured, else launched from Python (launch overhead
    included, which favours ours)."""
    try:
        return graph_time(fn, 5)[0], ""
    except RuntimeError as e:  # capture refused
        print(f"  (torch's LSTM backward not captured: {str(e).splitlines()[0][:80]})")
        torch.cuda.synchronize()
        return plain_time(fn, 5)[0], ", eager"


def lstm_plans(layer):
    """The plans of one forward and of one backward (BPTT with the cell's
    derivatives, dh0, dx, both weight updates) of a prepared layer."""
    g = layer.g
    fwd = [layer.plans["proj"], layer.plans["rec"]]
    bwd = [lstm.backward_plan(g, layer.dtype, "h" in layer.vnni)] + [
        layer.plans[k] for k in ("dh", "dx", "dwx", "dwh")]
    return fwd, bwd


def time_plans(plans, reps=5):
    tensors = [plan_tensors(p) for p in plans]
    return graph_time(lambda: [p.run(backend="cuda", **t) for p, t in zip(plans, tensors)], reps)


def parse_blocks(text):
    """'64x32,64x16' -> [(64, 32), (64, 16)]: LSTM (bn, bk) variants."""
    return [tuple(int(v) for v in b.split("x")) for b in text.split(",") if b]


def run_lstm(quick, dtypes, lstm_blocks=""):
    """The layer's plans as lstm.LSTM on "cuda" builds them (lstm.toml's
    "cuda" table) against cuDNN's nn.LSTM: forward, and forward + backward
    with the weight gradients. Plans only: the layer's layout copies are not
    in ours. lstm_blocks: more (bn, bk) choices, forward only."""
    print("\nLSTM, one layer (ours: the layer's plans on \"cuda\", lstm.toml \"cuda\", blocked "
          "layouts; torch: cuDNN nn.LSTM)")
    print(HEAD)
    shapes = read_shapes("gnmt_lstm")[:2] if quick else read_shapes("gnmt_lstm")
    for dtype in dtypes:
        tdt = torch.bfloat16 if dtype == "bf16" else torch.float32
        for (T, N, C, K), name in shapes:
            layer = lstm.LSTM(C, K, dtype=dtype, backend="cuda")
            g = layer.prepare(T, N)
            fwd, bwd = lstm_plans(layer)
            theirs_fwd, theirs_train = torch_lstm_step(C, K, T, N, tdt)
            flops = 2 * T * N * 4 * K * (C + K)
            blocks = f"blocks {(g.bn, g.bc, g.bk)}"
            ours, spread = time_plans(fwd)
            theirs_f = graph_time(theirs_fwd, 5)[0]  # the block variants' rows compare with it too
            row(f"{name} fwd {dtype}", flops, ours, theirs_f, spread,
                f"nn.LSTM; {blocks}; launches {sum(len(cuda_launches(p)) for p in fwd)}")
            ours_bwd, spread = time_plans(bwd)
            theirs, how = torch_train_time(theirs_train)
            row(f"{name} fwd+bwd {dtype}", 3 * flops, ours + ours_bwd, theirs, spread,
                f"nn.LSTM + autograd.grad{how}; {blocks}; launches "
                f"{sum(len(cuda_launches(p)) for p in fwd + bwd)}")
            for bn, bk in parse_blocks(lstm_blocks):
                other = lstm.LSTM(C, K, dtype=dtype, backend="cuda",
                                  config={"fwd": {"bn": bn, "bk": bk}})
                og = other.prepare(T, N)
                if (og.bn, og.bk) == (g.bn, g.bk):
                    continue
                t, s = time_plans(lstm_plans(other)[0])
                row(f"{name} fwd {dtype}", flops, t, theirs_f, s,
                    f"nn.LSTM; blocks {(og.bn, og.bc, og.bk)}")
