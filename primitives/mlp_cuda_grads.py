"""The weight gradients of the fused MLP's stored-activation training on CUDA,
as a recorded plan of this project's batch-reduce kernel
(kernels/cuda/brgemm_plan.cu on backend "cuda"):

    dW_l (partial p) = sum over the tiles n of chunk p of  dz_l^T[n] @ h_l[n]

dz_l^T[n]: the [W][T] tiles the fused backward wrote (T = dzt_rows() batch
rows each); h_l[n]: those T rows of layer l's input, [T][W], as the training
forward kept them (layer 0 reads x itself where x is bf16, W wide and whole
tiles). The tiles are cut into chunks so that the L x chunks tasks fill the GPU
about TASKS_PER_SM times; each task is one batch-reduce call over its chunk into its own
f32 partial [chunk][L][W][W], and the fused MLP's reduce kernel adds the
partials in a fixed order (deterministic). Padded rows and columns are in the
GEMMs (W wide everywhere): the reduce keeps out_l x in_l of each layer.
"""
from brgemm import plan as bplan
from brgemm.loopspec import Loop, parse_spec

SPEC = "LN"  # layers, then chunks of tiles: one parallel region
TASKS_PER_SM = 2  # benchmarks/gpu_mlp.py --breakdown times others
_plans = bplan.PlanCache(maxsize=16)


def chunk_tiles(L, tiles, sms, per_sm=TASKS_PER_SM):
    """Tiles per chunk: about per_sm tasks per multiprocessor, at least one tile each."""
    chunks = max(1, min(tiles, -(-per_sm * sms // L)))
    return -(-tiles // chunks)


def nest(ex, loops, L, W, T, tiles, chunk, plane, reads_x):
    """One batch-reduce call per (layer, chunk): its tiles' dz^T @ h into its partial."""
    for phase, task, at in loops.walk():
        l, n0 = at["l"], at["n"]
        ns = range(n0, min(n0 + chunk, tiles))
        b, b0 = ("x", 0) if l == 0 and reads_x else ("h", l * plane)
        ex.at(phase, task)
        ex.gemm(bplan.Block(W, W, T, lda=T, ldb=W, ldc=W, dtype="bf16", beta=0.0),
                "dzt", [l * plane + n * W * T for n in ns], b, [b0 + n * T * W for n in ns],
                "dwp", (n0 // chunk * L + l) * W * W)


def plan(L, W, rows_pad, T, sms, reads_x, per_sm=TASKS_PER_SM):
    """(the recorded plan, its partial count) for L layers of padded width W over
    rows_pad rows (a multiple of T); tensors dzt, h (where read), x (reads_x), dwp."""
    tiles = rows_pad // T
    chunk = chunk_tiles(L, tiles, sms, per_sm)

    def record():
        names = {"dzt": "bf16"}
        if L > 1 or not reads_x:
            names["h"] = "bf16"
        if reads_x:
            names["x"] = "bf16"
        names["dwp"] = "f32"
        rec = bplan.Recorder(names, spec=SPEC)
        loops = parse_spec(SPEC, [Loop("l", 0, L, 1), Loop("n", 0, tiles, chunk)])
        nest(rec, loops, L, W, T, tiles, chunk, rows_pad * W, reads_x)
        return rec.finish()
    return _plans.get((L, W, rows_pad, T, chunk, reads_x), record), -(-tiles // chunk)
