"""Recorder: the executor that records each call of a loop nest as a row of a
Plan instead of running it, checking every tensor name, dtype and offset (and
each epilogue op against brgemm.epilogue.accesses) as it goes."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from brgemm import dtypes
from brgemm.block import Block
from brgemm.constants import OP_CODES
from brgemm.epilogue import COPIES, accesses


@dataclass(frozen=True)
class TensorSpec:
    """A named flat buffer a plan reads or writes."""
    dtype: str   # "f32" or "bf16"


class Recorder:
    """Records each call as a row of a Plan instead of running it."""

    def __init__(self, tensors: dict[str, str], backend=None, spec=None):
        """tensors: name -> dtype ("f32"/"bf16") of every buffer the nest names;
        spec: the loop spec the nest walks, named when the plan is refused."""
        self.tensors = {name: dtypes.check_name(dt) for name, dt in tensors.items()}
        self.backend = backend
        self.spec = spec
        self.blocks: dict[Block, int] = {}
        self.phases: dict[tuple, dict[tuple, list]] = {}
        self._where = ((), ())
        self.extent = dict.fromkeys(self.tensors, 0)  # elements each tensor must hold
        self.written = set()

    def at(self, phase, task):
        """Calls made from now on belong to this phase and task (from Nest.walk)."""
        self._where = (phase, task)

    def _touch(self, name, offsets, rows, cols, ld, role):
        if name not in self.tensors:
            raise ValueError(f"{role}: unknown tensor {name!r} (declared: {', '.join(self.tensors)})")
        lo = min(offsets) if len(offsets) else 0
        if lo < 0:
            raise ValueError(f"{role}: negative offset {lo} into {name!r}")
        if len(offsets):
            self.extent[name] = max(self.extent[name], max(offsets) + (rows - 1) * ld + cols)

    def gemm(self, blk: Block, a, a_offs, b, b_offs, c, c_off, ops=()):
        a_offs, b_offs = list(a_offs), list(b_offs)
        if len(a_offs) != len(b_offs):
            raise ValueError(f"b_offs: {len(b_offs)} offsets, a_offs has {len(a_offs)}")
        if isinstance(c_off, bool) or not isinstance(c_off, (int, np.integer)):
            raise TypeError(f"c_off: expected an integer element offset, got {c_off!r}")
        for name, want, role in ((a, blk.dtype, "a"), (b, blk.dtype, "b"), (c, blk.c_dtype, "c")):
            if self.tensors.get(name, want) != want:
                raise ValueError(f"{role}: tensor {name!r} is {self.tensors[name]}, the block "
                                 f"wants {want}")
        a_shape, b_shape = _operand_shapes(blk)
        self._touch(a, a_offs, *a_shape, "a")
        self._touch(b, b_offs, *b_shape, "b")
        self._touch(c, [c_off], blk.m, blk.n, blk.ldc, "c")
        if c in (a, b):  # the kernel writes C while it reads A and B: no block may overlap it
            c_end = c_off + (blk.m - 1) * blk.ldc + blk.n
            for name, offs, (rows, cols, ld), role in ((a, a_offs, a_shape, "A"),
                                                       (b, b_offs, b_shape, "B")):
                span = (rows - 1) * ld + cols
                if name == c and any(o < c_end and c_off < o + span for o in offs):
                    raise ValueError(f"c: the C block at {c_off} of {c!r} overlaps one of the "
                                     f"call's {role} blocks; the kernel writes C while it "
                                     f"reads {role}")
        self.written.add(c)
        for i, op in enumerate(ops):
            self._check_op(op, blk)
            if op.code in COPIES and (blk.dtype != "f32" or blk.b_vnni
                                      or (i and ops[i - 1].code not in COPIES)):
                raise ValueError(f"ops: {op.code} fills f32 blocks in rows and comes before "
                                 "the call's other ops")
            if op.code == "copy_at" and blk.a_t:
                raise ValueError("ops: copy_at fills A's rows; this block's A is transposed (a_t)")
        kid = self.blocks.setdefault(blk, len(self.blocks))
        phase, task = self._where
        self.phases.setdefault(phase, {}).setdefault(task, []).append(
            (kid, a, b, c, c_off, a_offs, b_offs, tuple(ops)))

    def _check_op(self, op, blk):
        if op.code not in OP_CODES:
            raise ValueError(f"ops: unknown op {op.code!r}")
        if blk.c_dtype != "f32":
            raise ValueError(f"ops: {op.code} needs an f32 C block, this one is {blk.c_dtype}")
        for name, offs, rows, cols, ld, writes, want in accesses(op, blk):
            self._touch(name, offs, rows, cols, ld, op.code)
            if self.tensors[name] != want:
                raise ValueError(f"{op.code}: tensor {name!r} is not {want}")
            if writes:
                self.written.add(name)

    def finish(self):
        """The recorded Plan (checked for races between parallel tasks)."""
        from brgemm.plan import Plan  # plan re-exports this module's names
        return Plan(self)


def _operand_shapes(blk):
    """(rows, cols, ld) of a call's A blocks and of its B blocks as they lie in
    their tensors: A's k rows of m where given transposed (a_t); B in VNNI
    pairs, (k + 1) / 2 rows of n pairs, 2 ldb apart."""
    a = (blk.k, blk.m, blk.lda) if blk.a_t else (blk.m, blk.k, blk.lda)
    b = ((blk.k + 1) // 2, 2 * blk.n, 2 * blk.ldb) if blk.b_vnni else (blk.k, blk.n, blk.ldb)
    return a, b
