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


def record_grouped(ex, tiles, group):
    """Record tiles' kernel calls, `group` consecutive tiles of one task at a
    time, call by call: each tile's first call, then each one's second, and
    so on, so that the weight blocks of a call, once loaded, serve every tile
    of the group from the core's L1 instead of coming back from L2 for each
    (group 1: each tile's whole reduction in turn). tiles: (phase, task,
    calls) in the nest's order, calls a list of ex.gemm's arguments."""
    pending, where = [], None

    def flush():
        if pending:
            ex.at(*where)
            for i in range(max(map(len, pending))):
                for calls in pending:
                    if i < len(calls):
                        ex.gemm(*calls[i])
            pending.clear()
    for phase, task, calls in tiles:
        if starts_group(where, (phase, task), len(pending), group):
            flush()
            where = (phase, task)
        pending.append(calls)
    flush()


def starts_group(where, at, taken, group):
    """Whether record_grouped starts a new group at a tile of `at` (its (phase,
    task)), the open group's being `where` with `taken` tiles."""
    return at != where or taken == group


def tile_groups(where, group):
    """The groups record_grouped makes of tiles whose (phase, task) are
    `where`, in order: lists of indices into `where`."""
    out = []
    for i, at in enumerate(where):
        if not out or starts_group(where[out[-1][0]], at, len(out[-1]), group):
            out.append([])
        out[-1].append(i)
    return out


def slot_in_group(group):
    """For nests that sum each tile in one slot of its task's own (tile=): a
    function of the task giving each of its tiles, in turn, its place among
    the `group` slots that record_grouped keeps alive at once."""
    seen = {}

    def index(task):
        seen[task] = seen.get(task, -1) + 1
        return seen[task] % group
    return index
