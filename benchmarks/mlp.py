"""python -m benchmarks mlp: the fused MLP against the layer-by-layer ones, same run.

Width 64 with 4 hidden layers (5 linear layers, 64 -> 64) over batch sizes,
then widths 16, 32 and 128 at one batch; inference (forward) and one training
step (forward, backward to the input and every parameter, SGD). Sides: ours
fused (fc.MLP(fused=True)), ours unfused (fc.MLP), and PyTorch's layer-by-layer
nn.Sequential of Linear + activation on the CPU, same threads, every side fed
and answering in the dtype it computes in (converted before timing). samples/s and
TFLOP/s (2 N sum(in * out) per forward, three times that per training step),
timed round-robin (medians), so drift hits all sides alike. Then a depth x tile
table for one case: measured time next to what the cost model (mlp.cost)
predicts. A PNG of samples/s against batch size and the JSON go to
benchmarks/results/.
"""
import json
import pathlib

import numpy as np

from benchmarks.common import interleaved, machine, pyplot
from brgemm import dtypes
from primitives import fc, mlp

WIDTHS = (16, 32, 128)
HIDDEN = 4
LR = 0.0  # the update runs; zero keeps the weights from drifting to overflow over many steps


def _sizes(width):
    return [width] * (HIDDEN + 2)


def _flops(sizes, N):
    return 2 * N * sum(a * b for a, b in zip(sizes[:-1], sizes[1:]))


def _torch_side(sizes, dtype, x, dy):
    import torch
    tdt = torch.float32 if dtype == "f32" else torch.bfloat16
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(torch.nn.Linear(a, b, dtype=tdt))
        if i < len(sizes) - 2:
            layers.append(torch.nn.ReLU())
    net = torch.nn.Sequential(*layers)
    X = torch.from_numpy(x).to(tdt)
    DY = torch.from_numpy(dy).to(tdt)

    def infer():
        with torch.no_grad():
            net(X)

    def train():
        X.requires_grad_(True)
        net.zero_grad(set_to_none=True)
        net(X).backward(DY)
        with torch.no_grad():
            for p in net.parameters():
                p -= LR * p.grad
    return infer, train


def _ours(sizes, dtype, x, dy, fused, config=None):
    # inputs in the computing dtype, converted before timing, as the torch side's are
    x, dy = (a.astype(dtypes.NUMPY[dtype]) for a in (x, dy))
    net = fc.MLP(sizes, activation="relu", dtype=dtype, fused=fused, config=config,
                 rng=np.random.default_rng(0))

    def infer():
        net.forward(x, train=False)

    def train():
        net.forward(x)
        net.backward(dy)
        net.step(LR)
    return infer, train


def measure(sizes, N, dtype, reps, torch_too=True, unfused=True, train=True):
    """{side: {mode: seconds}} for one MLP and batch."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((N, sizes[0])).astype(np.float32)
    dy = rng.standard_normal((N, sizes[-1])).astype(np.float32)
    sides = {"fused": _ours(sizes, dtype, x, dy, True)}
    if unfused:
        sides["unfused"] = _ours(sizes, dtype, x, dy, False)
    if torch_too:
        sides["torch"] = _torch_side(sizes, dtype, x, dy)
    out = {}
    for mode, k in (("infer", 0), ("train", 1))[:2 if train else 1]:
        names = list(sides)
        times, _ = interleaved([sides[s][k] for s in names], reps=reps, min_time=0.02)
        for s, t in zip(names, times):
            out.setdefault(s, {})[mode] = t
    return out


def _row(sizes, N, dtype, times):
    f = _flops(sizes, N)
    row = dict(width=sizes[1], N=N, dtype=dtype)
    for side, modes in times.items():
        for mode, t in modes.items():
            work = f * (3 if mode == "train" else 1)
            row[f"{side}_{mode}_samples"] = N / t
            row[f"{side}_{mode}_tflops"] = work / t * 1e-12
    return row


def _print_rows(rows, sides):
    head = f"{'width':>5} {'batch':>8} {'mode':>5} " + " ".join(
        f"{s + ' Msamp/s':>16} {'TF/s':>6}" for s in sides) + "  fused/unfused fused/torch"
    print(head)
    for r in rows:
        for mode in ("infer", "train"):
            if f"fused_{mode}_samples" not in r:
                continue
            cells = " ".join(f"{r.get(f'{s}_{mode}_samples', float('nan')) / 1e6:16.2f} "
                             f"{r.get(f'{s}_{mode}_tflops', float('nan')):6.3f}" for s in sides)
            fu = r[f"fused_{mode}_samples"] / r.get(f"unfused_{mode}_samples", float("nan"))
            ft = r[f"fused_{mode}_samples"] / r.get(f"torch_{mode}_samples", float("nan"))
            print(f"{r['width']:5d} {r['N']:8d} {mode:>5} {cells}  {fu:13.2f} {ft:11.2f}")


def knob_table(dtype, quick, reps):
    """Depth x tile for width 64, 5 layers: measured inference ms next to the model's."""
    N = 1 << (18 if quick else 20)  # past the caches: what depth saves is memory traffic
    sizes = _sizes(64)
    shape = mlp.shape_of(N, sizes)
    depths, tiles = (1, 2, 5), (16, 32, 64, 128, 256)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((N, 64)).astype(np.float32)
    cells = [(d, t) for d in depths for t in tiles]
    fns = [_ours(sizes, dtype, x, x, True, {"pipeline": {"depth": d, "tile": t}})[0]
           for d, t in cells]
    times, _ = interleaved(fns, reps=reps, min_time=0.02)
    from brgemm.machine import cpu_threads
    threads = cpu_threads()  # as default_pipeline counts them: the plans' threads
    model = [mlp.cost(shape, dtype, False, d, t, threads=threads) for d, t in cells]
    pick = mlp.default_pipeline(shape, dtype, False)
    print(f"\ndepth x tile, width 64, {HIDDEN} hidden layers, batch {N}, {dtype}, inference: "
          f"measured ms (model ms); the model picks depth {pick['depth']}, tile {pick['tile']}")
    print(f"{'depth':>5} " + " ".join(f"{'tile ' + str(t):>16}" for t in tiles))
    for d in depths:
        row = [f"{times[cells.index((d, t))] * 1e3:7.2f} ({model[cells.index((d, t))] * 1e3:6.2f})"
               for t in tiles]
        print(f"{d:5d} " + " ".join(f"{c:>16}" for c in row))
    order_m = np.argsort(np.argsort(times))
    order_p = np.argsort(np.argsort(model))
    rho = np.corrcoef(order_m, order_p)[0, 1]
    best = cells[int(np.argmin(times))]
    print(f"rank correlation measured vs model: {rho:.2f}; fastest measured: depth {best[0]}, "
          f"tile {best[1]}")
    return [dict(depth=d, tile=t, seconds=s, model=m) for (d, t), s, m in zip(cells, times, model)]


