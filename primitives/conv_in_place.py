"""Convolution's blocked path with operands in place (see primitives/conv.py
for the layouts): the forward's and backward-data's plans that store y and
dx straight into the NCHW results from their epilogues (the forward's on x
in place, and on w as given, its tasks copying w's tiles), and the weight
update's plans that read dy, or x, in place; with the rules that say which
layers take each. The functional forms in primitives/conv.py run them."""
import numpy as np

from brgemm import dtypes
from brgemm import plan as bplan
from primitives.conv_backward import backward_nest
from primitives.conv_forward import (forward_nest, nchw_copying_nest, nchw_ring_nest,
                                     nchw_tile_groups, ring_tiles)
from primitives.conv_plans import _loops, _plans, bias_ops
from primitives.conv_update import update_form, update_nest, update_x_nest, x_rows


def _task_slots(floats, group):
    """A nest's tile= for plans that store from the epilogue: each task (its
    parallel loops' values) sums its tiles in `group` slots of `floats` of its
    own (the tiles the nest keeps alive at once), numbered in the order the
    tasks first come."""
    slots = {}
    return lambda task, j: (slots.setdefault(task, len(slots)) * group + j) * floats


def _stores_y(g, has_bias, bf16=False):
    """The NCHW-storing forward plans' epilogue(n, k, pixel): b added (with
    has_bias), then the summed tile stored transposed into out [N,K,P,Q] at
    its first pixel (rounded with bf16)."""
    PQ = g.P * g.Q
    return lambda n, k, pixel: bias_ops(g, k, has_bias) + (
        bplan.store_t("out", (n * g.K + k * g.bk) * PQ + pixel, PQ, bf16=bf16),)


def stores_nchw(g, dtype, backend, out_dtype):
    """Whether the functional forward's plan stores y straight into the NCHW
    result (nchw_plan) instead of a pass of its own after it (unblock_y):
    f32 or bf16 results (bf16 from bf16 calls: rounded as stored) on the CPU
    backend, K a multiple of bk (a tile's channels all real ones)."""
    return _stored(dtype, out_dtype) and backend == "cpu" and g.K % g.bk == 0


def _stored(dtype, out_dtype):
    """Whether an NCHW-storing plan writes results of out_dtype in a call of dtype."""
    return out_dtype == np.float32 or (out_dtype == dtypes.bfloat16 and dtype == "bf16")


def reads_x_nchw(g, dtype, backend, x):
    """Whether the functional forward's NCHW-storing plan reads x in place
    (nchw_plan's x_nchw: no copy of x at all): f32 on the CPU backend, x f32
    and C-contiguous, the config's fwd key `nchw_x`, stride 1 across, no
    span, C and K whole blocks (the tile's channels all real ones), and every
    tile of output pixels keeping a tap that reaches all its pixels (padding
    at most (S - 1) / 2 each side, likewise rows), two where some tap leaves
    pixels out (one call writes the tile first, a whole one stores it last).
    The kernel broadcasts x's elements from their places, so rows of any
    length and alignment run as fast as blocked rows."""
    return g.nchw_x and _x_in_place(g, dtype, backend, x)


def copies_x_rows(g, dtype, backend, x):
    """Whether the functional forward reads x in place in blocked rows, each
    task copying the rows of x it reads itself (nchw_ring_plan), where it does
    not read x as the kernel's transposed A (reads_x_nchw): the config's fwd
    key nchw_x_rows, reads_x_nchw's other conditions (the same tiles and
    calls, on the copied rows), and rings of at most one image's rows (loop
    orders that take the images in turn within a group of tiles would need
    rings as large as x, one a task)."""
    return (g.nchw_x_rows and _x_in_place(g, dtype, backend, x)
            and ring_tiles(_loops(g, "fwd"), g)[2] <= g.H)


