"""How the primitives cut a reduction into kernel calls. How many blocks one
call may batch-reduce: libxsmm 1.17 keeps one register tile of C at a time and
walks the call's whole batch for it, so a call
whose A and B blocks exceed the cache re-streams them once per register tile;
splitting a long batch into calls of a few dozen KiB that accumulate into the
same C (which stays in cache) avoids that. The primitives' configs say how
many KiB (call_kb); benchmarks/RESULTS.md has what it bought."""

from brgemm.dtypes import ITEMSIZE


def blocks_per_call(kib, elems_per_block, dtype):
    """How many blocks of elems_per_block A and B elements fit in kib KiB (>= 1)."""
    return max(1, (kib << 10) // (elems_per_block * ITEMSIZE[dtype]))


def reduction_calls(blocks, nb, dim, b):
    """The calls of one reduction chunk: (blocks, depth) with the full blocks
    together and the matrix's ragged last block (if in the chunk) alone."""
    if blocks[-1] == nb - 1 and dim % b:
        if len(blocks) > 1:
            yield blocks[:-1], b
        yield blocks[-1:], dim - (nb - 1) * b
    else:
        yield blocks, b
