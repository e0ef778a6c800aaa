"""The fused MLP kernels of kernels/cuda/mlp_fused.cu on the CUDA backend: the
module brgemm/_mlp_cuda.fatbin, what a shape needs (padded width, shared
memory, warps per backward block, grids) and the launches: forward (keep=True:
the training forward that keeps the activations), backward (recompute: the
forward again per tile, then dW, db per block, and their reduction) or
backward_stored (from the kept activations: dx, dz^T tiles and per-warp db;
the caller computes dW from the tiles) and reduce (the deterministic sum of
partial dW, db).
Takes device addresses the caller (primitives/mlp_cuda.py) has checked; the
launch argument is mlp_cuda_args of kernels/cuda/mlp_fused.h."""
import os
import pathlib

from brgemm.backend._cuda_driver import ATTR_SM_COUNT, ATTR_SMEM_OPTIN, FUNC_MAX_DYNAMIC_SMEM, \
    bound, device, stream
from brgemm.backend._device_replay import once

DEFAULT_FATBIN = pathlib.Path(os.environ.get("BRGEMM_MLP_FATBIN")
                              or pathlib.Path(__file__).resolve().parents[1] / "_mlp_cuda.fatbin")
FATBIN = DEFAULT_FATBIN          # the module launches come from (use_fatbin)
WIDTHS = (16, 32, 64, 128)       # the padded widths the module has kernels for
BWD_WARPS = (8, 4, 2, 1)         # warps per backward block (16 rows each), most first
REDUCE_THREADS = 256


class Unsupported(ValueError):
    """An MLP the fused CUDA kernels cannot run (the message names the argument)."""


def act_code(name):
    cu = device().cu
    return {None: cu.MLP_CUDA_ACT_NONE, "relu": cu.MLP_CUDA_ACT_RELU,
            "sigmoid": cu.MLP_CUDA_ACT_SIGMOID, "tanh": cu.MLP_CUDA_ACT_TANH}[name]


class _Module:
    """The loaded fatbin: its functions, the shared memory they may take, the
    device's multiprocessors, and occupancy per (function, shared memory)."""

    def __init__(self):
        dev = bound()
        if not FATBIN.exists():
            raise FileNotFoundError(f"{FATBIN} is missing: build it with python brgemm/_build_cuda.py")
        self.image = FATBIN.read_bytes()
        module = dev.ffi.new("CUmodule *")
        dev.check(dev.cu.cuModuleLoadData(module, self.image), "cuModuleLoadData (fused MLP)")
        self.module = module[0]
        self.fn = {}
        for w in WIDTHS:
            for kind in ("forward", "forward_keep", "backward", "backward_stored"):
                self.fn[kind, w] = self._function(f"mlp_{kind}_w{w}")
        self.fn["reduce"] = self._function("mlp_reduce")
        self.smem_max = dev.attribute(ATTR_SMEM_OPTIN)
        self.sms = dev.attribute(ATTR_SM_COUNT)
        self._smem_set, self._occupancy = {}, {}

    def _function(self, name):
        dev = device()
        fn = dev.ffi.new("CUfunction *")
        dev.check(dev.cu.cuModuleGetFunction(fn, self.module, name.encode()),
                  f"cuModuleGetFunction {name}")
        return fn[0]

    def prepare(self, fn, threads, smem):
        """Allow fn `smem` dynamic shared bytes; its resident blocks per multiprocessor."""
        dev = bound()
        key = (int(dev.ffi.cast("uintptr_t", fn)), threads, smem)
        if key not in self._occupancy:
            if smem > self._smem_set.get(key[0], 48 << 10):
                dev.check(dev.cu.cuFuncSetAttribute(fn, FUNC_MAX_DYNAMIC_SMEM, smem),
                          "cuFuncSetAttribute")
                self._smem_set[key[0]] = smem
            blocks = dev.ffi.new("int *")
            dev.check(dev.cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(blocks, fn, threads, smem),
                      "cuOccupancyMaxActiveBlocksPerMultiprocessor")
            self._occupancy[key] = max(1, blocks[0])
        return self._occupancy[key]


module = once(_Module)  # the loaded fatbin, made on first use


def use_fatbin(path=None):
    """Launch from the module in `path` (None: DEFAULT_FATBIN) from the next launch
    on, loaded on first use: benchmarks time builds of kernels/cuda/mlp_fused.cu
    with other macros in one process. Shapes and launch arguments made before stay
    valid (every build reads the same header); CUDA graphs captured before keep
    the functions they captured."""
    global FATBIN, module
    FATBIN = pathlib.Path(path) if path is not None else DEFAULT_FATBIN
    module = once(_Module)


# ---------------------------------------------------------------- shapes

def fwd_smem(W, L):
    return L * W * W * 2 + L * W * 4                       # weights (bf16), biases (f32)


def stored_smem(W, L):
    """The stored-activation backward: weights, biases, each warp's db partial."""
    return fwd_smem(W, L) + device().cu.MLP_CUDA_STORED_WARPS * L * W * 4


def bwd_smem(W, L, warps):
    T = 16 * warps                                         # rows per tile
    return L * W * W * 2 + L * T * W * 2 + T * W * 2 + L * W * W * 4 + 2 * L * W * 4


def fwd_rows(W):
    """Rows one forward warp keeps in registers."""
    cu = device().cu
    return cu.MLP_CUDA_FWD_ROWS_W128 if W >= 128 else cu.MLP_CUDA_FWD_ROWS


