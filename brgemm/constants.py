"""The constants C and Python share, read from their one definition in
kernels/cpu/brgemm_cpu.h through the CPU extension's cffi cdef (the header
itself). The OpenCL source gets the same lines at build time: device_source()."""
import pathlib

import numpy as np

from brgemm._brgemm_cpu import ffi, lib

HEADER = pathlib.Path(__file__).resolve().parent.parent / "kernels" / "cpu" / "brgemm_cpu.h"

# epilogue op names (brgemm.plan's Op.code) -> the header's BRGEMM_OP_* codes
OP_CODES = {name: getattr(lib, "BRGEMM_OP_" + name.upper()) for name in (
    "bias", "relu", "sigmoid", "tanh", "store_bf16", "lstm_cell", "lstm_cell_bwd", "relu_bwd",
    "sigmoid_bwd", "tanh_bwd", "store_t", "store_t_bf16", "relu_bwd_bf16", "sigmoid_bwd_bf16",
    "tanh_bwd_bf16", "bias_rows", "col_sum", "copy_rows", "copy_b", "copy_bt",
    "copy_taps", "copy_at")}
DEVICE_OPS = lib.BRGEMM_OP_LSTM_CELL_BWD  # the device backends apply the op codes up to this one
OPERANDS = lib.BRGEMM_OP_OPERANDS         # tensor slots (and offsets) of one op
TAPS_PAD = lib.BRGEMM_TAPS_PAD            # floats between copy_taps' tiles, past k ldb
DTYPE_CODE = {"f32": lib.BRGEMM_F32, "bf16": lib.BRGEMM_BF16}
# widths of the device backends' flat int64 plan tables
CALL_FIELDS, OP_FIELDS, KDESC_FIELDS = lib.BRGEMM_CALL_FIELDS, lib.BRGEMM_OP_FIELDS, \
    lib.BRGEMM_KDESC_FIELDS

_SCALARS = {"int32_t": "<i4", "int64_t": "<i8"}


def record_dtype(ctype: str) -> np.dtype:
    """The NumPy record type of the C struct `ctype` (int32_t, int64_t fields and
    arrays of them), with the C compiler's field offsets and size."""
    names, formats, offsets = [], [], []
    for name, field in ffi.typeof(ctype).fields:
        t = field.type
        shape = (t.length,) if t.kind == "array" else ()
        base = t.item if t.kind == "array" else t
        names.append(name)
        formats.append((_SCALARS[base.cname], shape) if shape else _SCALARS[base.cname])
        offsets.append(field.offset)
    return np.dtype({"names": names, "formats": formats, "offsets": offsets,
                     "itemsize": ffi.sizeof(ctype)}, align=True)


# a plan's rows as the CPU executor (and the CUDA backend) read them
CALL_RECORD = record_dtype("brgemm_plan_call")
OP_RECORD = record_dtype("brgemm_plan_op")

_BEGIN, _END = "/* BEGIN device constants", "END device constants */"


def device_source(source: str, header: pathlib.Path = HEADER) -> str:
    """An OpenCL C program's `source` with the header's device constants (the
    lines from its BEGIN to its END marker) in front."""
    text = header.read_text()
    begin, end = text.find(_BEGIN), text.find(_END)
    if begin < 0 or end < begin:
        raise RuntimeError(f"{header}: no '{_BEGIN} ... {_END}' block")
    return text[begin:end + len(_END)] + "\n#line 1\n" + source
