/* The tensor-core path fed by the bulk tensor copy engine (TMA), included by
 * brgemm_plan.cu (sm_90a only) after its tile code.
 *
 * For uniform phases (task t is call t alone, one kernel shape) whose A and B
 * blocks each lie in one tensor of the phase's row stride: the host describes
 * each of the two tensors as a 2-D array [rows][ld] of bf16 (a tensor map,
 * 128-byte swizzle: the layout wgmma reads, as the cp.async path writes it),
 * so a block offset becomes (row, column) coordinates. One producer warp
 * (warp 8: its lanes look up 32 blocks' coordinates at once, lane 0 issues the
 * copies) walks the block's work (units blockIdx.x,
 * blockIdx.x + gridDim.x, ...; a unit is one part of one task, its tiles
 * part, part + parts, ...) and issues each k-step's copies into the next free
 * stage; the two consumer warpgroups wait on that stage's "full" mbarrier,
 * issue wgmma, and release the stage on its "empty" mbarrier once the wgmma
 * that read it is done. No block-wide barrier per k-step; the producer runs
 * ahead into the next tile (or unit) while the consumers finish this one
 * through a C tile staged in shared memory of its own (coalesced stores;
 * stores straight from the accumulators measured slower on the H200).
 *
 * The host guarantees (brgemm/backend/_cuda_tma.py): k a multiple of 64 (a
 * box never reads past a block's k), each block's columns inside its row
 * (column + k <= lda for A, column + n <= ldb for B) and rows inside the
 * map; rows and columns a tile reads past m or n are other data or zeros
 * (outside the map), and their results are never stored. No memory-order
 * ops. In a cluster (SPLIT entries) the blocks split each tile's k-steps and
 * sum the partial tiles as tc_tile does; no persistence there (one round of
 * clusters, the producer warp in each tile's cluster barriers). */

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
/* one arrival that also expects `bytes` of copies to complete on the barrier */
__device__ __forceinline__ void mbar_expect(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
/* wait until the barrier's phase of this parity has completed */
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred p;\nTMA_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra TMA_WAIT;\n}\n" ::"r"(bar), "r"(parity) : "memory");
}
/* a box of the 2-D tensor map at (column c0, row c1) into shared memory at
 * dst, completing on the mbarrier */
__device__ __forceinline__ void tma_load(uint32_t dst, const void* map, int32_t c0, int32_t c1,
                                         uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}
/* the consumers alone (the producer warp never comes): named barrier 1 */
__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, 256;\n" ::: "memory");  /* THREADS */
}

/* the C tile staged in shared memory for coalesced stores (apart from the
 * stages, which the producer refills meanwhile): BM rows of BN + 8 floats */
template <int BM, int BN>
__host__ __device__ constexpr int tma_staging_bytes() { return BM * (BN + 8) * 4; }

/* the stages a BM x BN tile takes on the TMA path out of `budget` bytes
 * (stages and the C tile) */
template <int BM, int BN>
__host__ __device__ constexpr int tma_stages(int budget, int most) {
  return stages_for<BM, BN>(budget - tma_staging_bytes<BM, BN>(), most);
}

/* step bookkeeping shared by the producer and the consumers: the stage slot
 * and the parity of its barriers' current phase */
struct Ring {
  int slot = 0;
  uint32_t phase = 0;
  template <int NS>
  __device__ __forceinline__ void next() {
    if (++slot == NS) slot = 0, phase ^= 1u;
  }
};

/* block b's first A and B elements as (column, row) of their tensors' views:
 * out = {A column, A row, B column, B row} */
__device__ __forceinline__ void block_coords(const Call& c, int64_t b, int64_t lda, int64_t ldb,
                                             int32_t (&out)[4]) {
  const uint64_t ea = c.ao[b] / 2, eb = c.bo[b] / 2;
  if ((ea | eb) >> 32 == 0) {  /* 32-bit divisions where they do (lda, ldb < 2^31) */
    out[0] = (int32_t)((uint32_t)ea % (uint32_t)lda), out[1] = (int32_t)((uint32_t)ea / (uint32_t)lda);
    out[2] = (int32_t)((uint32_t)eb % (uint32_t)ldb), out[3] = (int32_t)((uint32_t)eb / (uint32_t)ldb);
  } else {
    out[0] = (int32_t)(ea % lda), out[1] = (int32_t)(ea / lda);
    out[2] = (int32_t)(eb % ldb), out[3] = (int32_t)(eb / ldb);
  }
}