class Shape:
    """What the kernels make of an MLP with layer sizes `sizes`: its padded
    width W and the warps per recompute-backward block (the most whose shared
    memory fits; None where none does: then training keeps the activations)."""

    def __init__(self, sizes):
        self.sizes, self.L = tuple(sizes), len(sizes) - 1
        m = module()
        widest = max(sizes)
        fits = [w for w in WIDTHS if w >= widest]
        if not fits:
            raise Unsupported(f"sizes: the fused MLP on 'cuda' takes layers up to {WIDTHS[-1]} "
                              f"wide, got {widest}")
        self.W = W = fits[0]
        if self.L > 64:
            raise Unsupported(f"sizes: the fused MLP on 'cuda' takes up to 64 layers, got {self.L}")
        if stored_smem(W, self.L) > m.smem_max:  # training always fits where this does
            raise Unsupported(f"sizes: {self.L} layers of width {W} need {stored_smem(W, self.L)} "
                              f"bytes of shared memory, the GPU has {m.smem_max} per block")
        warps = [n for n in BWD_WARPS if bwd_smem(W, self.L, n) <= m.smem_max]
        self.bwd_warps = warps[0] if warps else None
        self.partial_floats = self.L * W * W + self.L * W   # one backward block's dW, db


# ---------------------------------------------------------------- launches

def _launch(fn, grid, threads, smem, params, what):
    dev = bound()
    dev.check(dev.cu.cuLaunchKernel(fn, grid, 1, 1, threads, 1, 1, smem,
                                    dev.ffi.cast("CUstream", stream()), params, dev.ffi.NULL),
              f"{what}: cuLaunchKernel")


def new_args():
    return device().ffi.new("mlp_cuda_args *")


def dzt_rows():
    """Batch rows of one dz^T tile (stored training pads the batch to a multiple)."""
    return device().cu.MLP_CUDA_DZT_ROWS


def sm_count():
    return module().sms


def forward(shape, args, keep=False):
    """y = the MLP of x for args.rows rows (args: x, y, w, b and their flags);
    keep: also args.h (and args.yf where set) for args.rows_pad rows."""
    m, cu = module(), device().cu
    W, threads = shape.W, cu.MLP_CUDA_FWD_WARPS * 32
    fn, smem = m.fn["forward_keep" if keep else "forward", W], fwd_smem(W, shape.L)
    per_block = cu.MLP_CUDA_FWD_WARPS * fwd_rows(W)
    need = -(-(args.rows_pad if keep else args.rows) // per_block)
    grid = min(need, m.sms * m.prepare(fn, threads, smem))
    _launch(fn, grid, threads, smem, device().ffi.new("void *[1]", [args]), "fused MLP forward")


def backward_blocks(shape, rows):
    """Blocks of the backward launch (each writes one partial dW, db)."""
    m = module()
    threads, smem = 32 * shape.bwd_warps, bwd_smem(shape.W, shape.L, shape.bwd_warps)
    occupancy = m.prepare(m.fn["backward", shape.W], threads, smem)
    return min(-(-rows // (16 * shape.bwd_warps)), m.sms * occupancy)


def backward(shape, args, blocks):
    """Recompute: dx (args.dx, 0 for none) and `blocks` partial dW, db into
    args.partial, then their sum into args.dw, args.db."""
    m, ffi = module(), device().ffi
    threads, smem = 32 * shape.bwd_warps, bwd_smem(shape.W, shape.L, shape.bwd_warps)
    args.partials = args.partials_db = blocks
    args.stride_w = args.stride_b = shape.partial_floats
    args.partial_db = args.partial + shape.L * shape.W * shape.W * 4
    _launch(m.fn["backward", shape.W], blocks, threads, smem, ffi.new("void *[1]", [args]),
            "fused MLP backward")
    reduce(shape, args)


def stored_warps(shape, rows_pad):
    """Warps of the stored-activation backward launch (each writes one partial db)."""
    m, cu = module(), device().cu
    threads, smem = 32 * cu.MLP_CUDA_STORED_WARPS, stored_smem(shape.W, shape.L)
    occupancy = m.prepare(m.fn["backward_stored", shape.W], threads, smem)
    blocks = min(-(-rows_pad // (16 * cu.MLP_CUDA_STORED_WARPS)), m.sms * occupancy)
    return blocks * cu.MLP_CUDA_STORED_WARPS


def backward_stored(shape, args, warps):
    """From the kept activations (args.h, args.yf): dx (args.dx, 0 for none), every
    dz_l^T into args.dzt and `warps` partial db into args.partial_db."""
    m, cu, ffi = module(), device().cu, device().ffi
    threads, smem = 32 * cu.MLP_CUDA_STORED_WARPS, stored_smem(shape.W, shape.L)
    m.prepare(m.fn["backward_stored", shape.W], threads, smem)
    args.partials_db, args.stride_b = warps, shape.L * shape.W
    _launch(m.fn["backward_stored", shape.W], warps // cu.MLP_CUDA_STORED_WARPS, threads, smem,
            ffi.new("void *[1]", [args]), "fused MLP backward (stored)")


def reduce(shape, args):
    """args.dw, args.db = the sums of the partials args.partial, args.partial_db
    (counts and strides in args), unpadded."""
    ffi = device().ffi
    width = ffi.new("int *", shape.W)
    grid = -(-shape.partial_floats // REDUCE_THREADS)
    _launch(module().fn["reduce"], grid, REDUCE_THREADS, 0, ffi.new("void *[2]", [args, width]),
            "fused MLP reduce")