def _x_in_place(g, dtype, backend, x):
    """reads_x_nchw's rule but for the config's key."""
    if not (dtype == "f32" and backend == "cpu" and x.dtype == np.float32
            and x.flags.c_contiguous and g.sw == 1 and not g.span[0]
            and g.C % g.bc == 0 and g.K % g.bk == 0):
        return False
    for p in range(g.P):
        for q0 in range(0, g.Q, g.bq):
            m = min(g.bq, g.Q - q0)
            groups = nchw_tile_groups(g, p, q0, m)
            full = groups.pop((q0, q0 + m), [])
            if not full or (groups and len(full) < 2):
                return False
    return True


def nchw_plan(g, dtype, vnni, bf16_out=False, x_nchw=False, has_bias=False):
    """The forward's plan (conv_forward.forward_nest) that stores each tile,
    once summed, transposed into the NCHW result `out` [N,K,P,Q] by its last
    call's epilogue, while it is in cache (rounded with bf16_out). Each task
    sums its tiles in turn in one slot of its own in y (plan.extent["y"]
    floats: a tile per task), so the blocked y is neither written out nor
    read back. x_nchw: x is the NCHW array itself (reads_x_nchw); has_bias:
    b [K] (f32) added to each summed tile before its store."""
    def record():
        bq = g.bs if g.span[0] else g.bq
        tensors = {"x": dtype, "w": dtype, "y": "f32", "out": "bf16" if bf16_out else "f32"}
        if has_bias:
            tensors["b"] = "f32"
        rec = bplan.Recorder(tensors, spec=g.specs[0])
        forward_nest(rec, _loops(g, "fwd"), g, dtype, vnni,
                     tile=_task_slots(bq * g.bk, g.w_reuse[0]),
                     epilogue=_stores_y(g, has_bias, bf16_out), x_nchw=x_nchw)
        return rec.finish()
    return _plans.get((g, "fwd_nchw", dtype, vnni, bf16_out, x_nchw, has_bias), record)


def copies_w_nchw(g, token, w):
    """Whether the forward that reads x in place (reads_x_nchw) reads w as
    given too, its plan copying the tiles it reads (nchw_copying_plan) rather
    than reading w's blocked copy made before it: the config's fwd key
    nchw_copies_w, no reuse= (a kept blocked copy costs nothing to make), w
    f32 and C-contiguous."""
    return g.nchw_copies_w and token is None and w.dtype == np.float32 and w.flags.c_contiguous


def nchw_copying_plan(g, has_bias=False):
    """nchw_plan's forward on x in place (f32), its tasks copying w's tiles as
    they go (conv_forward.nchw_copying_nest): tensors x, w (as given,
    [K][C][R][S]), wt (plan.extent["wt"] floats: a slot of R S tiles per
    task), y (plan.extent["y"]: each task's tile slots), out and, with
    has_bias, b."""
    def record():
        tensors = {"x": "f32", "w": "f32", "wt": "f32", "y": "f32", "out": "f32"}
        if has_bias:
            tensors["b"] = "f32"
        rec = bplan.Recorder(tensors, spec=g.specs[0])
        nchw_copying_nest(rec, _loops(g, "fwd"), g, _stores_y(g, has_bias))
        return rec.finish()
    return _plans.get((g, "fwd_nchw_copying", has_bias), record)


def nchw_ring_plan(g, has_bias=False):
    """nchw_plan's forward on x in place (f32) in blocked rows, each task
    copying the rows of x its tiles read into a ring of its own
    (conv_forward.nchw_ring_nest): tensors x (NCHW), w (blocked, conv.block_w),
    xr (plan.extent["xr"] floats: the tasks' rings), y (plan.extent["y"]: each
    task's tile slots), out and, with has_bias, b."""
    def record():
        tensors = {"x": "f32", "w": "f32", "xr": "f32", "y": "f32", "out": "f32"}
        if has_bias:
            tensors["b"] = "f32"
        rec = bplan.Recorder(tensors, spec=g.specs[0])
        nchw_ring_nest(rec, _loops(g, "fwd"), g, _stores_y(g, has_bias),
                       _task_slots(g.bq * g.bk, g.w_reuse[0]))
        return rec.finish()
    return _plans.get((g, "fwd_nchw_ring", has_bias), record)


