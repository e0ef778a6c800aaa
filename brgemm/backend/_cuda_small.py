"""The CUDA backend's small-problem path: how a phase of few one-call tasks
launches so that more SMs work on it (brgemm/backend/cuda.py asks; the kernel
is kernels/cuda/brgemm_plan.cu, whose launch argument carries `parts` and the
tile caps)."""
import collections

# The small-problem path's model, in k-steps of a 128 x 128 tile (one launch
# on the H200 timed each launch of each FC pass: benchmarks/RESULTS.md, CUDA
# section): a smaller tile's k-step, a launch's fixed cost, and the sum over
# a cluster of `size` blocks; a tile smaller than the block only unsplit or
# in pairs (more splitting lost there).
_TILE_WEIGHT = {(128, 128): 1.0, (128, 64): 0.65, (64, 128): 0.65, (64, 64): 0.45}
_SMALL_FIXED, _SMALL_SPLIT, _SMALL_SPLIT_PER_BLOCK, _SMALL_MOST_CUT = 4.5, 2.0, 0.5, 2

# The same for launches on the TMA entries (kernels/cuda/tma_tile.cuh), in
# microseconds on the H200, fitted to in-graph times of every tile and cluster
# on the FC shapes' GEMM plans and FC passes (benchmarks/RESULTS.md, CUDA
# section): a k-step of each tile with one block per SM, how much longer one
# takes on the two-blocks-per-SM entry, a launch's fixed cost, a block's next
# tile (its epilogue and pipeline refill, per 128 x 128 elements) and the sum
# over a cluster (128 x 128 tiles, smaller ones; and per block of the
# cluster). Here one block per SM is not a bound: a phase of up to two rounds
# of 128 x 128 tiles may take smaller tiles on the 64-row entry.
_TMA_STEP_US = {(128, 128): 0.62, (128, 64): 0.43, (64, 128): 0.46, (64, 64): 0.34}
_TMA_SHARED, _TMA_FIXED_US, _TMA_NEXT_TILE_US = 1.45, 3.3, 2.0
_TMA_SPLIT_WHOLE_US, _TMA_SPLIT_US, _TMA_SPLIT_PER_BLOCK_US = 2.3, 1.6, 0.15


class Launch(collections.namedtuple("Launch", "entry cluster parts tile")):
    """How one phase launches: the entry point, the blocks of a cluster
    (sharing each tile's k-steps), the clusters per task (sharing its tiles)
    and the most rows and columns of a tile."""


def small_path(phase, allow_tc, dev, forced, max_cluster, tma=None):
    """The small-problem path's Launch of a phase, or None where it does not
    apply: one-call tasks of one kernel shape, all on the tensor cores, whose
    tiles (up to 128 x 128) number fewer than the SMs. Each task's block is
    cut into tiles of 128 x 128 down to 64 x 64, one cluster per tile, its
    k-steps split within the cluster: the tile and cluster size of least cost
    by the model below. dev: the device (sm_count, has_tc, max_clusters,
    blocks_per_sm); forced: False (never), None (the model's choice) or (tile
    rows, columns, cluster size, entry) wherever the path applies;
    max_cluster: the most blocks a cluster may have; tma: where the launch
    will take the TMA entries, their names by (entry, clustered) (the TMA
    model then, and phases of up to two rounds of tiles), else None."""
    if forced is False or phase["kernel"] is None or not (
            phase["all_tc"] and dev.has_tc and allow_tc):
        return None
    if phase["tasks"] * phase["tiles"] >= dev.sm_count * (2 if tma else 1):
        return None
    m, n, steps = phase["m"], phase["n"], phase["steps"] // phase["tiles"]

    def parts(tile):
        return -(-m // tile[0]) * -(-n // tile[1])
    if forced is not None:
        tm, tn, size, entry = forced
        return Launch(entry if size > 1 or entry != "tc_split" else "tc", size, parts((tm, tn)),
                      (tm, tn))
    # the tiles the kernel would take under each cap (a block of 64 rows or
    # columns fills 64 whatever the cap), and the cheapest tile and cluster size
    tiles = sorted({(tm if m > 64 else 64, tn if n > 64 else 64) for tm in (128, 64)
                    for tn in (128, 64)})
    if tma:
        return _tma_choice(phase, dev, max_cluster, tma, tiles, parts, steps)
    best = None
    for tile in tiles:
        blocks = phase["tasks"] * parts(tile)
        most = max_cluster if parts(tile) == 1 else min(max_cluster, _SMALL_MOST_CUT)
        for size in range(1, max(most, 1) + 1):
            entry = "tc" if size == 1 else "tc_small" if tile[0] == 64 else "tc_split"
            if size > 1 and blocks > dev.max_clusters(entry, size):
                continue
            split = (size > 1) * (_SMALL_SPLIT + _SMALL_SPLIT_PER_BLOCK * size)
            cost = -(-blocks * size // dev.sm_count) * (
                -(-steps // size) * _TILE_WEIGHT[tile] + _SMALL_FIXED + split)
            key = (cost, size, -tile[0] * tile[1])  # ties: the smaller cluster, larger tile
            if best is None or key < best[0]:
                best = key, Launch(entry, size, parts(tile), tile)
    return best[1]


def _tma_choice(phase, dev, max_cluster, names, tiles, parts, steps):
    """The small-problem path's Launch on the TMA entries (names: the TMA
    entry of each (entry, clustered)) by the TMA model: every tile and
    cluster size, unsplit tiles on one or two blocks per SM (the 64-row
    entry takes 64-row tiles only), clusters one block per SM (in clusters
    the 64-row entry was never the fastest) and only where the tiles make
    less than one round."""
    one_round = phase["tasks"] * phase["tiles"] < dev.sm_count
    best = None
    for tile in tiles:
        blocks = phase["tasks"] * parts(tile)
        most = max_cluster if parts(tile) == 1 else min(max_cluster, _SMALL_MOST_CUT)
        for size in range(1, max(most, 1) + 1 if one_round else 2):
            for entry in ("tc", "tc_small") if size == 1 else ("tc_split",):
                if entry == "tc_small" and tile[0] != 64:
                    continue
                name = names[(entry, size > 1)]
                if size == 1:  # a persistent grid: each block takes its share of the tiles
                    rounds = -(-blocks // (dev.sm_count * dev.blocks_per_sm(name)))
                else:
                    held = dev.max_clusters(name, size)
                    if held == 0:
                        continue
                    rounds = -(-blocks // held)
                step = _TMA_STEP_US[tile] * (_TMA_SHARED if dev.blocks_per_sm(name) > 1 else 1)
                split = 0.0 if size == 1 else _TMA_SPLIT_PER_BLOCK_US * size + (
                    _TMA_SPLIT_WHOLE_US if tile == (128, 128) else _TMA_SPLIT_US)
                cost = _TMA_FIXED_US + rounds * (-(-steps // size) * step + split) + (
                    rounds - 1) * _TMA_NEXT_TILE_US * tile[0] * tile[1] / 16384
                key = (cost, size, -tile[0] * tile[1])
                if best is None or key < best[0]:
                    best = key, Launch(entry, size, parts(tile), tile)
    return best[1]
