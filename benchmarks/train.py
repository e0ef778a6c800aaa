"""python -m benchmarks train [--quick] [--epochs N] [--threads N] [--compile]

Two real models trained end to end twice, with our layers (primitives.nn.convert)
and with plain PyTorch, from the same initial weights on the same batches in
the same order (epochs interleaved, ours first, so machine noise hits both):
  digits  a small CNN (two 3x3 convolutions, two linear layers) on
          scikit-learn's load_digits: 8x8 images of handwritten digits, 10 classes
  chars   a character-level LSTM language model (embedding, one LSTM layer,
          linear read-out) on the standard library's pydoc_data topics text
Prints per epoch the mean training loss and seconds of both sides, the loss and
accuracy on held-out examples (a seeded sixth of each data set), and whether
the curves agree within noise: the last epoch's mean losses differ by less than
twice the standard error of its batch losses. --compile: every side's model
runs under torch.compile (inductor; ours with its Linear and Conv2d as custom
operators, its LSTM a graph break), the first epoch paying the compiles. Float rounding makes any two runs
drift apart (they share no batch loss bit for bit after the first steps), so a
third run, torch from weights nudged by 1e-6 of themselves, shows how far two
equally valid runs end apart: the noise floor. Writes a PNG of both loss curves and the numbers as JSON under
benchmarks/results/.
"""
import copy
import datetime
import json
import math
import os
import pathlib
import statistics
import time

import numpy as np
import torch
from torch import nn

from benchmarks.common import machine, pyplot

TASKS = ("digits", "chars")


# ---------------------------------------------------------------- the tasks

def digits_data():
    """load_digits as float32 images [1797, 1, 8, 8] in [0, 1] and int64 labels."""
    from sklearn.datasets import load_digits
    d = load_digits()
    x = torch.tensor(d.images[:, None] / 16.0, dtype=torch.float32)
    return x, torch.tensor(d.target, dtype=torch.int64)


def digits_model():
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(32 * 4 * 4, 64), nn.ReLU(), nn.Linear(64, 10))


def chars_text():
    import pydoc_data.topics
    return "\n".join(pydoc_data.topics.topics[k] for k in sorted(pydoc_data.topics.topics))


class CharLM(nn.Module):
    """Next-character logits for every position of a [N, T] batch of character ids."""

    def __init__(self, vocab, embed=32, hidden=128):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, batch_first=True)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, ids):
        h, _ = self.lstm(self.embed(ids))
        return self.out(h)


class Task:
    """A model, its optimizer and its batches: the same for both sides of a run."""

    def __init__(self, name, seed, quick=False):
        self.name = name
        self.order = np.random.default_rng(seed)
        if name == "digits":
            x, y = digits_data()
            self.batch, self.lr = 32, 0.05
            torch.manual_seed(seed)
            self.model = digits_model()
        else:
            text = chars_text()
            text = text[:40_000] if quick else text[:240_000]
            vocab = sorted(set(text))
            index = {c: i for i, c in enumerate(vocab)}
            ids = torch.tensor([index[c] for c in text], dtype=torch.int64)
            seq = 64
            n = (len(ids) - 1) // seq
            x, y = ids[:n * seq].reshape(n, seq), ids[1:n * seq + 1].reshape(n, seq)
            self.batch, self.lr = 32, 1.0
            torch.manual_seed(seed)
            self.model = CharLM(len(vocab))
        # a seeded split: a sixth of the examples held out for the final evaluation
        perm = torch.from_numpy(np.random.default_rng(seed).permutation(len(x)))
        held = len(x) // 6
        self.x, self.y = x[perm[held:]], y[perm[held:]]
        self.x_test, self.y_test = x[perm[:held]], y[perm[:held]]

    def epoch_batches(self):
        """The next epoch's batches (a fresh shuffle; both sides get the same list)."""
        perm = torch.from_numpy(self.order.permutation(len(self.x)))
        return [(self.x[perm[i:i + self.batch]], self.y[perm[i:i + self.batch]])
                for i in range(0, len(perm) - self.batch + 1, self.batch)]

    def loss(self, model, x, y):
        out = model(x)
        return nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))

    def evaluate(self, model):
        """Loss (and for digits the accuracy) on the held-out examples."""
        with torch.no_grad():
            out = model(self.x_test)
            loss = nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]),
                                               self.y_test.reshape(-1)).item()
            acc = (out.argmax(-1) == self.y_test).double().mean().item()
        return loss, acc

    def optimizer(self, model):
        return torch.optim.SGD(model.parameters(), lr=self.lr, momentum=0.9)


