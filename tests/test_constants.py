"""Op codes, dtype codes and the device table widths have one definition,
kernels/cpu/brgemm_cpu.h: Python reads them through cffi, the OpenCL program
gets the header's block prepended. These tests fail when a copy creeps back."""
import pathlib
import re

from brgemm import constants, dtypes
from brgemm._brgemm_cpu import ffi, lib

ROOT = pathlib.Path(__file__).resolve().parent.parent
HEADER = ROOT / "kernels" / "cpu" / "brgemm_cpu.h"
SHARED = ("CALL_FIELDS", "OP_FIELDS", "KDESC_FIELDS", "OP_OPERANDS", "OP_BIAS", "OP_RELU",
          "OP_LSTM_CELL", "OP_STORE_T", "DTYPE_CODE", "DEVICE_OPS", "OP_CODES")


def _sources():
    for pattern in ("brgemm/**/*.py", "primitives/**/*.py", "kernels/**/*.cl", "kernels/**/*.cu",
                    "kernels/**/*.h", "kernels/**/*.c"):
        for path in ROOT.glob(pattern):
            if path not in (HEADER, ROOT / "brgemm" / "constants.py") and "_build" not in path.parts:
                yield path


def test_no_copy_defines_a_shared_constant():
    define = re.compile(r"(#define\s+\w*(?:%s)\b|\b(?:\w*_)?(?:%s)\s*=[^=]|\b(?:\w*_)?(?:%s)\s*,.*=\s*\d)"
                        % ("|".join(SHARED), "|".join(SHARED), "|".join(SHARED)))
    enum_codes = re.compile(r"\benum\s*{[^}]*\bOP_\w+\s*=\s*\d")
    found = []
    for path in _sources():
        text = path.read_text()
        found += [f"{path.relative_to(ROOT)}: {m.group(0)!r}" for m in define.finditer(text)]
        found += [f"{path.relative_to(ROOT)}: enum of op codes" for _ in enum_codes.finditer(text)]
    assert not found, "defined outside kernels/cpu/brgemm_cpu.h:\n" + "\n".join(found)


def test_python_reads_the_header():
    text = HEADER.read_text()
    for name, code in constants.OP_CODES.items():
        assert re.search(rf"\bBRGEMM_OP_{name.upper()}\s*=\s*{code}\b", text), name
    fields = dict(ffi.typeof("brgemm_plan_op").fields)
    assert fields["tensor"].type.length == fields["offset"].type.length == constants.OPERANDS
    assert constants.OP_FIELDS == len(fields) - 2 + 2 * constants.OPERANDS
    assert constants.DTYPE_CODE == {"f32": lib.BRGEMM_F32, "bf16": lib.BRGEMM_BF16}
    assert dtypes.ITEMSIZE == {"f32": 4, "bf16": 2}


def test_opencl_program_gets_the_header_block():
    cl = (ROOT / "kernels" / "sycl" / "brgemm_plan.cl").read_text()
    program = constants.device_source(cl)
    assert program.endswith(cl)
    block = program[:-len(cl)]
    for name in ("BRGEMM_OP_BIAS", "BRGEMM_OP_LSTM_CELL_BWD", "BRGEMM_CALL_FIELDS",
                 "BRGEMM_OP_FIELDS", "BRGEMM_KDESC_FIELDS", "BRGEMM_OPROW_STRIDE", "BRGEMM_BF16"):
        assert re.search(rf"\b{name}\b", block), name
        assert re.search(rf"\b{name}\b", cl) or name.startswith(("BRGEMM_OP_", "BRGEMM_OPROW_")), name
    assert "typedef" not in block and "(" not in re.sub(r"/\*.*?\*/", "", block, flags=re.S)


def test_plan_records_are_the_c_structs():
    """brgemm.plan's call and op rows are read off the header's structs, field by field."""
    for ctype, dt in (("brgemm_plan_call", constants.CALL_RECORD),
                      ("brgemm_plan_op", constants.OP_RECORD)):
        fields = ffi.typeof(ctype).fields
        assert dt.names == tuple(name for name, _ in fields) and dt.itemsize == ffi.sizeof(ctype)
        for name, f in fields:
            assert dt.fields[name][1] == f.offset, (ctype, name)
            n = f.type.length if f.type.kind == "array" else 1
            assert dt.fields[name][0].itemsize == ffi.sizeof(f.type) == n * dt.fields[name][0].base.itemsize