/* the producer warp: every k-step of every tile of this block's units. Its
 * 32 lanes look up the coordinates of 32 blocks at once (offset loads and
 * divisions in parallel, not one block's on each k-step's path), lane 0
 * (thread THREADS) takes each block's by shuffle and issues the copies.
 * SPLIT (a launch in clusters): this rank's share of each tile's k-steps, as
 * tc_tile takes it, and the whole warp joins the consumers' three cluster
 * barriers of each tile */
template <int BM, int BN, int NS, bool SPLIT>
__device__ __forceinline__ void tma_produce(const brgemm_cuda_phase_args& args, const TmaMaps& maps,
                                            uint32_t stages, uint32_t full, uint32_t empty) {
  using S = Stage<BM, BN>;
  const int lane = (int)threadIdx.x % 32;
  const bool issuer = lane == 0;
  uint32_t rank = 0, nranks = 1;
  if constexpr (SPLIT) rank = cluster_rank(), nranks = cluster_blocks();
  if (issuer) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(&maps.a) : "memory");
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(&maps.b) : "memory");
  }
  Ring ring;
  const int64_t units = args.tasks * args.parts, unit0 = blockIdx.x / nranks;
  for (int64_t u = unit0; u < units; u += gridDim.x / nranks) {
    const Call c = make_call(args, args.task0 + u / args.parts, true);
    if (u == unit0 && issuer) wait_for_previous_launch();  /* before the first tensor read */
    const brgemm_cuda_block* kd = c.kd;
    const int64_t lda = kd->lda, ldb = kd->ldb, k = kd->k, ksteps = k / TK;
    const int64_t first = SPLIT ? c.count * ksteps * rank / nranks : 0;
    const int64_t last = SPLIT ? c.count * ksteps * (rank + 1) / nranks : c.count * ksteps;
    const int64_t b0 = first / ksteps;  /* this rank's first block */
    const int cols = (int)((kd->n + BN - 1) / BN), tiles = (int)((kd->m + BM - 1) / BM) * cols;
    for (int t = (int)(u % args.parts); t < tiles; t += args.parts) {
      const int i0 = t / cols * BM, j0 = t % cols * BN;
      int32_t mine[4] = {0, 0, 0, 0};  /* block (b - b0) / 32 * 32 + b0 + lane's coordinates */
      for (int64_t b = b0; b * ksteps < last; ++b) {  /* (the same trips on every lane) */
        const int from = (int)((b - b0) % 32);
        if (from == 0 && b + lane < c.count) block_coords(c, b + lane, lda, ldb, mine);
        const int32_t ac = __shfl_sync(0xffffffffu, mine[0], from);
        const int32_t ar = __shfl_sync(0xffffffffu, mine[1], from) + i0;
        const int32_t bc = __shfl_sync(0xffffffffu, mine[2], from) + j0;
        const int32_t br = __shfl_sync(0xffffffffu, mine[3], from);
        if (!issuer) continue;
        /* this rank's k-steps of block b */
        const int32_t kb = SPLIT && b * ksteps < first ? (int32_t)(first - b * ksteps) * TK : 0;
        const int32_t ke = SPLIT && (b + 1) * ksteps > last ? (int32_t)(last - b * ksteps) * TK
                                                             : (int32_t)k;
        for (int32_t k0 = kb; k0 < ke; k0 += TK) {
          mbar_wait(empty + 8 * ring.slot, ring.phase ^ 1u);  /* the consumers are done with it */
          const uint32_t st = stages + ring.slot * S::BYTES, bar = full + 8 * ring.slot;
          mbar_expect(bar, S::BYTES);
          tma_load(st, &maps.a, ac + k0, ar, bar);
#pragma unroll
          for (int q = 0; q < BN / 64; ++q)
            tma_load(st + S::A_BYTES + q * S::B_REGION, &maps.b, bc + 64 * q, br + k0, bar);
          ring.next<NS>();
        }
      }
      if (SPLIT && nranks > 1) {  /* the partial tiles in, the sums read, the stores done */
        __syncwarp();
        cluster_sync();
        cluster_arrive();
        cluster_wait();
      }
    }
  }
}