def plot(rows, path):
    plt = pyplot()
    if plt is None:
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, mode in zip(axes, ("infer", "train")):
        for dtype in sorted({r["dtype"] for r in rows}):
            sel = [r for r in rows if r["width"] == 64 and r["dtype"] == dtype]
            for side in ("fused", "unfused", "torch"):
                key = f"{side}_{mode}_samples"
                pts = [(r["N"], r[key]) for r in sel if key in r]
                if pts:
                    ax.plot(*zip(*pts), marker="o", label=f"{side} {dtype}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch")
        ax.set_ylabel("samples/s")
        ax.set_title(f"width 64, {HIDDEN} hidden layers: "
                     f"{'inference' if mode == 'infer' else 'training step'}")
        ax.legend(fontsize=7)
    fig.suptitle(machine(), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(quick=False, dtypes=("f32",), threads=None, max_batch_log2=None):
    import datetime

    import torch

    from benchmarks.common import pin
    from brgemm.machine import cpu_threads, set_cpu_threads
    if threads:
        pin(threads)
        set_cpu_threads(threads)
    threads = cpu_threads()  # ours, and PyTorch's alike
    torch.set_num_threads(threads)
    reps = 3 if quick else 5
    top = max_batch_log2 or (18 if quick else 22)
    batches = [1 << b for b in range(14, top + 1, 2 if quick else 1)]
    print(f"mlp: {machine()}, {threads} threads; fused = fc.MLP(fused=True), unfused = "
          f"fc.MLP, torch = nn.Sequential (layer by layer); relu; medians of {reps} "
          f"interleaved samples")
    rows = []
    sides = ("fused", "unfused", "torch")
    for dtype in dtypes:
        print(f"\n{dtype}: width 64, {HIDDEN} hidden layers, over batch sizes")
        for N in batches:
            # the unfused stack keeps f32 and bf16 copies of every layer's output,
            # and training keeps every activation (plans check their writes with
            # a map as large): past 2^20 rows that is many GB, so there only
            # inference runs, fused and torch
            big = N > (1 << 20)
            slow = 3 if N >= (1 << 19) else reps  # the unfused training step takes seconds
            rows.append(_row(_sizes(64), N, dtype, measure(_sizes(64), N, dtype, slow,
                                                           unfused=not big, train=not big)))
            _print_rows(rows[-1:], sides)
        N = 1 << (16 if quick else 18)
        print(f"\n{dtype}: widths {', '.join(map(str, WIDTHS))} at batch {N}")
        for w in WIDTHS:
            rows.append(_row(_sizes(w), N, dtype, measure(_sizes(w), N, dtype, reps)))
            _print_rows(rows[-1:], sides)
    knobs = knob_table(dtypes[0], quick, reps)
    out = pathlib.Path(__file__).resolve().parent / "results"
    out.mkdir(exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    (out / f"mlp-{stamp}.json").write_text(json.dumps(dict(
        meta=dict(machine=machine(), threads=threads, date=stamp, quick=quick),
        rows=rows, knobs=knobs), indent=1))
    plot(rows, out / f"mlp-{stamp}.png")
    print(f"\nwrote {out}/mlp-{stamp}.json and .png")
    return rows
