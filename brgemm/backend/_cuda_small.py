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


class Launch(collections.namedtuple("Launch", "entry cluster parts tile")):
    """How one phase launches: the entry point, the blocks of a cluster
    (sharing each tile's k-steps), the clusters per task (sharing its tiles)
    and the most rows and columns of a tile."""


def small_path(phase, allow_tc, dev, forced, max_cluster):
    """The small-problem path's Launch of a phase, or None where it does not
    apply: one-call tasks of one kernel shape, all on the tensor cores, whose
    tiles (up to 128 x 128) number fewer than the SMs. Each task's block is
    cut into tiles of 128 x 128 down to 64 x 64, one cluster per tile, its
    k-steps split within the cluster: the tile and cluster size of least cost
    by the model below. dev: the device (sm_count, has_tc, max_clusters);
    forced: False (never), None (the model's choice) or (tile rows, columns,
    cluster size, entry) wherever the path applies; max_cluster: the most
    blocks a cluster may have."""
    if forced is False or phase["kernel"] is None or not (
            phase["all_tc"] and dev.has_tc and allow_tc):
        return None
    if phase["tasks"] * phase["tiles"] >= dev.sm_count:
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
