"""The LSTM's functional forms on plain weights read in place: which weights
they read so (reads_in_place), and backward-data on such a weight (W [4K, S]
as the caller gave it): out = dG W.

    dG [R][4Kb][bn][bk] (tiles),  W [4K, S] (plain, f32)  ->  out [R][Sb][bn][bs]

The kernel streams W as its B operand in tiles; read in place, a tile's rows
lie S floats apart and share L1 sets (RESULTS.md: twice as slow as a copy plus
the plan). Where a backward follows a forward that read W in place and W's
tiles are whole (`fits`), the forward's projection made the tiles as it read W,
from cache (lstm_plans.projection_t_nest's tiles), and the layer's own plans
run on them; except where copies_w says the backward copies them itself,
inside its plan (fc_plans.plan_copying on dG's and out's tiles: each task the
tiles of its block column of out, a reduction chunk at a time, read from its
cache). backward_data is for the rest: that copying plan, or W copied into
tiles a strip of hidden blocks at a time (the group of reduction blocks the
layer's dx plan runs per phase, dx_group), each strip's plan right after its
copy: the plan reads tiles still in cache, where a whole copy first (48 MB on
single_step_t1) writes them out to memory and reads them back. Strips go gate
by gate (a gate whose K is not whole blocks gets its last block zero-padded),
in order of the hidden blocks: each output tile is reduced in the order, and
in the chunks (dx_chunk), of the layer's plan."""
import numpy as np

from brgemm import dtypes
from brgemm import plan as bplan
from brgemm.arrays import aligned_empty
from brgemm.layouts import nblocks, to_blocks
from brgemm.loopspec import Loop, parse_spec
from brgemm.machine import cpu_threads
from primitives import fc
from primitives._args import widened
from primitives.fc_plans import plan_copying

_plans = bplan.PlanCache(maxsize=32)


def reads_in_place(g, dtype, backend, x, w_ih, w_hh, token):
    """Which weights the functional forms read in place: a set of "w_ih", "w_hh".
    W_ih wherever fc.can_read_w allows: the input projection as
    lstm_plans.projection_t_nest (no W_ih^T tiles; it also ran 8-14% faster than
    the blocked projection on every shape measured, RESULTS.md), backward-data
    from tiles made straight from W_ih (one copy, not two). W_hh too where
    there is one step (T = 1; later steps' recurrent nest streams W_hh's tiles)
    and fc.reads_w's rule holds for h0 W_hh^T: its product joins the
    projection's (projection_t_nest's hidden), the step is the cell alone
    (cell_plan), and backward-data makes W_hh's tiles straight from it."""
    out = set()
    # bf16 (x and W bf16 already): whole blocks only, where the kernel's VNNI
    # pairs of x^T and h0^T have no ragged depth
    whole = dtype == "f32" or (g.C % g.bc == 0 and g.K % g.bk == 0)
    if whole and fc.can_read_w(dtype, backend, x, w_ih, token):
        out.add("w_ih")
        if g.T == 1 and fc.reads_w(g.fc_step, dtype, backend, x, w_hh, token):
            out.add("w_hh")
    return frozenset(out)


# lstm.backward's backward-data copies the tiles of a W read in place inside
# its own plan (copies_w) at COPY_THREADS threads or more and COPY_STEPS steps
# or fewer. Its alternative is cheap: the forward's projection makes those
# tiles as it reads W anyway (copy_rows), so the copying plan saves only their
# write-out and read-back, and pays for W read again, in rows of one block
# column a core at a time. With many threads that write-out competes for the
# memory bandwidth all cores share, and the copying plan ran ahead; with few
# it ran a little behind. Over several steps' rows it ran level or behind:
# it reads all of dG once per block column of its output (benchmarks/RESULTS.md,
# issue 17; the thread counts between were not measured).
COPY_THREADS = 16
COPY_STEPS = 1


def copies_w(g, in_place):
    """Of the weights read in place (reads_in_place), those whose
    backward-data copies W's tiles inside its own plan (fc_plans.plan_copying
    on dG's and the output's tiles, copy_b ops), so that the forward's
    projection makes no tiles of them: where the gates are whole blocks (W's
    rows are then dG's columns), the threads and steps are as COPY_THREADS
    and COPY_STEPS say, fc's rule (fc.copies_w) holds for the product (W_ih's
    over every step's rows, W_hh's over step 0's) and its rows are few
    against W (fc.small_batch)."""
    threads = cpu_threads()
    if g.K % g.bk or threads < COPY_THREADS or g.T > COPY_STEPS:
        return frozenset()
    geometries = {"w_ih": g.fc_input, "w_hh": g.fc_step}
    return frozenset(w for w in in_place
                     if fc.copies_w(fg := geometries[w], threads) and fc.small_batch(fg))


