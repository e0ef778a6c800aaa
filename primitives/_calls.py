"""How many blocks one kernel call may batch-reduce. libxsmm 1.17 keeps one
register tile of C at a time and walks the call's whole batch for it, so a call
whose A and B blocks exceed the cache re-streams them once per register tile;
splitting a long batch into calls of a few dozen KiB that accumulate into the
same C (which stays in cache) avoids that. The primitives' configs say how
many KiB (call_kb); benchmarks/RESULTS.md has what it bought."""

from brgemm.dtypes import ITEMSIZE


def blocks_per_call(kib, elems_per_block, dtype):
    """How many blocks of elems_per_block A and B elements fit in kib KiB (>= 1)."""
    return max(1, (kib << 10) // (elems_per_block * ITEMSIZE[dtype]))
