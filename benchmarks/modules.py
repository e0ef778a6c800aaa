"""Our PyTorch modules against torch.nn's, where users call them inside PyTorch:
a torch.nn.Conv2d, Linear or LSTM of each quick benchmark shape, and a deep
copy of it switched to ours by primitives.nn.convert (same weights), on the
same CPU tensors, same threads and dtype.

    python -m benchmarks modules [--quick] [--dtype f32|bf16] [--threads T]

Two passes per shape:
  infer  the module's forward under torch.no_grad() (the weights stay the
         same, so ours keeps their blocked copies: primitives.reuse)
  train  one SGD step: gradients cleared, forward, backward from a fixed
         gradient of the output, optimizer.step() (the weights change every
         step, so ours re-blocks them in every step's forward); the input
         requires grad, as an inner layer's does, so both sides compute it
Both modules' outputs, input and parameter gradients are checked before
timing against the same module run in float64 on the same inputs: ours must
agree within the dtype's tolerance; where torch.nn's own result does not, its
rows are timed all the same and marked (seen: its bf16 LSTM backward on the
lent Xeon, benchmarks/RESULTS.md). Times are medians of rotated rounds (benchmarks.common
.interleaved_samples); ours/torch is the median of the rounds' paired
speed ratios (> 1: ours faster). conv runs N = threads images, as the other
conv benchmarks."""
import copy

import numpy as np

from benchmarks.common import (arbitrate, geomean, interleaved_samples, machine,
                               paired_ratio, quick_shapes, read_shapes, save_report, set_threads,
                               spread_of, torch_threads)
from benchmarks import conv as bconv, lstm as blstm

HEAD = (f"{'shape':<20}{'pass':<7}{'ours ms':>9}{'torch ms':>10}{'ours/torch':>12}{'spread':>8}")
LR = 1e-6  # small steps: the timed loops run thousands of them on fixed data


def _cases(quick, threads):
    """(primitive, shape name, torch module, input tensor shape) for the quick shapes."""
    from torch import nn
    for (C, K, H, W, R, S, st, pd), name in quick_shapes("resnet50_conv", quick, bconv.QUICK):
        yield "conv", name, nn.Conv2d(C, K, (R, S), stride=st, padding=pd), (threads, C, H, W)
    fc_shapes = read_shapes("fc")
    for (N, C, K), name in fc_shapes[:3] if quick else fc_shapes:
        yield "fc", name, nn.Linear(C, K), (N, C)
    for (T, N, C, K), name in quick_shapes("gnmt_lstm", quick, blstm.QUICK):
        yield "lstm", name, nn.LSTM(C, K), (T, N, C)


def _output(m, x):
    y = m(x)
    return y[0] if isinstance(y, tuple) else y


def _step(m, x, dy, opt):
    """One training step of module m on x (which requires grad: an inner
    layer's input, so both sides compute the input's gradient too)."""
    opt.zero_grad(set_to_none=True)
    x.grad = None
    _output(m, x).backward(dy)
    opt.step()


def _results(m, x, dy):
    """One forward and backward of m from cleared gradients: the output, the
    input's gradient and the parameters' gradients, as float64 arrays."""
    m.zero_grad(set_to_none=True)
    x.grad = None
    y = _output(m, x)
    y.backward(dy)
    return [t.detach().double().numpy() for t in [y, x.grad] + [p.grad for p in m.parameters()]]


def _check(name, dtype, mine, theirs, x, dy):
    """Both modules' results against the same module in float64 on the same
    (rounded) inputs (benchmarks.common.arbitrate): what is wrong on torch.nn's
    side is returned (None: nothing), and its rows are timed all the same."""
    want = _results(copy.deepcopy(theirs).double(), x.detach().double().requires_grad_(),
                    dy.double())
    what = ["y", "input grad"] + [f"grad {n}" for n, _ in theirs.named_parameters()]
    return arbitrate(name, what, _results(mine, x, dy), _results(theirs, x, dy), want, dtype)


def run(quick=False, dtype="f32", threads=None):
    threads = set_threads(threads, onednn=False)
    torch = torch_threads(threads)
    from primitives import nn as ours_nn
    tdt = torch.float32 if dtype == "f32" else torch.bfloat16
    reps = 7 if quick else 9
    print(f"\nprimitives.nn modules against torch.nn's, {dtype}, {threads} threads, PyTorch "
          f"{torch.__version__}; {machine()}; {reps} rotated rounds: times are medians, "
          "ratios medians of the rounds' paired ratios")
    print(HEAD + "\n" + "-" * len(HEAD))
    gen = torch.Generator().manual_seed(int(np.random.default_rng().integers(2**31)))
    rows = []
    for prim, name, theirs, shape in _cases(quick, threads):
        theirs = theirs.to(tdt)
        mine = ours_nn.convert(copy.deepcopy(theirs))
        if getattr(mine, "unconverted", None):
            raise AssertionError(f"{name}: not converted: {mine.unconverted}")
        x = torch.randn(shape, generator=gen).to(tdt).requires_grad_()
        with torch.no_grad():
            dy = torch.randn(_output(theirs, x).shape, generator=gen).to(tdt)
        wrong = _check(name, dtype, mine, theirs, x, dy)
        opts = {id(m): torch.optim.SGD(m.parameters(), lr=LR) for m in (mine, theirs)}

        def infer(m):
            def fn():
                with torch.no_grad():
                    _output(m, x)
            return fn

        def train(m):
            return lambda: _step(m, x, dy, opts[id(m)])

        for pass_, make in (("infer", infer), ("train", train)):
            s_ours, s_theirs = interleaved_samples([make(mine), make(theirs)], reps=reps,
                                                   rotate=True)
            r = dict(primitive=prim, shape=name, pass_=pass_, dtype=dtype, threads=threads,
                     torch_wrong=wrong,
                     ours_ms=1e3 * float(np.median(s_ours)),
                     torch_ms=1e3 * float(np.median(s_theirs)),
                     ours_vs_torch=paired_ratio(s_theirs, s_ours),
                     spread=max(spread_of(s_ours), spread_of(s_theirs)))
            rows.append(r)
            print(f"{name:<20}{pass_:<7}{r['ours_ms']:>9.2f}{r['torch_ms']:>10.2f}"
                  f"{r['ours_vs_torch']:>12.2f}{100 * r['spread']:>7.0f}%"
                  + ("  (torch.nn wrong here)" if wrong else ""), flush=True)
    for prim in ("conv", "fc", "lstm"):
        parts = []
        for pass_ in ("infer", "train"):
            rs = [r["ours_vs_torch"] for r in rows if r["primitive"] == prim and r["pass_"] == pass_]
            if rs:
                parts.append(f"{pass_} {geomean(rs):.2f} (lowest {min(rs):.2f})")
        print(f"geomean ours/torch {prim}: " + ", ".join(parts))
    save_report(f"modules-{dtype}-{threads}t", rows, "ours_vs_torch", "ours / torch.nn (speed)")
    return rows
