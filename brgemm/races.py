"""The race check of a recorded plan: within a phase, tasks run at the same
time, so no two may write the same element and none may read an element
another one writes. Exact, in element intervals per tensor."""
from __future__ import annotations

import numpy as np

from brgemm.epilogue import accesses


def _intervals(entries):
    """Element intervals [start, end) and their tasks from (offsets, rows, cols,
    ld, task) blocks: a strided block becomes one interval per row, so the
    intervals are exactly its elements."""
    offs = np.concatenate([np.asarray(o, np.int64) for o, *_ in entries])
    per = np.array([len(o) for o, *_ in entries])
    meta = np.array([e[1:5] for e in entries], np.int64)
    rows, cols, ld, task = (np.repeat(meta[:, i], per) for i in range(4))
    flat = (ld == cols) | (rows == 1)
    length = np.where(flat, (rows - 1) * ld + cols, cols)
    nrows = np.where(flat, 1, rows)
    first = np.repeat(np.cumsum(nrows) - nrows, nrows)
    start = np.repeat(offs, nrows) + (np.arange(first.size) - first) * np.repeat(ld, nrows)
    return start, start + np.repeat(length, nrows), np.repeat(task, nrows)


def _merge(start, end, task):
    """The union of each task's intervals, sorted by start (different tasks' may overlap)."""
    span = int(end.max()) + 1
    if int(task.max()) * span < 2**62:  # shift each task into a range of its own
        s, e = start + task * span, end + task * span
    else:  # too large to shift: merge per task
        parts = [_merge(start[task == t], end[task == t], task[task == t]) for t in np.unique(task)]
        s, e, t = (np.concatenate(x) for x in zip(*parts))
        order = np.argsort(s, kind="stable")
        return s[order], e[order], t[order]
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    new = np.ones(s.size, bool)
    new[1:] = s[1:] > reach[:-1]
    heads = np.flatnonzero(new)
    t = task[order][heads]
    ms, me = s[heads] - t * span, np.maximum.reduceat(e, heads) - t * span
    order = np.argsort(ms, kind="stable")
    return ms[order], me[order], t[order]


def check_races(rec):
    """Within a phase, tasks run at the same time: no two may write the same
    element, and none may read an element another one writes. That is what
    makes a replay race-free and independent of the thread count. Exact, in
    element intervals per tensor (a strided block is one interval per row);
    calls of one task may overlap freely (they run in order)."""
    blocks = {blk_id: blk for blk, blk_id in rec.blocks.items()}
    where = f"config: spec {rec.spec!r}: " if rec.spec else ""
    for tasks in rec.phases.values():
        if len(tasks) < 2:
            continue
        writes, reads = {}, {}  # tensor -> [(offsets, rows, cols, ld, task)]
        for t, calls in enumerate(tasks.values()):
            for kid, a, b, c, c_off, a_offs, b_offs, ops in calls:
                blk = blocks[kid]
                # a task's chunks accumulate into one C block: the dict keeps it once
                writes.setdefault(c, {})[(c_off, blk.m, blk.n, blk.ldc, t)] = None
                reads.setdefault(a, []).append((a_offs, blk.m, blk.k, blk.lda, t))
                reads.setdefault(b, []).append((b_offs, blk.k, blk.n, blk.ldb, t))
                for op in ops:
                    for name, offs, rows, cols, ld, w, _ in accesses(op, blk):
                        if w:
                            for o in offs:
                                writes.setdefault(name, {})[(o, rows, cols, ld, t)] = None
                        else:
                            reads.setdefault(name, []).append((list(offs), rows, cols, ld, t))
        for name, keys in writes.items():
            writers = {key[4] for key in keys}
            if len(writers) == 1 and all(e[4] in writers for e in reads.get(name, ())):
                continue  # one task writes it and only that task reads it
            entries = [([o], *rest) for o, *rest in keys]
            ws, we, wt = _merge(*_intervals(entries))
            before = np.maximum.accumulate(we)
            clash = np.flatnonzero(ws[1:] < before[:-1])
            if clash.size:
                raise ValueError(f"{where}tensor {name!r}: two parallel tasks of one phase write "
                                 f"the same elements (at offset {int(ws[clash[0] + 1])}); make the "
                                 "parallel loop one that splits the output")
            read = [e for e in reads.get(name, ()) if len(e[0])]
            if not read:
                continue
            rs, re, rt = _merge(*_intervals(read))
            # the writes are now disjoint and sorted: those a read meets are a run
            lo = np.searchsorted(we, rs, side="right")
            hi = np.searchsorted(ws, re, side="left")
            change = np.append(np.flatnonzero(wt[1:] != wt[:-1]) + 1, wt.size)
            first = np.minimum(lo, wt.size - 1)
            other_next = change[np.searchsorted(change, first, side="right")]
            bad = np.flatnonzero((lo < hi) & ((wt[first] != rt) | (other_next < hi)))
            if bad.size:
                raise ValueError(f"{where}tensor {name!r}: a parallel task reads elements that "
                                 f"another task of the same phase writes (near offset "
                                 f"{int(rs[bad[0]])}); put a barrier ('|') after the loop whose "
                                 "steps depend on each other, or make it sequential")