/* the consumers: every tile of this block's units, in the producer's order */
template <int BM, int BN, int NS, bool SPLIT>
__device__ __forceinline__ void tma_consume(const brgemm_cuda_phase_args& args, uint32_t stages,
                                            uint32_t full, uint32_t empty, float* tile) {
  using S = Stage<BM, BN>;
  constexpr int LD = BN + 8;
  constexpr int WN = BM == 128 ? BN : 64;
  constexpr bool SPLIT_K = BM == 64 && BN == 64;
  const int tid = threadIdx.x, wg = tid / 128;
  const int row0 = BM == 128 ? 64 * wg : 0, col0 = BM == 128 || SPLIT_K ? 0 : 64 * wg;
  uint32_t rank = 0, nranks = 1;
  if constexpr (SPLIT) rank = cluster_rank(), nranks = cluster_blocks();
  Ring ring;
  const int64_t units = args.tasks * args.parts, unit0 = blockIdx.x / nranks;
  for (int64_t u = unit0; u < units; u += gridDim.x / nranks) {
    const Call c = make_call(args, args.task0 + u / args.parts, true);
    if (u == unit0) wait_for_previous_launch();  /* before the first C access */
    const brgemm_cuda_block* kd = c.kd;
    const int64_t all = c.count * (kd->k / TK);  /* this rank's share, as the producer's */
    const int64_t steps = SPLIT ? all * (rank + 1) / nranks - all * rank / nranks : all;
    const int cols = (int)((kd->n + BN - 1) / BN), tiles = (int)((kd->m + BM - 1) / BM) * cols;
    for (int t = (int)(u % args.parts); t < tiles; t += args.parts) {
      float acc[WN / 2];
#pragma unroll
      for (int e = 0; e < WN / 2; ++e) acc[e] = 0.0f;
      int prev = -1;  /* the stage the wgmma group still in flight reads */
      for (int64_t s = 0; s < steps; ++s) {
        mbar_wait(full + 8 * ring.slot, ring.phase);  /* its copies have landed */
        const uint32_t st = stages + ring.slot * S::BYTES;
        const uint32_t a0 = st + row0 * 128, b0 = st + S::A_BYTES + (col0 / 64) * S::B_REGION;
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int kk = SPLIT_K ? 2 * wg : 0; kk < (SPLIT_K ? 2 * wg + 2 : TK / 16); ++kk) {
          const uint64_t da = smem_desc(a0 + kk * 32, 16, 1024);
          const uint64_t db = smem_desc(b0 + kk * 2048, S::B_REGION, 1024);
          if constexpr (WN == 128) wgmma_m64n128k16(acc, da, db);
          else wgmma_m64n64k16(acc, da, db);
        }
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
        /* the previous step's wgmma has read its stage: one arrival per warpgroup */
        if (prev >= 0 && tid % 128 == 0) mbar_arrive(empty + 8 * prev);
        prev = ring.slot;
        ring.next<NS>();
      }
      asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
      if (prev >= 0 && tid % 128 == 0) mbar_arrive(empty + 8 * prev);
      consumers_sync();  /* the last tile's stores have read the staged tile */
      stage_acc<WN, LD, SPLIT_K>(tile, acc, wg, row0, col0, [] { consumers_sync(); });
      /* a split tile: this rank finishes rows r0 .. r1 of the sum over the ranks,
         between the cluster barriers the producer warp joins too (as tc_tile) */
      int r0 = 0, r1 = BM;
      if (SPLIT && nranks > 1) {
        r0 = BM * rank / nranks, r1 = BM * (rank + 1) / nranks;
        cluster_sync();
        sum_ranks<BN, LD>(tile, r0, r1, nranks);
        consumers_sync();
        cluster_arrive();
      }
      const int64_t i0 = (int64_t)(t / cols) * BM, j0 = (int64_t)(t % cols) * BN;
      store_tile<BN, LD>(c, tile, i0, j0, r0, r1);
      if (SPLIT && nranks > 1) cluster_wait();
    }
  }
}

/* one phase on the TMA path: barriers set up, then the producer warp and
 * the consumers part ways (budget: the stages' bytes; the barriers follow) */
template <int BM, int BN, int BUDGET, int MOST, bool SPLIT>
__device__ __forceinline__ void tma_phase(const brgemm_cuda_phase_args& args, const TmaMaps& maps,
                                          unsigned char* smem) {
  constexpr int NS = tma_stages<BM, BN>(BUDGET, MOST);
  static_assert(NS >= 2 && NS * Stage<BM, BN>::BYTES + tma_staging_bytes<BM, BN>() <= BUDGET,
                "the stages and the C tile fit the budget");
  const uint32_t stages = smem_addr(smem), full = stages + BUDGET, empty = full + 8 * NS;
  if (threadIdx.x == 0) {
    for (int s = 0; s < NS; ++s) {
      mbar_init(full + 8 * s, 1);   /* the producer's arrival (and the copies' bytes) */
      mbar_init(empty + 8 * s, 2);  /* one arrival per consumer warpgroup */
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x >= THREADS) {  /* the producer warp */
    tma_produce<BM, BN, NS, SPLIT>(args, maps, stages, full, empty);
    return;
  }
  tma_consume<BM, BN, NS, SPLIT>(args, stages, full, empty,
                          (float*)(smem + NS * Stage<BM, BN>::BYTES));
}
