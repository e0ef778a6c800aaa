"""Epilogue ops: element-wise work attached to a plan's call as data, applied
to its C block right after the call (brgemm.plan). `accesses` is the one
statement of what each op reads and writes; the recorder checks ops against
it and the race check reads it."""
from __future__ import annotations

from dataclasses import dataclass

from brgemm.constants import TAPS_PAD

@dataclass(frozen=True)
class Op:
    """An epilogue op on a call's f32 C block; see the constructors below."""
    code: str                    # bias, relu, sigmoid, tanh, store_bf16, lstm_cell, ... (OP_CODES)
    tensors: tuple = ()          # operand tensor names
    offsets: tuple = ()          # their element offsets
    ld: int = 0                  # row stride of 2-D operands
    stride: int = 0              # lstm_cell: elements between gate blocks


def bias(tensor, offset=0):
    """C[i, j] += tensor[offset + j]"""
    return Op("bias", (tensor,), (offset,))


def bias_rows(tensor, offset=0):
    """C[i, j] += tensor[offset + i]: a bias per row (C holds a transposed result)"""
    return Op("bias_rows", (tensor,), (offset,))


def relu():
    return Op("relu")


def sigmoid():
    return Op("sigmoid")


def tanh():
    return Op("tanh")


def store_bf16(tensor, offset, ld):
    """tensor[offset + i*ld + j] = bf16(C[i, j]): a bf16 copy of an f32 result."""
    return Op("store_bf16", (tensor,), (offset,), ld)


def lstm_cell(gates, gates_offset, stride, c_prev, c_prev_offset, c, c_offset, h, h_offset, ld,
              h16=None, h16_offset=0):
    """The LSTM cell on one block: gate pre-activations i, f, g, o at gates_offset
    + q * stride (row stride: the call's ldc); i, f, o = sigmoid, g = tanh
    (written back over the gates, for backward), c = f * c_prev + i * g,
    h = o * tanh(c); c_prev, c and h have row stride ld. All blocks are the
    call's m x n; attach it to the call that finishes the last gate. With h16,
    a bf16 copy of h goes there too (the next step's bf16 GEMM input)."""
    names, offs = (gates, c_prev, c, h), (gates_offset, c_prev_offset, c_offset, h_offset)
    if h16 is not None:
        names, offs = names + (h16,), offs + (h16_offset,)
    return Op("lstm_cell", names, offs, ld, stride)


def lstm_cell_bwd(dy, dy_offset, gates, gates_offset, stride, c, c_offset, c_prev_offset, dc,
                  dc_offset, dgates, dgates_offset, ld, dgates16=None):
    """The LSTM cell's derivatives on one block. The call's C block holds the dh
    that flows back from the next step; with dy it makes this step's dh. Reads
    the activated gates (i, f, g, o at gates_offset + q * stride), c_t and
    c_prev (both in tensor c), dc; writes the four pre-activation gradients at
    dgates_offset + q * stride and overwrites dc with the previous step's. With
    dgates16, bf16 copies of the gradients go there too, at the same offsets
    (the bf16 operands of the GEMMs that read them)."""
    names = (dy, gates, c, c, dc, dgates)
    offs = (dy_offset, gates_offset, c_offset, c_prev_offset, dc_offset, dgates_offset)
    if dgates16 is not None:
        names, offs = names + (dgates16,), offs + (dgates_offset,)
    return Op("lstm_cell_bwd", names, offs, ld, stride)


def act_grad(activation, tensor, offset, ld, bf16=False):
    """C[i, j] *= act'(y) from the activation's own output y = tensor[offset + i*ld + j]
    (f32; with bf16, y as kept in bf16): the gradient at a pre-activation from the
    gradient at its output."""
    if activation not in ("relu", "sigmoid", "tanh"):
        raise ValueError(f"activation: expected relu, sigmoid or tanh, got {activation!r}")
    return Op(activation + ("_bwd_bf16" if bf16 else "_bwd"), (tensor,), (offset,), ld)


def col_sum(tensor, offset):
    """tensor[offset + j] += sum over i of C[i, j] (f32): a bias gradient summed
    over a block's rows, into a sum the caller started."""
    return Op("col_sum", (tensor,), (offset,))


def store_t(tensor, offset, ld, bf16=False):
    """tensor[offset + j*ld + i] = C[i, j] (rounded to bf16 with bf16): a transposed
    copy, for the operand a later batch reduction over C's rows reads."""
    return Op("store_t_bf16" if bf16 else "store_t", (tensor,), (offset,), ld)


def copy_rows(src, src_offset, ld, dst, dst_offset, cols):
    """dst[dst_offset + i*cols + j] = src[src_offset + i*ld + j] for i < m (the
    call's), j < cols (f32), C untouched: a block of an operand the call has
    just read, still in cache, copied into a tile of row stride cols (stored
    around the caches where aligned: the tile is for a later pass; CPU only)."""
    return Op("copy_rows", (src, dst), (src_offset, dst_offset), ld, cols)


def copy_b(src, src_offset, ld, dst, dst_offset):
    """Before the call: dst[dst_offset + i*ldb + j] = src[src_offset + i*ld + j] for
    i < k, j < n (the call's k, n, ldb; f32, B in rows): one of the B blocks the
    call reads, copied from a plain matrix by the thread that reads it, so the
    block is in that core's cache when the kernel and the task's later calls
    read it (CPU only). A call's copy_b ops come before its other ops."""
    return Op("copy_b", (src, dst), (src_offset, dst_offset), ld)


