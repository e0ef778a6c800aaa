"""The CUDA backend's TMA path (kernels/cuda/tma_tile.cuh): which phases may
read their operands through tensor maps, and the maps themselves.

A phase qualifies where its tasks are one call each of one bf16 tensor-core
kernel shape (a uniform phase, as brgemm/backend/cuda.py's _phase_shapes
finds it), every call reads A from one tensor slot and B from one, k is a
multiple of 64, and every block lies inside the 2-D view [extent // ld][ld]
of its tensor without wrapping a row: a block at element offset e is then
(column e % ld, row e // ld) of that view, which is what the kernel's
copies address. A tensor map describes one such view (bf16, 128-byte
swizzle, a box of 64 columns by the tile's rows); maps are encoded on the
host once per (address, view, box) and passed by value in the launch."""
import numpy as np

# cuTensorMapEncodeTiled's enum values (cuda.h): CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
# CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B
MAP_BF16, MAP_SWIZZLE_128B, MAP_L2_256B = 9, 3, 3
TK = 64          # k per stage, the box's columns
INT32 = 1 << 31  # coordinates are signed 32-bit


def phase_operands(blocks, calls, a_offs, b_offs, phase_begin, extents, uniform_kernels):
    """Per phase: dict(a, b, lda, ldb, a_rows, b_rows) of the tensor views
    its copies read (slots a and b), or None where the phase does not
    qualify. a_offs, b_offs in bytes; extents: elements per tensor slot (None:
    unknown, nothing qualifies); uniform_kernels: the kernel index of each
    uniform phase, None otherwise."""
    out = []
    for p, kernel in enumerate(uniform_kernels):
        out.append(None if extents is None or kernel is None else _operands(
            blocks[kernel], calls[phase_begin[p]:phase_begin[p + 1]], a_offs, b_offs, extents))
    return out


def _operands(blk, calls, a_offs, b_offs, extents):
    if not (blk.dtype == "bf16" and not getattr(blk, "b_vnni", False) and blk.k % TK == 0
            and blk.lda % 8 == 0 and blk.ldb % 8 == 0 and len(calls)):
        return None
    a, b = int(calls["a"][0]), int(calls["b"][0])
    if np.any(calls["a"] != a) or np.any(calls["b"] != b):
        return None
    lda, ldb = int(blk.lda), int(blk.ldb)
    a_rows, b_rows = int(extents[a]) // lda, int(extents[b]) // ldb
    if not (0 < lda < INT32 and 0 < ldb < INT32 and 0 < a_rows < INT32 and 0 < b_rows < INT32):
        return None
    # every A/B offset entry the calls read
    starts, counts = calls["offs"].astype(np.int64), calls["count"].astype(np.int64)
    first = np.repeat(starts - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
    idx = first + np.arange(int(counts.sum()))
    ea = np.asarray(a_offs, np.uint64)[idx].astype(np.int64) // 2
    eb = np.asarray(b_offs, np.uint64)[idx].astype(np.int64) // 2
    ok = (np.all(ea % lda + blk.k <= lda) and np.all(ea // lda + blk.m <= a_rows)
          and np.all(eb % ldb + blk.n <= ldb) and np.all(eb // ldb + blk.k <= b_rows))
    return dict(a=a, b=b, lda=lda, ldb=ldb, a_rows=a_rows, b_rows=b_rows) if ok else None


# the TMA entry of each cp.async entry a qualifying phase may take: unsplit,
# and (with the backend's tma_split) in clusters
TMA_ENTRY = {("tc", False): "tc_tma", ("tc_small", False): "tc_small_tma",
             ("tc_split", True): "tc_split_tma", ("tc_small", True): "tc_small_split_tma"}


def tile_rows(entry, m, tile):
    """The rows of the tiles the TMA entry runs (run_phase_tma's choice): A's box."""
    return 128 if entry in ("tc_tma", "tc_split_tma") and m > 64 and tile[0] > 64 else 64


class Maps:
    """The launch's brgemm_cuda_tma_maps per (phase operands, addresses, box
    rows), encoded once and kept (the driver copies the launch's parameters
    at each launch, and a CUDA graph at its capture); the most recent KEEP
    of them (runs on ever new tensors must not grow it without bound)."""

    KEEP = 256

    def __init__(self, dev):
        self.dev = dev
        self._made = {}

    def get(self, ops, addresses, box_rows):
        key = (addresses[ops["a"]], addresses[ops["b"]], ops["lda"], ops["ldb"],
               ops["a_rows"], ops["b_rows"], box_rows)
        maps = self._made.get(key)
        if maps is None:
            if len(self._made) >= self.KEEP:
                self._made.pop(next(iter(self._made)))  # the oldest
            maps = self.dev.ffi.new("brgemm_cuda_tma_maps *")
            self.dev.tensor_map(maps.a, key[0], ops["lda"], ops["a_rows"], box_rows)
            self.dev.tensor_map(maps.b, key[1], ops["ldb"], ops["b_rows"], TK)
            self._made[key] = maps
        return maps
