"""The SYCL backend on whatever SYCL device is here (CI: the CPU OpenCL device).

Informative only: it measures our portable OpenCL C kernel on a CPU through the
OpenCL runtime, not an Intel GPU, and it is compared with our own CPU backend
(libxsmm), not with oneDNN. Same plans, same data: the CPU backend replays
with OpenMP on all cores; the SYCL device schedules work-groups on its own
threads (all cores too). "sycl resident" keeps tensors in USM (DeviceArray,
the steady state); "sycl numpy" copies NumPy arrays in and out on every run."""
import numpy as np

import brgemm
from benchmarks.common import interleaved, machine
from brgemm.layouts import to_blocks
from brgemm.machine import device_name, unavailable_reason
from primitives import fc, gemm

GEMMS = [(256, 256, 256), (512, 512, 512)]
FCS = [(256, 1024, 1024), (128, 4096, 1024)]


def _row(label, flops, plan, arrays, reps):
    resident = {k: brgemm.to_device(v, backend="sycl") for k, v in arrays.items()}
    (t_cpu, t_res, t_np), spread = interleaved([
        lambda: plan.run(**arrays),
        lambda: plan.run(backend="sycl", **resident),
        lambda: plan.run(backend="sycl", **arrays)], reps=reps)
    gf = [flops / t * 1e-9 for t in (t_cpu, t_res, t_np)]
    print(f"{label:<22}{gf[0]:>10.1f}{gf[1]:>14.2f}{gf[2]:>14.2f}{t_cpu / t_res:>12.3f}"
          f"{max(spread):>8.0%}", flush=True)
    return dict(shape=label, cpu_gflops=gf[0], sycl_resident_gflops=gf[1],
                sycl_numpy_gflops=gf[2], ratio_sycl_to_cpu=t_cpu / t_res)


def run(quick=False):
    if "sycl" not in brgemm.backends():
        print(f"sycl: not available here ({unavailable_reason('sycl')})")
        return []
    rng = np.random.default_rng()
    reps = 5 if quick else 9
    print(f"SYCL device: {device_name('sycl')}; host {machine()}; f32")
    print(f"{'shape':<22}{'cpu GF/s':>10}{'sycl res GF/s':>14}{'sycl np GF/s':>14}"
          f"{'sycl/cpu':>12}{'spread':>8}")
    rows = []
    for M, N, K in GEMMS[:1] if quick else GEMMS:
        p = gemm.plan(M, N, K, "f32", None)
        arrays = dict(A=rng.standard_normal((M, K)).astype(np.float32),
                      B=rng.standard_normal((K, N)).astype(np.float32),
                      C=np.zeros((M, N), np.float32))
        rows.append(_row(f"gemm {M}x{N}x{K}", 2.0 * M * N * K, p, arrays, reps))
    for N, C, K in FCS[:1] if quick else FCS:
        lin = fc.Linear(C, K, rng=rng)
        g = lin.prepare(N)
        arrays = dict(x=to_blocks(rng.standard_normal((N, C)).astype(np.float32), g.bn, g.bc),
                      w=lin.w, y=lin.y, b=lin.b)
        rows.append(_row(f"fc fwd {N}x{C}x{K}", 2.0 * N * C * K, lin.plans["fwd"], arrays, reps))
    return rows