def copy_bt(src, src_offset, ld, dst, dst_offset):
    """copy_b from the transpose of a plain matrix: dst[dst_offset + i*ldb + j] =
    src[src_offset + j*ld + i] for i < k, j < n (the call's): W's rows made the
    W^T tile the call reads, by the thread that reads it (CPU only)."""
    return Op("copy_bt", (src, dst), (src_offset, dst_offset), ld)


def copy_taps(src, src_offset, ld, taps, dst, dst_offset):
    """copy_bt over `taps` tiles at once, from rows whose elements interleave
    them: dst[dst_offset + t*tap_stride(k, ldb) + i*ldb + j] = src[src_offset +
    j*ld + i*taps + t] for t < taps, i < k, j < n (the call's): the R S tiles of
    one block pair (kb, cb) of a conv weight [K][C][R][S] (taps = R S, ld = C R
    S), made in one pass over w's rows by the thread that reads them (CPU
    only). The call may read any of them; later calls of its task the rest."""
    if not (isinstance(taps, int) and taps >= 1):
        raise ValueError(f"copy_taps: taps must be a positive int, got {taps!r}")
    return Op("copy_taps", (src, dst), (src_offset, dst_offset), ld, taps)


def tap_stride(k, ldb):
    """Elements between the starts of copy_taps' tiles (k rows ldb apart each):
    a cache line past the tile (TAPS_PAD, the header's BRGEMM_TAPS_PAD)."""
    return k * ldb + TAPS_PAD


def copy_at(src, src_offset, ld, rows, dst, dst_offset):
    """Before the call, rows of its A operand from the transpose of a plain
    matrix: dst[dst_offset + i*lda + j] = src[src_offset + j*ld + i] for i <
    rows, j < k (the call's k and lda; f32, A in rows, not a_t): a row of an
    NCHW image's pixels, a block of channels each (ld = H W), made the
    blocked rows [pixels][channels] the call and its task's later calls read,
    by the thread that reads them (CPU only)."""
    if not (isinstance(rows, int) and rows >= 1):
        raise ValueError(f"copy_at: rows must be a positive int, got {rows!r}")
    return Op("copy_at", (src, dst), (src_offset, dst_offset), ld, rows)


# the ops that fill a call's operands before it, and before its other ops
COPIES = ("copy_b", "copy_bt", "copy_taps", "copy_at")


def accesses(op, blk):
    """What op touches besides its call's C block (blk: the call's Block), as
    (tensor, offsets, rows, cols, ld, writes, dtype) rows: a rows x cols block
    with row stride ld at each offset, written or read, of that dtype."""
    m, n, code, t, o = blk.m, blk.n, op.code, op.tensors, op.offsets
    if code == "bias":
        return [(t[0], o, 1, n, n, False, "f32")]
    if code == "bias_rows":
        return [(t[0], o, 1, m, m, False, "f32")]
    if code == "col_sum":  # read and written
        return [(t[0], o, 1, n, n, w, "f32") for w in (False, True)]
    if code == "copy_rows":
        return [(t[0], [o[0]], m, op.stride, op.ld, False, "f32"),
                (t[1], [o[1]], m, op.stride, op.stride, True, "f32")]
    if code == "copy_at":  # k rows of `rows` read, `rows` rows of k written
        return [(t[0], [o[0]], blk.k, op.stride, op.ld, False, "f32"),
                (t[1], [o[1]], op.stride, blk.k, blk.lda, True, "f32")]
    if code in COPIES:  # copy_bt reads the block's transpose: n rows of k; copy_taps taps of it
        taps = op.stride if code == "copy_taps" else 1
        src = (blk.k, n) if code == "copy_b" else (n, blk.k * taps)
        tiles = [o[1] + q * tap_stride(blk.k, blk.ldb) for q in range(taps)]
        return [(t[0], [o[0]], *src, op.ld, False, "f32"),
                (t[1], tiles, blk.k, n, blk.ldb, True, "f32")]
    if code == "store_bf16":
        return [(t[0], o, m, n, op.ld, True, "bf16")]
    if code in ("relu_bwd", "sigmoid_bwd", "tanh_bwd"):
        return [(t[0], o, m, n, op.ld, False, "f32")]
    if code in ("relu_bwd_bf16", "sigmoid_bwd_bf16", "tanh_bwd_bf16"):
        return [(t[0], o, m, n, op.ld, False, "bf16")]
    if code in ("store_t", "store_t_bf16"):
        return [(t[0], o, n, m, op.ld, True, "bf16" if code == "store_t_bf16" else "f32")]
    four = lambda q: [o[q] + g * op.stride for g in range(4)]  # noqa: E731  gate blocks
    if code == "lstm_cell":  # gates (read and written, row stride ldc), c_prev; writes c, h, (h16)
        out = [(t[0], four(0), m, n, blk.ldc, w, "f32") for w in (False, True)]
        out.append((t[1], [o[1]], m, n, op.ld, False, "f32"))
        return out + [(t[q], [o[q]], m, n, op.ld, True, "bf16" if q == 4 else "f32")
                      for q in range(2, len(t))]
    if code == "lstm_cell_bwd":  # dy, gates, c_t, c_prev, dc read; dc, dG, (dG16) written
        out = [(t[q], four(q) if q == 1 else [o[q]], m, n, op.ld, False, "f32") for q in range(5)]
        out.append((t[4], [o[4]], m, n, op.ld, True, "f32"))
        return out + [(t[q], four(q), m, n, op.ld, True, "bf16" if q == 6 else "f32")
                      for q in range(5, len(t))]
    return []  # relu, sigmoid, tanh: C alone