def pair(task):
    """(ours, torch): the task's model converted, and an untouched copy."""
    from primitives import nn as pnn
    theirs = copy.deepcopy(task.model)
    ours = pnn.convert(copy.deepcopy(task.model))
    if ours.unconverted:
        raise RuntimeError(f"convert left {ours.unconverted}")
    return ours, theirs


def nudged(model, seed, rel=1e-6):
    """A torch copy with every weight changed by about `rel` of itself: how far
    two runs that differ only in rounding drift apart is the noise floor that
    ours against torch is judged by."""
    other = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in other.parameters():
            p.mul_(1 + rel * torch.randn(p.shape, generator=gen))
    return other


def run_epoch(task, model, opt, batches, bar=None):
    """One epoch of SGD: the batch losses, and the wall-clock and process CPU
    seconds it took (CPU seconds count the work of every thread; on a machine
    others share they vary less than wall time)."""
    losses = []
    t0, c0 = time.perf_counter(), time.process_time()
    for x, y in batches:
        opt.zero_grad(set_to_none=True)
        loss = task.loss(model, x, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{losses[-1]:.3f}", refresh=False)
    return losses, time.perf_counter() - t0, time.process_time() - c0


def train(name, epochs, seed=0, quick=False, progress=True, max_steps=None, nudge=True,
          compiled=False):
    """Both sides of one task (and, with nudge, torch from nudged weights):
    per side the batch losses of each epoch, its seconds, the held-out results;
    compiled: each side's model under torch.compile (sharing its parameters)."""
    task = Task(name, seed, quick)
    models = dict(zip(("ours", "torch"), pair(task)))
    if nudge:
        models["torch, weights nudged 1e-6"] = nudged(models["torch"], seed)
    if compiled:
        models = {side: torch.compile(m) for side, m in models.items()}
    opts = {side: task.optimizer(m) for side, m in models.items()}
    result = {side: dict(losses=[], seconds=[], cpu_seconds=[]) for side in models}
    for epoch in range(epochs):
        batches = task.epoch_batches()[:max_steps]
        for side, model in models.items():
            bar = None
            if progress:
                from tqdm import tqdm
                bar = tqdm(total=len(batches), desc=f"{name} epoch {epoch + 1}/{epochs} "
                                                    f"{side.split(',')[0]:5}",
                           leave=False, unit="batch")
            losses, seconds, cpu = run_epoch(task, model, opts[side], batches, bar)
            if bar is not None:
                bar.close()
            result[side]["losses"].append(losses)
            result[side]["seconds"].append(seconds)
            result[side]["cpu_seconds"].append(cpu)
    for side, model in models.items():
        result[side]["test_loss"], result[side]["test_accuracy"] = task.evaluate(model)
    return result


def agreement(result, a="ours", b="torch"):
    """The last epoch's mean losses of a and b, their difference and twice its
    standard error (from the spread of the batch losses)."""
    last = [result[side]["losses"][-1] for side in (a, b)]
    means = [statistics.fmean(v) for v in last]
    sem = math.sqrt(sum(statistics.pvariance(v) / len(v) for v in last))
    return means[0], means[1], abs(means[0] - means[1]), 2 * sem


# ---------------------------------------------------------------- the report

def report(name, result):
    ours, theirs = result["ours"], result["torch"]
    print(f"\n{name}: epoch  loss ours  loss torch   s ours  s torch  cpu s ours  cpu s torch")
    for e, (lo, lt, so, st, co, ct) in enumerate(zip(
            ours["losses"], theirs["losses"], ours["seconds"], theirs["seconds"],
            ours["cpu_seconds"], theirs["cpu_seconds"])):
        print(f"{'':{len(name)}}  {e + 1:5d}  {statistics.fmean(lo):9.4g}  "
              f"{statistics.fmean(lt):10.4g}  {so:7.2f}  {st:7.2f}  {co:10.2f}  {ct:11.2f}")
    mo, mt, diff, noise = agreement(result)
    # the first epoch records plans and JIT-compiles kernels: left out when there are more
    steady = slice(1, None) if len(ours["seconds"]) > 1 else slice(None)
    so, st = (statistics.fmean(r["seconds"][steady]) for r in (ours, theirs))
    co, ct = (statistics.fmean(r["cpu_seconds"][steady]) for r in (ours, theirs))
    print(f"{name}: last epoch loss ours {mo:.4g}, torch {mt:.4g}, |diff| {diff:.2g} "
          f"{'<' if diff < noise else '>='} noise {noise:.2g} "
          f"({'agree' if diff < noise else 'DIFFER'}); s/epoch ours {so:.2f}, torch {st:.2f} "
          f"(ours/torch {so / st:.2f}); cpu s/epoch ours {co:.2f}, torch {ct:.2f} "
          f"(ours/torch {co / ct:.2f})")
    print(f"{name}: held-out loss ours {ours['test_loss']:.4f}, torch {theirs['test_loss']:.4f}; "
          f"accuracy (next {'character' if name == 'chars' else 'digit'}) ours "
          f"{ours['test_accuracy']:.4f}, torch {theirs['test_accuracy']:.4f}")
    extra = {}
    nudge = next((side for side in result if side.startswith("torch, ")), None)
    if nudge:
        other = result[nudge]
        _, _, floor, _ = agreement(result, nudge, "torch")
        print(f"{name}: noise floor, {nudge}: last epoch loss {statistics.fmean(other['losses'][-1]):.4g} "
              f"(|diff| from torch {floor:.2g}), held-out loss {other['test_loss']:.4f}, "
              f"accuracy {other['test_accuracy']:.4f}")
        extra = dict(nudged_last_loss=statistics.fmean(other["losses"][-1]), nudged_diff=floor,
                     nudged_test_loss=other["test_loss"],
                     nudged_test_accuracy=other["test_accuracy"])
    return dict(**extra,last_loss_ours=mo, last_loss_torch=mt, diff=diff, noise=noise,
                s_per_epoch_ours=so, s_per_epoch_torch=st, cpu_s_per_epoch_ours=co,
                cpu_s_per_epoch_torch=ct, agree=diff < noise,
                test_loss_ours=ours["test_loss"], test_loss_torch=theirs["test_loss"],
                test_accuracy_ours=ours["test_accuracy"],
                test_accuracy_torch=theirs["test_accuracy"])


def plot(results, path):
    plt = pyplot()
    if plt is None:
        return
    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4))
    for ax, (name, result) in zip(np.atleast_1d(axes), results.items()):
        styles = {"torch": dict(color="tab:blue", lw=2.5, alpha=0.5),
                  "ours": dict(color="tab:red", lw=1)}
        for side in sorted(result, key=lambda side: ("torch", "ours").index(side) + 1
                           if side in styles else 0):  # the nudged run under the others
            style = styles.get(side, dict(color="0.6", lw=1, alpha=0.7))
            steps = [v for epoch in result[side]["losses"] for v in epoch]
            ax.plot(range(1, len(steps) + 1), steps, label=f"{side} (last epoch "
                    f"{statistics.fmean(result[side]['losses'][-1]):.3g})", **style)
        ax.set_xlabel("step")
        ax.set_ylabel("training loss (cross-entropy)")
        ax.set_yscale("log")
        ax.set_title(f"{name}: primitives.nn vs torch.nn")
        ax.legend()
    fig.suptitle(machine(), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")


def run(quick=False, epochs=None, threads=None, tasks=TASKS, seed=0, compiled=False):
    if threads:
        from brgemm.machine import set_cpu_threads
        os.environ["OMP_NUM_THREADS"] = str(threads)
        set_cpu_threads(threads)
        torch.set_num_threads(threads)
    print(f"machine: {machine()}; threads: torch {torch.get_num_threads()}, ours "
          f"{os.environ.get('OMP_NUM_THREADS', 'all cores')}"
          f"{'; both sides under torch.compile' if compiled else ''}")
    epochs = epochs or {"digits": 2 if quick else 10, "chars": 2 if quick else 4}
    results, summary = {}, {}
    for name in tasks:
        n = epochs[name] if isinstance(epochs, dict) else epochs
        results[name] = train(name, n, seed=seed, quick=quick, compiled=compiled)
        summary[name] = report(name, results[name])
    out = pathlib.Path(__file__).resolve().parent / "results"
    out.mkdir(exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    (out / f"train-{stamp}.json").write_text(json.dumps(
        dict(meta=dict(machine=machine(), date=stamp, quick=quick, compiled=compiled),
             summary=summary,
             results=results), indent=1))
    plot(results, out / f"train-{stamp}.png")
    return summary
