"""The LSTM's backward-data on a plain weight read in place (the functional forms,
lstm_layer.reads_in_place): out = dG W, W [4K, S] as the caller gave it.

    dG [R][4Kb][bn][bk] (tiles),  W [4K, S] (plain, f32)  ->  out [R][Sb][bn][bs]

The kernel streams W as its B operand in tiles; read in place, a tile's rows
lie S floats apart and share L1 sets (RESULTS.md: twice as slow as a copy plus
the plan). So W is copied into tiles, but a strip of hidden blocks at a time
(the group of reduction blocks the layer's dx plan runs per phase, dx_group),
each strip's plan right after its copy: the plan reads tiles still in cache, where
a whole copy first (48 MB on single_step_t1) writes them out to memory and
reads them back. Strips go gate by gate (a gate whose K is not whole blocks
gets its last block zero-padded), in order of the hidden blocks: each output
tile is reduced in the order, and in the chunks (dx_chunk), of the layer's plan.

Where a backward follows a forward that read W in place and W's tiles are whole
(`fits`), the forward's projection made the tiles as it read W, from cache
(lstm_plans.projection_t_nest's tiles) and the layer's own plans run on them;
backward_data is for the rest (padded tiles, a backward without that forward)."""
import numpy as np

from brgemm import plan as bplan
from brgemm.arrays import aligned_empty
from brgemm.layouts import nblocks, to_blocks
from brgemm.loopspec import Loop, parse_spec

_plans = bplan.PlanCache(maxsize=32)


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


def backward_data(g, dG, w, bs, out, buffer, backend):
    """out [R][Sb][bn][bs] = dG [R][4Kb][bn][bk] @ W (plain [4K, S], f32), strip
    by strip; buffer(name, shape): the strips' scratch tiles."""
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


def weight_tiles(g, w, bs, name, buffer=None):
    """W's tiles for the layer's dx and dh plans, [Sb][4Kb][bk][bs], straight
    from the plain W [4K, S] (no transposed tiles to transpose), all at once
    (LSTM.w_ih_tiles, w_hh_tiles): one copy where the gates are whole blocks,
    else gate by gate. buffer(name, shape, dtype): where (default: new)."""
    K = g.K
    shape = (nblocks(w.shape[1], bs), 4 * g.Kb, g.bk, bs)
    out = buffer(name, shape, np.float32) if buffer else aligned_empty(shape, np.float32)
    if K % g.bk == 0:
        return to_blocks(w, g.bk, bs, swap_grid=True, out=out)
    for q in range(4):
        out[:, q * g.Kb:(q + 1) * g.Kb] = to_blocks(w[q * K:(q + 1) * K], g.bk, bs,
                                                    swap_grid=True)
    return out


def fits(g, S, bs):
    """Whether W [4K, S]'s tiles of bk x bs are whole (no padding), as the
    projection's copies of them (lstm_plans.projection_t_nest's tiles) need."""
    return g.K % g.bk == 0 and S % bs == 0