def strip_plan(g, rows, Sb, bs, kn, first):
    """out[n][j] (+)= sum over kn hidden blocks r of dG[n][r] @ w[j][r]: tensors dy
    (dG from the strip's first block on, rows 4Kb tiles apart), w (the strip's
    tiles [Sb][kn][bk][bs]) and out; first: the first strip (beta 0), else
    accumulated. Tasks: every output tile, those of one column block together."""
    def record():
        rec = bplan.Recorder(dict(dy="f32", w="f32", out="f32"), spec="CN")
        chunk, tile = g.fc_chunks[1], g.bn * g.bk
        blocks = {beta: bplan.Block(g.bn, bs, g.bk, lda=g.bk, ldb=bs, ldc=bs, beta=beta)
                  for beta in (0.0, 1.0)}
        loops = parse_spec("CN", [Loop("c", 0, Sb, 1), Loop("n", 0, rows, 1)], where="strip: ")
        for phase, task, at in loops.walk():
            j, n = at["c"], at["n"]
            rec.at(phase, task)
            for r0 in range(0, kn, chunk):
                rs = range(r0, min(r0 + chunk, kn))
                rec.gemm(blocks[0.0 if first and r0 == 0 else 1.0],
                         "dy", [(n * 4 * g.Kb + r) * tile for r in rs],
                         "w", [(j * kn + r) * g.bk * bs for r in rs],
                         "out", (n * Sb + j) * g.bn * bs)
        return rec.finish()
    return _plans.get(("strip", g, rows, Sb, bs, kn, first), record)


def backward_data(g, dG, w, bs, out, buffer, backend, copying=None):
    """out [R][Sb][bn][bs] = dG [R][4Kb][bn][bk] @ W (plain [4K, S], f32), strip
    by strip, or with copying (the product as fc's geometry: the layer's gx
    for W_ih, gh1 for W_hh; where copies_w takes W) by fc's copying plan;
    buffer(name, shape): the strips' or copies' scratch tiles."""
    fg = copying
    if fg is not None:
        p = plan_copying(fg, tiles=True)
        p.run(backend=backend, dy=dG, w=w, dx=out, wt=buffer("w_copies", (p.extent["wt"],)))
        return out
    rows, Sb = dG.shape[0], nblocks(w.shape[1], bs)
    ks, tile, flat = g.fc_groups[1] or g.Kb, g.bn * g.bk, dG.reshape(-1)
    for q in range(4):
        for k0 in range(0, g.Kb, ks):
            kn = min(ks, g.Kb - k0)
            src = w[q * g.K + k0 * g.bk:q * g.K + min(g.K, (k0 + kn) * g.bk)]
            tiles = to_blocks(src, g.bk, bs, swap_grid=True,
                              out=buffer("w_strip", (Sb, kn, g.bk, bs)))
            strip_plan(g, rows, Sb, bs, kn, q == 0 and k0 == 0).run(
                backend=backend, dy=flat[(q * g.Kb + k0) * tile:], w=tiles, out=out)
    return out


NO_TILES = np.zeros(0, np.float32)  # the BPTT plan's wht at T = 1, where it reads none


def weight_tiles(g, w, bs, name, buffer=None, dtype="f32", vnni=False):
    """W's tiles for the layer's dx and dh plans, [Sb][4Kb][bk][bs], straight
    from the plain W [4K, S] (no transposed tiles to transpose), all at once
    (LSTM.w_ih_tiles, w_hh_tiles): one copy where the gates are whole blocks,
    else gate by gate; rounded to `dtype` and in VNNI pairs with vnni, on the
    way. buffer(name, shape, dtype): where (default: new)."""
    K, ab = g.K, dtypes.NUMPY[dtype]
    w = widened(w, ab)
    shape = (nblocks(w.shape[1], bs), 4 * g.Kb, g.bk, bs)
    out = buffer(name, shape, ab) if buffer else aligned_empty(shape, ab)
    if K % g.bk == 0:
        return to_blocks(w, g.bk, bs, swap_grid=True, dtype=ab, vnni=vnni, out=out)
    for q in range(4):
        out[:, q * g.Kb:(q + 1) * g.Kb] = to_blocks(w[q * K:(q + 1) * K], g.bk, bs,
                                                    swap_grid=True, dtype=ab, vnni=vnni)
    return out


def fits(g, S, bs):
    """Whether W [4K, S]'s tiles of bk x bs are whole (no padding), as the
    projection's copies of them (lstm_plans.projection_t_nest's tiles) need."""
    return g.K % g.bk == 0 and S % bs == 0