def stores_nchw_dx(g, dtype, backend, out_dtype):
    """Whether the functional backward-data's plan stores dx straight into the
    NCHW result (nchw_dx_plan): as stores_nchw, with C a multiple of bc and
    stride 1 across (a block's pixels then neighbours in dx's rows)."""
    return _stored(dtype, out_dtype) and backend == "cpu" and g.C % g.bc == 0 and g.sw == 1


def nchw_dx_plan(g, dtype, vnni, bf16_out=False):
    """Backward-data's plan (conv_backward.backward_nest) that stores each
    block of dx, once summed, transposed into the NCHW result `out`
    [N,C,H,W] from its last call's epilogue (rounded with bf16_out); each task
    sums in one slot of its own in dx (plan.extent["dx"] floats), as
    nchw_plan does for y."""
    def record():
        HW, bq = g.H * g.W, g.bs if g.span[1] else g.bq
        rec = bplan.Recorder({"dyp": dtype, "wt": dtype, "dx": "f32",
                              "out": "bf16" if bf16_out else "f32"}, spec=g.specs[1])
        backward_nest(rec, _loops(g, "bwd"), g, dtype, vnni,
                      tile=_task_slots(bq * g.bc, g.w_reuse[1]),
                      epilogue=lambda n, c, row, u0: (
                          bplan.store_t("out", (n * g.C + c * g.bc) * HW + row * g.W + u0, HW,
                                        bf16=bf16_out),))
        return rec.finish()
    return _plans.get((g, "bwd_nchw", dtype, vnni, bf16_out), record)


def reads_dy(g, dtype, backend, dy):
    """Whether the functional weight update reads dy [N,K,P,Q] in place as its
    kernel's broadcast operand (dy_plan), rows P Q apart, instead of a
    pixels-last copy (dyt): f32 on the CPU backend, the row nest
    (update_form "rows"), K whole blocks, dy f32 and C-contiguous. The plan
    runs as fast on dy as on the copy (benchmarks/RESULTS.md): the copy is saved."""
    return (dtype == "f32" and backend == "cpu" and update_form(g) == "rows"
            and g.K % g.bk == 0 and dy.dtype == np.float32 and dy.flags.c_contiguous)


def dy_plan(g):
    """The weight update's plan (conv_update.update_nest) reading dy in place."""
    def record():
        rec = bplan.Recorder({"dyt": "f32", "x": "f32", "dw": "f32"}, spec=g.specs[2])
        update_nest(rec, _loops(g, "upd"), g, "f32", dy_nchw=True)
        return rec.finish()
    return _plans.get((g, "upd_dy", "f32"), record)


def reads_x(g, dtype, backend, x):
    """Whether the functional weight update reads x [N,C,H,W] in place
    (x_plan), against backward-data's bordered dy, instead of a blocked copy
    of x: f32 on the CPU backend, the row nest, stride 1 across (a tap's
    pixels then neighbours in x's rows), C whole blocks, x f32 and
    C-contiguous, and every tap of every share of the reduction reaching a
    real row and column of x (update_x_nest clips the rest; a tile with no
    call would stay unwritten)."""
    if not (dtype == "f32" and backend == "cpu" and update_form(g) == "rows" and g.sw == 1
            and g.C % g.bc == 0 and x.dtype == np.float32 and x.flags.c_contiguous):
        return False
    pixels = all(max(0, g.pw - s) < min(g.Q, g.W + g.pw - s) for s in range(g.S))
    return pixels and all(rows for share in x_rows(g) for rows in share)


def x_plan(g):
    """The weight update's plan reading x in place (conv_update.update_x_nest):
    dw^T tiles [J][Kb][Cb][R][S][bc][bk]."""
    def record():
        rec = bplan.Recorder({"x": "f32", "dyp": "f32", "dw": "f32"}, spec=g.specs[2])
        update_x_nest(rec, _loops(g, "upd"), g, "f32")
        return rec.finish()
    return _plans.get((g, "upd_x", "f32"), record)
