"""The cost model that picks a fused MLP's pipeline (primitives.mlp): layers
per pass (depth), batch rows per tile and tiles per weight-gradient call,
from compute, per-call overhead and memory traffic (cost's docstring has the
terms), for the machine's caches."""
import math

from brgemm import dtypes
from brgemm.machine import cpu_threads
from brgemm.vnni import takes_vnni_b


# The cost model's machine: per core, what the EPYC and Xeon hosts roughly have.
def _cache_bytes(level, default):
    """This machine's per-core cache of `level` (Linux sysfs), else `default`."""
    try:
        text = open(f"/sys/devices/system/cpu/cpu0/cache/index{level}/size").read().strip()
        return int(text[:-1]) << 10 if text.endswith("K") else int(text)
    except (OSError, ValueError):
        return default


L1_BYTES = _cache_bytes(0, 32 << 10)   # index0: L1 data

L2_BYTES = _cache_bytes(2, 1 << 20)

L2_BYTES_PER_S = 80e9      # what one core's epilogue passes get from L2

FLOPS_PER_CORE = 60e9      # f32 GEMM of wide blocks, sustained (bf16: flops_per_core)

BYTES_PER_S = 10e9         # memory bandwidth one core gets when all stream

CALL_ROWS = 8          # a kernel call costs about this many rows' worth of FMAs


def flops_per_core(dtype):
    """FLOPS_PER_CORE, twice that for bf16 where the kernels take bf16 pairs
    straight into dot products (AVX512-BF16, AMX: two products per f32 lane),
    as much where bf16 is widened to f32 first."""
    if dtype == "bf16" and takes_vnni_b(2, "bf16"):
        return 2 * FLOPS_PER_CORE
    return FLOPS_PER_CORE


def l1_bytes(tile, W, ab, train):
    """Bytes one layer's tile of `tile` rows (width W, GEMM operands of `ab` bytes)
    keeps in L1 while its call and epilogue run. f32: the input and output tiles
    (the output is the next layer's input in place). bf16: the f32 C and the bf16
    tiles next to it; forward the input and the output's bf16 copy (as many bytes
    as f32's two tiles); a training step's backward is wider: its epilogue makes
    act', dz^T and dz's bf16 copy from C in one pass by 16 x 16 blocks, so the
    bf16 A (dz), h (for act'), dz^T and the copy all stream next to C at once,
    with the layer's weights (B, read by every row of the tile)."""
    if ab == 4 or not train:
        return tile * W * _touched(ab, train)
    return tile * W * _touched(ab, train) + W * W * ab


def _touched(ab, train):
    """Bytes per activation element that l1_bytes' tiles hold (and that an epilogue
    spilled from L1 streams from L2)."""
    return 4 + 4 * ab if ab != 4 and train else 8


def cost(shape, dtype, train, depth, tile, group=4, threads=1):
    """Seconds the model predicts for one pass (forward; with train, forward and
    backward). Per core, with the batch split evenly:

      compute   FLOPs / flops_per_core(dtype), each call charged CALL_ROWS more rows
                (call overhead and the libxsmm kernel's ramp) over the tile's rows;
      memory    input and output once, plus one write and one read of an [N, W]
                activation per segment boundary (ceil(L / depth) - 1 of them), at
                BYTES_PER_S (at L2_BYTES_PER_S when a core's share of such an
                activation fits in its L2: then depth hardly matters); training
                adds h, dz^T and dx traffic that no pipeline choice removes;
      spill     when a tile's working set (its activations, f32 and bf16, and the
                weights of one segment) exceeds L2, each layer's activations go to
                memory as if unfused: 2 * N * W bytes per layer more; when a
                layer's tiles (l1_bytes) exceed L1, its epilogue passes and the
                next call's read cost about two more passes over the output from
                L2, at L2_BYTES_PER_S.

    The time is compute + memory (one core does both, overlap is poor at these
    sizes). Depth = all layers and the widest tile that stays in L2 win unless
    the weights alone fill L2; tiny tiles lose to call overhead."""
    N, C, W, K, L = (shape[k] for k in ("N", "C", "W", "K", "L"))
    ab = dtypes.ITEMSIZE[dtype]
    n = N / threads
    flops = 2 * n * (C * W + (L - 2) * W * W + W * K) if L > 1 else 2 * n * C * K
    passes = 3 if train else 1
    compute = passes * flops * (1 + CALL_ROWS / tile) / flops_per_core(dtype)
    bounds = math.ceil(L / depth) - 1
    boundary = bounds * 2 * n * W * ab * (2 if train else 1)
    in_l2 = 2 * n * W * ab <= L2_BYTES
    traffic = n * (C * ab + K * 4) + (0 if in_l2 else boundary)
    if train:
        traffic += n * W * (L - 1) * (4 + ab) * 2 + n * W * L * ab * 2
    act_bytes = tile * W * (4 + ab) * (4 if train else 2)
    weights = min(depth, L) * W * max(W, C, K) * ab * (2 if train else 1)
    if train:
        act_bytes += group * tile * W * ab * 2
    if act_bytes + weights > L2_BYTES:
        traffic += 2 * n * W * ab * L * passes
    l2 = 0.0
    if l1_bytes(tile, W, ab, train) > L1_BYTES:
        l2 = passes * n * W * L * _touched(ab, train) / L2_BYTES_PER_S
    if in_l2:
        l2 += boundary / L2_BYTES_PER_S
    return compute + traffic / BYTES_PER_S + l2


def candidates(shape):
    L, N = shape["L"], shape["N"]
    depths = sorted({d for d in (1, 2, 3, 4, 6, 8, L) if d <= L})
    tiles = [t for t in (16, 32, 64, 128, 256, 512) if t <= max(N, 16)]
    return depths, tiles


def default_pipeline(shape, dtype, train):
    """The cost model's choice of depth and tile (group: tiles per weight-gradient
    call, as many as keep their dz^T and h tiles in L2 next to the rest)."""
    depths, tiles = candidates(shape)
    threads = cpu_threads()  # what the plans run on (OMP_NUM_THREADS), not the cores
    best = min(((cost(shape, dtype, train, d, t, threads=threads), -d, -t)
                for d in depths for t in tiles))
    depth, tile = -best[1], -best[2]
    ab = dtypes.ITEMSIZE[dtype]
    group = max(1, min(8, L2_BYTES // 4 // max(1, tile * shape["W"] * ab * 2)))
    return {"depth": depth, "tile": tile, "group": group}
