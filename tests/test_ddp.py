"""A converted model under DistributedDataParallel (gloo, 2 processes on
localhost) against one process on the same global batch.

Run as a script, this file is one rank of the job:
    python tests/test_ddp.py RANK WORLD PORT SEED OUT
"""
import os
import socket
import subprocess
import sys
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
STEPS, BATCH = 3, 8  # global batch, split evenly over the ranks


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 6, 3, padding=1)
        self.lstm = nn.LSTM(6, 10)
        self.fc = nn.Linear(10, 3)

    def forward(self, x):                                # x: N, 2, H, W
        h = torch.relu(self.conv(x)).mean(2)             # N, 6, W
        y, _ = self.lstm(h.permute(2, 0, 1))             # W, N, 10
        return self.fc(y[-1])


def setup(seed):
    """The converted model (same initial weights everywhere) and the global batches."""
    from primitives import nn as pnn
    torch.manual_seed(seed)
    model = pnn.convert(Net())
    assert model.unconverted == []
    data = [(torch.randn(BATCH, 2, 5, 7), torch.randn(BATCH, 3)) for _ in range(STEPS)]
    return model, data


def train(model, data, rank=0, world=1):
    opt = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.5)
    share = BATCH // world
    losses = []
    for x, target in data:
        x, target = x[rank * share:(rank + 1) * share], target[rank * share:(rank + 1) * share]
        opt.zero_grad()
        loss = ((model(x) - target) ** 2).mean()
        loss.backward()  # DDP averages the ranks' gradients: the global batch's mean
        opt.step()
        losses.append(loss.item())
    return losses


def worker(rank, world, port, seed, out):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    try:
        model, data = setup(seed)
        train(DistributedDataParallel(model), data, rank, world)
        if rank == 0:
            torch.save(model.state_dict(), out)
        dist.barrier()  # no rank tears its connections down while the other still works
    finally:
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(port, seed, out, env):
    """Both ranks as child processes: their exit codes and output."""
    procs = [subprocess.Popen([sys.executable, __file__, str(r), "2", str(port), str(seed), str(out)],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for r in range(2)]
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=120)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return [p.returncode for p in procs], logs


def test_ddp_two_processes_equal_one_process(rng, tmp_path):
    seed = int(rng.integers(2**31))
    out = tmp_path / "rank0.pt"
    # gloo on the loopback interface: a machine's hostname need not resolve to
    # an address its peers can reach
    # ROOT ahead of the caller's own PYTHONPATH, not in its place (where cffi may be)
    path = os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=path, GLOO_SOCKET_IFNAME="lo")
    for attempt in range(2):  # the free port may be taken before rank 0 binds it
        codes, logs = run_job(free_port(), seed, out, env)
        if all(c == 0 for c in codes) or not any("in use" in log for log in logs):
            break
    for r, (code, log) in enumerate(zip(codes, logs)):
        assert code == 0, f"rank {r} failed:\n{log}"
    model, data = setup(seed)
    train(model, data)
    got = torch.load(out)
    for name, want in model.state_dict().items():
        err = (got[name] - want).abs().max().item()
        print(f"{name}: max abs diff {err:.3e}")
        # f32: the two-rank job sums its halves' gradients in another order
        assert err <= 1e-5 * (want.abs().max().item() + 1), name


if __name__ == "__main__":
    rank_, world_, port_, seed_, out_ = sys.argv[1:]
    worker(int(rank_), int(world_), int(port_), int(seed_), out_)
    # The rank's work is done and saved. Skip the interpreter's teardown: torch's
    # C++ static destructors abort now and then at exit ("terminate called
    # without an active exception", no Python frame left), after this point.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
