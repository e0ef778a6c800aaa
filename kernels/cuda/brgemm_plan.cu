/* One phase of a recorded plan on an NVIDIA GPU: a grouped batch-reduce GEMM.
 *
 * Thread block cluster b runs task (task0 + b / parts) of the phase: its kernel
 * calls in recorded order, each C block += alpha * sum_i A_i @ B_i (beta * C
 * first), each followed by its epilogue ops; exactly the CPU executor's
 * contract (kernels/cpu/plan.c). Tasks of one phase write disjoint elements,
 * so clusters never talk to each other; the calls of one task are ordered by
 * barriers. With parts > 1 (one-call tasks whose tiles would leave SMs idle)
 * the task's tiles are dealt out over `parts` clusters, each taking tiles
 * b % parts, b % parts + parts, ... A cluster is one block unless the host
 * split the phase's
 * reductions (few tasks, long reductions: SMs would idle): then each block of
 * the cluster takes a contiguous share of every tensor-core tile's k-steps and
 * the partial tiles are summed through distributed shared memory, always in
 * rank order (deterministic), each rank finishing a share of the tile's rows.
 * Work off the tensor-core path runs on rank 0 alone.
 *
 * A call's C block is cut into tiles. Two paths compute a tile:
 *  - tensor cores (sm_90a, bf16 calls the host marked BRGEMM_CUDA_PATH_TC):
 *    two warpgroups issue wgmma on 64 x 64 x 16 steps from shared memory,
 *    which cp.async fills several stages ahead in the 128-byte swizzled layouts
 *    wgmma reads (A K-major, B N-major: B blocks are k x n row-major);
 *  - generic (f32, unaligned bf16, B in VNNI pairs, GPUs without wgmma): 64 x 64
 *    tiles of exact f32 FMA from shared memory, any shape, stride and offset.
 * Both finish the tile in registers: alpha, beta, then the element-wise ops
 * (bias, relu, sigmoid, tanh, bf16 copies) before the one store. The LSTM
 * cell ops read four gate blocks, so their calls store C first and run the
 * ops over memory afterwards (BRGEMM_CUDA_PATH_MEM_OPS).
 *
 * Op codes and tables come from kernels/cpu/brgemm_cpu.h, the launch
 * argument from brgemm_cuda.h. Never read tensors through the read-only
 * cache: a call may read what an earlier call of the same task wrote. */
#include <stdint.h>

#include "brgemm_cpu.h"
#include "brgemm_cuda.h"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define BRGEMM_TC 1
#include "wgmma_bf16.h"
#else
#define BRGEMM_TC 0
#endif

static_assert(sizeof(((brgemm_cuda_phase_args*)0)->tensors) == 8 * BRGEMM_CUDA_MAX_TENSORS,
              "tensors[] must hold BRGEMM_CUDA_MAX_TENSORS slots");

/* read by the host (cuModuleGetGlobal): does this build have the tensor-core
 * path, and the dynamic shared memory a launch needs */
extern "C" __device__ int brgemm_cuda_has_tc = BRGEMM_TC;
/* the record sizes this build was compiled with: a fatbin older than the
 * headers is refused rather than misread */
extern "C" __device__ int brgemm_cuda_record_bytes[4] = {
    (int)sizeof(brgemm_cuda_block), (int)sizeof(brgemm_cuda_phase_args),
    (int)sizeof(brgemm_plan_call), (int)sizeof(brgemm_plan_op)};

#define THREADS BRGEMM_CUDA_THREADS
#define TMA_THREADS BRGEMM_CUDA_TMA_THREADS  /* the consumers' two warpgroups + the producer warp */
static_assert(TMA_THREADS == THREADS + 32, "the TMA entries have one producer warp");

/* the TMA entries' two 2-D tensor maps (CUtensorMap, 128 bytes each), A's
 * tensor and B's: the host's brgemm_cuda_tma_maps, 64-byte aligned as
 * cp.async.bulk.tensor wants them in the parameter space */
struct alignas(64) TmaMaps {
  uint64_t a[16];
  uint64_t b[16];
};
static_assert(sizeof(TmaMaps) == sizeof(brgemm_cuda_tma_maps), "the maps are the host's");

struct Call {
  const brgemm_cuda_block* kd;
  const char* A;
  const char* B;
  char* C;                      /* the C block's first element */
  const uint64_t* ao;           /* byte offsets of the call's A blocks */
  const uint64_t* bo;
  int64_t count;
  const brgemm_plan_op* ops;
  int32_t n_ops;
  bool reg_ops;                 /* apply the ops in registers before the store */
  bool vec;                     /* the launch's vec_stores */
  const uint64_t* tensors;
};

__device__ __forceinline__ float bf16_to_f32(uint16_t h) { return __uint_as_float(((uint32_t)h) << 16); }

/* round to nearest even, as brgemm_f32_to_bf16 on the CPU; NaN stays NaN */
__device__ __forceinline__ uint16_t f32_to_bf16(float x) {
  uint32_t u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

__device__ __forceinline__ float* f32_at(const uint64_t* t, const brgemm_plan_op* op, int q) {
  return (float*)t[op->tensor[q]] + op->offset[q];
}
__device__ __forceinline__ uint16_t* bf16_at(const uint64_t* t, const brgemm_plan_op* op, int q) {
  return (uint16_t*)t[op->tensor[q]] + op->offset[q];
}

/* an element-wise op on the value v of C[i][j]; returns the new value */
__device__ __forceinline__ float op_value(const brgemm_plan_op* op, float v, int64_t i, int64_t j,
                                          const uint64_t* t) {
  switch (op->code) {
    case BRGEMM_OP_BIAS: return v + f32_at(t, op, 0)[j];
    case BRGEMM_OP_RELU: return v < 0.0f ? 0.0f : v;  /* NaN stays NaN (torch.relu) */
    case BRGEMM_OP_SIGMOID: return sigmoid(v);
    case BRGEMM_OP_TANH: return tanhf(v);
    case BRGEMM_OP_STORE_BF16: bf16_at(t, op, 0)[i * op->ld + j] = f32_to_bf16(v); return v;
    default: return v;
  }
}

/* an op on element (i, j) of the stored f32 C block c (row stride ldc) */
__device__ void op_memory(const brgemm_plan_op* op, float* c, int64_t i, int64_t j, int64_t ldc,
                          const uint64_t* t) {
  const int64_t e = i * ldc + j, s = i * op->ld + j, st = op->stride;
  if (op->code == BRGEMM_OP_LSTM_CELL) {
    float* g = f32_at(t, op, 0);  /* gate blocks have the call's row stride */
    const float ig = sigmoid(g[e]), fg = sigmoid(g[e + st]);
    const float gg = tanhf(g[e + 2 * st]), og = sigmoid(g[e + 3 * st]);
    const float cc = fg * f32_at(t, op, 1)[s] + ig * gg;
    g[e] = ig;
    g[e + st] = fg;
    g[e + 2 * st] = gg;
    g[e + 3 * st] = og;
    f32_at(t, op, 2)[s] = cc;
    const float h = og * tanhf(cc);
    f32_at(t, op, 3)[s] = h;
    if (op->tensor[4] >= 0) bf16_at(t, op, 4)[s] = f32_to_bf16(h);
  } else if (op->code == BRGEMM_OP_LSTM_CELL_BWD) {
    const float* gt = f32_at(t, op, 1);
    float* dcp = f32_at(t, op, 4);
    float* dg = f32_at(t, op, 5);
    const float dh = c[e] + f32_at(t, op, 0)[s];
    const float tc = tanhf(f32_at(t, op, 2)[s]);
    const float ig = gt[s], fg = gt[s + st], gg = gt[s + 2 * st], og = gt[s + 3 * st];
    const float dcc = dcp[s] + dh * og * (1.0f - tc * tc);
    const float d[4] = {dcc * gg * ig * (1.0f - ig), dcc * f32_at(t, op, 3)[s] * fg * (1.0f - fg),
                        dcc * ig * (1.0f - gg * gg), dh * tc * og * (1.0f - og)};
    for (int q = 0; q < 4; ++q) dg[s + q * st] = d[q];
    if (op->tensor[6] >= 0)
      for (int q = 0; q < 4; ++q) bf16_at(t, op, 6)[s + q * st] = f32_to_bf16(d[q]);
    dcp[s] = dcc * fg;
  } else {
    c[e] = op_value(op, c[e], i, j, t);
  }
}

/* the one store of C[i][j] (inside the block) from its accumulated sum */
__device__ __forceinline__ void finish(const Call& c, int64_t i, int64_t j, float acc) {
  const brgemm_cuda_block* kd = c.kd;
  const int64_t e = i * kd->ldc + j;
  float v = kd->alpha * acc;
  if (kd->dtype_c == BRGEMM_BF16) {
    uint16_t* p = (uint16_t*)c.C + e;
    if (kd->beta != 0.0f) v = fmaf(kd->beta, bf16_to_f32(*p), v);  /* as store_vec */
    *p = f32_to_bf16(v);
    return;  /* ops need an f32 C (the recorder checks) */
  }
  float* p = (float*)c.C + e;
  if (kd->beta != 0.0f) v = fmaf(kd->beta, *p, v);
  if (c.reg_ops)
    for (int32_t o = 0; o < c.n_ops; ++o) v = op_value(&c.ops[o], v, i, j, c.tensors);
  *p = v;
}

/* call ci of the plan as the tile code reads it (uniform_ok: the launch
 * argument's kernel index may stand for the call record's) */
__device__ __forceinline__ Call make_call(const brgemm_cuda_phase_args& args, int64_t ci,
                                          bool uniform_ok) {
  const brgemm_plan_call* call = &((const brgemm_plan_call*)args.calls)[ci];
  /* a uniform phase's kernel shape is known without the call record (a pointer
     into the launch argument instead would make every read of it a generic load) */
  const brgemm_cuda_block* kd = &((const brgemm_cuda_block*)args.blocks)[
      uniform_ok && args.uniform ? args.kernel : call->kernel];
  const int item_c = kd->dtype_c == BRGEMM_BF16 ? 2 : 4;
  Call c;
  c.kd = kd;
  c.A = (const char*)args.tensors[call->a];
  c.B = (const char*)args.tensors[call->b];
  c.C = (char*)args.tensors[call->c] + call->c_off * item_c;
  c.ao = (const uint64_t*)args.a_offs + call->offs;
  c.bo = (const uint64_t*)args.b_offs + call->offs;
  c.count = call->count;
  c.ops = (const brgemm_plan_op*)args.ops + call->op_begin;
  c.n_ops = call->op_count;
  c.reg_ops = !(((const uint8_t*)args.call_path)[ci] & BRGEMM_CUDA_PATH_MEM_OPS);
  c.vec = args.vec_stores != 0;
  c.tensors = args.tensors;
  return c;
}

/* this block's part of a task: tiles part, part + parts, ... of each call in
 * row-major order. Read again where used, from the launch argument and the
 * block index: a register held across the tiles spills in the 128-register
 * entry point */
__device__ __forceinline__ int task_part(const brgemm_cuda_phase_args& args, uint32_t nranks) {
  return (int)(blockIdx.x / nranks % args.parts);
}

/* Programmatic dependent launch (sm_90; the host launches with it where the
 * stream's previous work is a kernel): the next launch on the stream may start
 * once every block of this one has begun, and reads the plan's tables (never
 * written after their upload) meanwhile; each block waits for the previous
 * launch to finish, its writes visible, before its first tensor access.
 * Without the launch attribute both are no-ops. */
__device__ __forceinline__ void let_next_launch_start() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_for_previous_launch() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

/* ------------------------------------------------------------ generic path */

#define GT 64   /* tile rows and columns */
#define GK 16   /* k per shared-memory stage */

__device__ __forceinline__ float load_ab(const char* base, bool bf16, int64_t i) {
  return bf16 ? bf16_to_f32(((const uint16_t*)base)[i]) : ((const float*)base)[i];
}

/* a GT x GT tile at (i0, j0): thread (ty, tx) owns rows ty + 16 r, columns tx + 16 q */
__device__ __noinline__ void generic_tile(const Call& c, int64_t i0, int64_t j0, unsigned char* smem) {
  const brgemm_cuda_block* kd = c.kd;
  const int64_t m = kd->m, n = kd->n, k = kd->k, lda = kd->lda, ldb = kd->ldb;
  const bool bf16 = kd->dtype_ab == BRGEMM_BF16;
  float (*As)[GT + 1] = (float (*)[GT + 1])smem;  /* As[kk][row], padded: no bank conflicts */
  float (*Bs)[GT] = (float (*)[GT])(smem + GK * (GT + 1) * sizeof(float));
  const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
  float acc[4][4] = {};
  for (int64_t b = 0; b < c.count; ++b) {
    const char* Ab = c.A + c.ao[b];
    const char* Bb = c.B + c.bo[b];
    for (int64_t k0 = 0; k0 < k; k0 += GK) {
      for (int q = tid; q < GT * GK; q += THREADS) {
        const int r = q / GK, kk = q % GK;  /* a row's k values are consecutive */
        const int64_t i = i0 + r, kx = k0 + kk;
        As[kk][r] = (i < m && kx < k) ? load_ab(Ab, bf16, i * lda + kx) : 0.0f;
      }
      for (int q = tid; q < GK * GT; q += THREADS) {
        const int kk = q / GT, col = q % GT;
        const int64_t kx = k0 + kk, j = j0 + col;
        /* a VNNI pair row holds rows 2p and 2p + 1 side by side */
        const int64_t at = kd->b_vnni ? (kx >> 1) * 2 * ldb + 2 * j + (kx & 1) : kx * ldb + j;
        Bs[kk][col] = (kx < k && j < n) ? load_ab(Bb, bf16, at) : 0.0f;
      }
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < GK; ++kk) {
        float a[4], bv[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) a[r] = As[kk][ty + 16 * r];
#pragma unroll
        for (int q = 0; q < 4; ++q) bv[q] = Bs[kk][tx + 16 * q];
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
          for (int q = 0; q < 4; ++q) acc[r][q] = fmaf(a[r], bv[q], acc[r][q]);
      }
      __syncthreads();
    }
  }
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int64_t i = i0 + ty + 16 * r, j = j0 + tx + 16 * q;
      if (i < m && j < n) finish(c, i, j, acc[r][q]);
    }
}

/* ------------------------------------------------------------ tensor cores */
#if BRGEMM_TC

#define TK 64             /* k per stage: one 128-byte swizzled row of bf16 */
#ifndef STAGES
#define STAGES 5          /* 128 x 128 tiles' shared-memory stages: STAGES - 2 loads in */
#endif                    /* flight, one stage being read, one still read by the previous wgmma */
/* the bytes of stages each entry point has and the most stages a tile takes:
 * the 128 x 128 one (one block per SM) STAGES 128 x 128 stages, and smaller
 * tiles as many as fit (with little work per k-step, loads must be issued
 * further ahead to hide their latency); the 64-row one (two blocks per SM)
 * four (more stages spill registers there); the 128 x 256 one four (most of
 * an SM's shared memory) */
#define STAGE_BUDGET (STAGES * 32768)
#define STAGE_BUDGET_SMALL (4 * 24576)
#define STAGE_BUDGET_WIDE (4 * 49152)
/* the TMA entries' stages and staged C tile (tma_tile.cuh): one block per SM
 * (4 stages of 128 x 128), two per SM (3 stages of 64 x 128) */
#define STAGE_BUDGET_TMA (200 * 1024)
#define STAGE_BUDGET_SMALL_TMA (108 * 1024)

/* 16 bytes global -> shared, or 16 zero bytes when !valid (nothing is read) */
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

/* shared-memory matrix descriptor, 128-byte swizzle; byte offsets */
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFF) << 16) |
         ((uint64_t)((sbo >> 4) & 0x3FFF) << 32) | ((uint64_t)1 << 62);
}

/* byte offset of 16-byte chunk `chunk` of 128-byte row `row` in a swizzled
 * region whose start is 1024-byte aligned (the XOR wgmma applies on read) */
__device__ __forceinline__ uint32_t swz(int row, int chunk) {
  return row * 128 + ((chunk ^ (row & 7)) << 4);
}

/* ---- clusters: the blocks that share one task's reductions */
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ uint32_t cluster_blocks() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(r));
  return r;
}
/* every block of the cluster is here; its earlier writes (shared and global)
 * are visible to every thread of the cluster after */
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n"
               ::: "memory");
}
/* the two halves of cluster_sync, apart: work between them overlaps the wait */
__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
/* the shared::cluster address of the same shared-memory byte in block `rank` */
__device__ __forceinline__ uint32_t cluster_addr(uint32_t addr, uint32_t rank) {
  uint32_t out;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(out) : "r"(addr), "r"(rank));
  return out;
}
__device__ __forceinline__ float4 cluster_load4(uint32_t addr) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(addr) : "memory");
  return v;
}

/* a stage of a BM x BN tile: A (BM rows of 64 k, 128 bytes each), then B (64
 * k-rows of 64 columns, 128 bytes each, per 64 columns) */
template <int BM, int BN>
struct Stage {
  static constexpr uint32_t A_BYTES = BM * 128, B_REGION = 64 * 128,
                            BYTES = A_BYTES + (BN / 64) * B_REGION;
};

/* the stages a BM x BN tile takes out of `budget` bytes, at most `most` */
template <int BM, int BN>
__host__ __device__ constexpr int stages_for(int budget, int most) {
  return (int)(budget / Stage<BM, BN>::BYTES) < most ? (int)(budget / Stage<BM, BN>::BYTES) : most;
}

/* What one thread copies of every k-step of a BM x BN tile: its A chunks
 * (row r, 16-byte chunk ch of the step's 64 k) and B chunks (k-row r, 8
 * columns from cc * 8), with the byte offsets that stay fixed over the steps. */
template <int BM, int BN>
struct Loader {
  static constexpr int NA = BM * 8 / THREADS, NB = TK * (BN / 8) / THREADS;
  int64_t a_off[NA], b_off[NB];   /* bytes from the block's k0 column / row */
  uint32_t a_dst[NA], b_dst[NB];  /* bytes from the stage start */
  int a_col[NA], b_row[NB];       /* k of the chunk within the step */
  bool a_in[NA], b_in[NB];        /* row inside m, columns inside n */

  __device__ __forceinline__ Loader(const brgemm_cuda_block* kd, int64_t i0, int64_t j0) {
#pragma unroll
    for (int u = 0; u < NA; ++u) {
      const int q = threadIdx.x + u * THREADS, r = q >> 3, ch = q & 7;
      a_in[u] = i0 + r < kd->m;
      a_off[u] = ((i0 + r) * kd->lda + ch * 8) * 2;
      a_dst[u] = swz(r, ch);
      a_col[u] = ch * 8;
    }
    constexpr int CH = BN / 8;
#pragma unroll
    for (int u = 0; u < NB; ++u) {
      const int q = threadIdx.x + u * THREADS, r = q / CH, cc = q % CH;
      b_in[u] = j0 + cc * 8 < kd->n;
      b_off[u] = (r * kd->ldb + j0 + cc * 8) * 2;
      b_dst[u] = Stage<BM, BN>::A_BYTES + (cc >> 3) * Stage<BM, BN>::B_REGION + swz(r, cc & 7);
      b_row[u] = r;
    }
  }

  /* copy k columns k0 .. k0 + TK of block b into the stage at st */
  __device__ __forceinline__ void load(const Call& c, int64_t b, int64_t k0, uint32_t st) const {
    const int64_t k = c.kd->k;
    const char* Ab = c.A + c.ao[b] + k0 * 2;
    const char* Bb = c.B + c.bo[b] + k0 * c.kd->ldb * 2;
#pragma unroll
    for (int u = 0; u < NA; ++u) {
      const bool ok = a_in[u] && k0 + a_col[u] < k;
      cp_async16(st + a_dst[u], ok ? Ab + a_off[u] : c.A, ok);
    }
#pragma unroll
    for (int u = 0; u < NB; ++u) {
      const bool ok = b_in[u] && k0 + b_row[u] < k;
      cp_async16(st + b_dst[u], ok ? Bb + b_off[u] : c.B, ok);
    }
  }
};

__device__ __forceinline__ void next_step(int64_t& b, int64_t& k0, int64_t k) {
  k0 += TK;
  if (k0 >= k) k0 = 0, ++b;
}

/* rows r0 .. r1 - 1 of a split tile staged in every rank's shared memory
 * (row stride LD floats), summed in rank order into this rank's: its
 * threads (THREADS) take four columns each */
template <int BN, int LD>
__device__ __forceinline__ void sum_ranks(float* tile, int r0, int r1, uint32_t nranks) {
  const uint32_t base = smem_addr(tile);
  for (int e = r0 * BN + (int)threadIdx.x * 4; e < r1 * BN; e += THREADS * 4) {
    const int r = e / BN, col = e % BN;
    const uint32_t at = base + (r * LD + col) * 4;
    float4 v = cluster_load4(cluster_addr(at, 0));
    for (uint32_t q = 1; q < nranks; ++q) {
      const float4 w = cluster_load4(cluster_addr(at, q));
      v = make_float4(v.x + w.x, v.y + w.y, v.z + w.z, v.w + w.w);
    }
    *(float4*)&tile[r * LD + col] = v;  /* rows only this rank reads */
  }
}

/* ---- the epilogue of a tile staged in shared memory (the TMA entries take store_tile with
 * vec_stores, inline; tc_tile always store_plain) */

/* op on V consecutive values of row i, columns j .. j + V - 1 of the C block:
 * op_value's effect on each (ops are element-wise), with 8- or 16-byte
 * accesses where the addresses allow */
template <int V>
__device__ __forceinline__ void op_values(const brgemm_plan_op* op, float (&v)[V], int64_t i,
                                          int64_t j, const uint64_t* t) {
  switch (op->code) {
    case BRGEMM_OP_BIAS: {
      const float* b = f32_at(t, op, 0) + j;
      if (((uintptr_t)b & 15) == 0) {
#pragma unroll
        for (int q = 0; q < V; q += 4) {
          const float4 w = *(const float4*)(b + q);
          v[q] += w.x, v[q + 1] += w.y, v[q + 2] += w.z, v[q + 3] += w.w;
        }
      } else {
#pragma unroll
        for (int q = 0; q < V; ++q) v[q] += b[q];
      }
      break;
    }
    case BRGEMM_OP_STORE_BF16: {
      uint16_t* p = bf16_at(t, op, 0) + i * op->ld + j;
      if (((uintptr_t)p & (2 * V - 1)) == 0) {
        uint32_t w[V / 2];
#pragma unroll
        for (int q = 0; q < V / 2; ++q)
          w[q] = (uint32_t)f32_to_bf16(v[2 * q]) | (uint32_t)f32_to_bf16(v[2 * q + 1]) << 16;
        if constexpr (V == 8) *(uint4*)p = make_uint4(w[0], w[1], w[2], w[3]);
        else *(uint2*)p = make_uint2(w[0], w[1]);
      } else {
#pragma unroll
        for (int q = 0; q < V; ++q) p[q] = f32_to_bf16(v[q]);
      }
      break;
    }
    default:
#pragma unroll
      for (int q = 0; q < V; ++q) v[q] = op_value(op, v[q], i, j + q, t);
  }
}

/* 16 bytes of shared memory; not volatile: the staged tile does not change
 * while it is read, so the loads may be scheduled early */
__device__ __forceinline__ float4 shared_load4(uint32_t addr) {
  float4 v;
  asm("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
      : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(addr));
  return v;
}

/* rows r0 .. rows - 1, columns 0 .. cols - 1 of the staged tile (row stride
 * LD floats) to C, V consecutive columns a thread: alpha, beta (C read in
 * its dtype), the ops (f32 C), one 16-byte store (8-byte: V 4 of bf16) of
 * V elements. The caller has checked that cols, ldc and C's address allow it. */
template <int V, int BN, int LD>
__device__ __forceinline__ void store_vec(const Call& c, const float* tile, int64_t i0, int64_t j0,
                                          int r0, int rows, int cols) {
  const brgemm_cuda_block* kd = c.kd;
  const float alpha = kd->alpha, beta = kd->beta;
  const int64_t ldc = kd->ldc;
  const bool bf16 = kd->dtype_c == BRGEMM_BF16;
  const int n_ops = c.reg_ops && !bf16 ? c.n_ops : 0;  /* ops need an f32 C (the recorder checks) */
  const uint32_t ts = smem_addr(tile);  /* shared loads, whatever the compiler knows of `tile` */
  for (int e = r0 * BN + (int)threadIdx.x * V; e < rows * BN; e += THREADS * V) {
    const int r = e / BN, col = e % BN;
    if (col >= cols) continue;
    float v[V];
#pragma unroll
    for (int q = 0; q < V; q += 4) {
      const float4 w = shared_load4(ts + (r * LD + col + q) * 4);
      v[q] = alpha * w.x, v[q + 1] = alpha * w.y, v[q + 2] = alpha * w.z, v[q + 3] = alpha * w.w;
    }
    const int64_t at = (i0 + r) * ldc + j0 + col;
    if (bf16) {
      uint16_t* p = (uint16_t*)c.C + at;
      uint32_t w[V / 2];
      if (beta != 0.0f) {
        if constexpr (V == 8) {
          const uint4 old = *(const uint4*)p;
          w[0] = old.x, w[1] = old.y, w[2] = old.z, w[3] = old.w;
        } else {
          const uint2 old = *(const uint2*)p;
          w[0] = old.x, w[1] = old.y;
        }
#pragma unroll
        for (int q = 0; q < V / 2; ++q) {
          v[2 * q] = fmaf(beta, __uint_as_float(w[q] << 16), v[2 * q]);
          v[2 * q + 1] = fmaf(beta, __uint_as_float(w[q] & 0xffff0000u), v[2 * q + 1]);
        }
      }
#pragma unroll
      for (int q = 0; q < V / 2; ++q)
        w[q] = (uint32_t)f32_to_bf16(v[2 * q]) | (uint32_t)f32_to_bf16(v[2 * q + 1]) << 16;
      if constexpr (V == 8) *(uint4*)p = make_uint4(w[0], w[1], w[2], w[3]);
      else *(uint2*)p = make_uint2(w[0], w[1]);
    } else {
      float* p = (float*)c.C + at;
      if (beta != 0.0f) {
#pragma unroll
        for (int q = 0; q < V; q += 4) {
          const float4 old = *(const float4*)(p + q);
          v[q] = fmaf(beta, old.x, v[q]), v[q + 1] = fmaf(beta, old.y, v[q + 1]);
          v[q + 2] = fmaf(beta, old.z, v[q + 2]), v[q + 3] = fmaf(beta, old.w, v[q + 3]);
        }
      }
      for (int o = 0; o < n_ops; ++o) op_values<V>(&c.ops[o], v, i0 + r, j0 + col, c.tensors);
#pragma unroll
      for (int q = 0; q < V; q += 4)
        *(float4*)(p + q) = make_float4(v[q], v[q + 1], v[q + 2], v[q + 3]);
    }
  }
}

/* the epilogue of rows r0 .. r1 - 1 of a BN-column tile staged in shared
 * memory (row stride LD floats) at (i0, j0) of the call's C block, as it
 * was before vec_stores (inline in the tile code; the launch's default):
 * f32 C without register ops four elements a thread, the rest finish() per
 * element. Rows and columns past the block are not stored. */
template <int BN, int LD>
__device__ __forceinline__ void store_plain(const Call& c, const float* tile, int64_t i0,
                                            int64_t j0, int r0, int r1) {
  const brgemm_cuda_block* kd = c.kd;
  const int rows = (int)min((int64_t)r1, kd->m - i0), cols = (int)min((int64_t)BN, kd->n - j0);
  const int64_t ldc = kd->ldc;
  if (kd->dtype_c == BRGEMM_F32 && (c.n_ops == 0 || !c.reg_ops) && cols % 4 == 0 &&
      ldc % 4 == 0 && ((uintptr_t)c.C & 15) == 0) {
    const float alpha = kd->alpha, beta = kd->beta;
    for (int e = r0 * BN + (int)threadIdx.x * 4; e < rows * BN; e += THREADS * 4) {
      const int r = e / BN, col = e % BN;
      if (col >= cols) continue;
      float4 v = *(const float4*)&tile[r * LD + col];
      float4* at = (float4*)((float*)c.C + (i0 + r) * ldc + j0 + col);
      v = make_float4(alpha * v.x, alpha * v.y, alpha * v.z, alpha * v.w);
      if (beta != 0.0f) {
        const float4 old = *at;
        v = make_float4(v.x + beta * old.x, v.y + beta * old.y, v.z + beta * old.z,
                        v.w + beta * old.w);
      }
      *at = v;
    }
    return;
  }
  for (int e = r0 * BN + (int)threadIdx.x; e < rows * BN; e += THREADS) {
    const int r = e / BN, col = e % BN;
    if (col < cols) finish(c, i0 + r, j0 + col, tile[r * LD + col]);
  }
}

/* the same, and with the launch's vec_stores (the TMA entries alone: in tc_tile
 * its code spilled registers in the 64-row and 128 x 256 entries, and as a
 * call of its own it slowed every path on the H200, its caller's too):
 * several elements a thread where the tile's columns, ldc and C's alignment
 * allow (bf16 C, f32 C with register ops too), else as store_plain */
template <int BN, int LD>
__device__ __forceinline__ void store_tile(const Call& c, const float* tile, int64_t i0, int64_t j0,
                                        int r0, int r1) {
  const brgemm_cuda_block* kd = c.kd;
  const int rows = (int)min((int64_t)r1, kd->m - i0), cols = (int)min((int64_t)BN, kd->n - j0);
  const int64_t ldc = kd->ldc;
  const uintptr_t a = (uintptr_t)c.C;
  if (c.vec && kd->dtype_c == BRGEMM_F32) {
    if (cols % 4 == 0 && ldc % 4 == 0 && (a & 15) == 0)
      return store_vec<4, BN, LD>(c, tile, i0, j0, r0, rows, cols);
  } else if (c.vec) {
    if (cols % 8 == 0 && ldc % 8 == 0 && (a & 15) == 0)
      return store_vec<8, BN, LD>(c, tile, i0, j0, r0, rows, cols);
    if (cols % 4 == 0 && ldc % 4 == 0 && (a & 7) == 0)
      return store_vec<4, BN, LD>(c, tile, i0, j0, r0, rows, cols);
  }
  store_plain<BN, LD>(c, tile, i0, j0, r0, r1);
}

/* warpgroup wg's m64nWN accumulators into the C tile staged in shared
 * memory (row stride LD floats) at (row0, col0): warp w of the group holds
 * rows 16 w + lane / 4 (+ 8), columns 8 t + 2 (lane % 4) (+ 1) in acc[4 t ..
 * 4 t + 3]. SPLIT_K (64 x 64 tiles, each warpgroup half of every k-step):
 * the second warpgroup adds its half to the first's. sync(): the barrier of
 * the threads that stage (after each pass) */
template <int WN, int LD, bool SPLIT_K, class Sync>
__device__ __forceinline__ void stage_acc(float* tile, const float (&acc)[WN / 2], int wg, int row0,
                                          int col0, Sync sync) {
  const int warp = ((int)threadIdx.x % 128) / 32, lane = (int)threadIdx.x % 32;
  for (int pass = 0; pass < (SPLIT_K ? 2 : 1); ++pass) {
    if (!SPLIT_K || wg == pass) {
#pragma unroll
      for (int t = 0; t < WN / 8; ++t)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = row0 + warp * 16 + lane / 4 + 8 * h, col = col0 + 8 * t + 2 * (lane % 4);
          float2* at = (float2*)&tile[r * LD + col];
          const float2 v = make_float2(acc[4 * t + 2 * h], acc[4 * t + 2 * h + 1]);
          *at = pass ? make_float2(at->x + v.x, at->y + v.y) : v;  /* the k halves summed */
        }
    }
    sync();
  }
}

/* a BM x BN tile at (i0, j0); SPLIT (and a launch in clusters): this block's
 * share (rank of nranks) of its k-steps, summed with the other ranks' shares. BM 128: warpgroup w takes rows 64 w, all BN columns; BM 64, BN
 * 128: warpgroup w takes columns 64 w; 64 x 64: warpgroup w takes half of each
 * step's k and the halves are summed at the end (no warpgroup idles: a wgmma
 * under a branch would be serialized).
 * Step s: wait for its copies, barrier, start the copies of step s + LOOKAHEAD,
 * issue its wgmma group and wait for the previous group only, so the tensor
 * cores always have the next group queued while the copies run. */
template <int BM, int BN, int NSTAGES, bool SPLIT>
__device__ __forceinline__ void tc_tile(const Call& c, int64_t i0, int64_t j0,
                                        unsigned char* smem_ptr, uint32_t rank, uint32_t nranks) {
  constexpr int LOOKAHEAD = NSTAGES - 2;
  using S = Stage<BM, BN>;
  const uint32_t smem = smem_addr(smem_ptr);
  constexpr int WN = BM == 128 ? BN : 64;
  const int tid = threadIdx.x, wg = tid / 128;
  constexpr bool SPLIT_K = BM == 64 && BN == 64;
  const int row0 = BM == 128 ? 64 * wg : 0, col0 = BM == 128 || SPLIT_K ? 0 : 64 * wg;
  const int64_t ksteps = (c.kd->k + TK - 1) / TK, all_steps = c.count * ksteps;
  const bool split = SPLIT && nranks > 1;
  const int64_t first = split ? all_steps * rank / nranks : 0;
  const int64_t steps = split ? all_steps * (rank + 1) / nranks - first : all_steps;
  const Loader<BM, BN> ld(c.kd, i0, j0);
  int64_t lb = split ? first / ksteps : 0, lk = split ? first % ksteps * TK : 0;  /* next to load */
  float acc[WN / 2];
#pragma unroll
  for (int e = 0; e < WN / 2; ++e) acc[e] = 0.0f;

  __syncthreads();  /* the previous tile's reads of shared memory are done */
#pragma unroll
  for (int p = 0; p < LOOKAHEAD; ++p) {
    if (p < steps) ld.load(c, lb, lk, smem + p * S::BYTES);
    cp_async_commit();
    next_step(lb, lk, c.kd->k);
  }
  int slot = 0, fill = LOOKAHEAD;  /* the stage step s reads; the one step s + LOOKAHEAD fills */
  for (int64_t s = 0; s < steps; ++s) {
    cp_async_wait<LOOKAHEAD - 1>();  /* this thread's copies of step s have landed */
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  /* visible to wgmma */
    __syncthreads();  /* everyone's have, and step s - 2's wgmma (stage `fill`) are done */
    if (s + LOOKAHEAD < steps) ld.load(c, lb, lk, smem + fill * S::BYTES);
    cp_async_commit();
    next_step(lb, lk, c.kd->k);
    {
      const uint32_t st = smem + slot * S::BYTES;
      const uint32_t a0 = st + row0 * 128, b0 = st + S::A_BYTES + (col0 / 64) * S::B_REGION;
      asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
      for (int kk = SPLIT_K ? 2 * wg : 0; kk < (SPLIT_K ? 2 * wg + 2 : TK / 16); ++kk) {
        /* A: K-major, 8-row groups 1024 bytes apart; k16 = 32 bytes along the row.
           B: N-major, 64-column regions B_REGION apart, 8-row k groups 1024
           apart; k16 = 16 rows = 2048 bytes */
        const uint64_t da = smem_desc(a0 + kk * 32, 16, 1024);
        const uint64_t db = smem_desc(b0 + kk * 2048, S::B_REGION, 1024);
        if constexpr (WN == 256) wgmma_m64n256k16(acc, da, db);
        else if constexpr (WN == 128) wgmma_m64n128k16(acc, da, db);
        else wgmma_m64n64k16(acc, da, db);
      }
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
    }
    slot = slot == NSTAGES - 1 ? 0 : slot + 1;
    fill = fill == NSTAGES - 1 ? 0 : fill + 1;
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  cp_async_wait<0>();
  __syncthreads();  /* every wgmma has read its stage: reuse the stages for C */
  /* staging the tile in shared memory keeps the epilogue code small and the
     stores coalesced */
  float* tile = (float*)smem_ptr;
  constexpr int LD = BN + 8;
  static_assert(BM * LD * 4 <= NSTAGES * S::BYTES, "the C tile fits the stages");
  stage_acc<WN, LD, SPLIT_K>(tile, acc, wg, row0, col0, [] { __syncthreads(); });
  /* this block finishes rows r0 .. r1 of the tile: all of it, or its share of
     the cluster's, summed over the ranks' partial tiles in rank order */
  int r0 = 0, r1 = BM;
  if (split) {
    r0 = BM * rank / nranks, r1 = BM * (rank + 1) / nranks;
    cluster_sync();  /* every rank's partial tile is in its shared memory */
    sum_ranks<BN, LD>(tile, r0, r1, nranks);
    __syncthreads();  /* the sums are in: the per-element epilogue reads other threads' */
    /* this rank reads no other's tile any more; the wait for the others (then
       no rank reads this one's, and its stages may refill) follows the stores */
    cluster_arrive();
  }
  /* the code before vec_stores: its stores here spilled registers in the
     64-row and 128 x 256 entries (vec_stores applies to the TMA entries) */
  store_plain<BN, LD>(c, tile, i0, j0, r0, r1);
  if (split) cluster_wait();
}

/* every tile of a call, one after the other */
template <int BM, int BN, int BUDGET, bool SPLIT>
__device__ __forceinline__ void tc_call_all(const Call& c, unsigned char* smem, uint32_t rank,
                                            uint32_t nranks) {
  constexpr int NS = stages_for<BM, BN>(BUDGET, BUDGET == STAGE_BUDGET_SMALL ? 4 : 12);
  static_assert(NS >= 3 && NS * Stage<BM, BN>::BYTES <= BUDGET, "the stages fit the budget");
  for (int64_t i0 = 0; i0 < c.kd->m; i0 += BM)
    for (int64_t j0 = 0; j0 < c.kd->n; j0 += BN)
      tc_tile<BM, BN, NS, SPLIT>(c, i0, j0, smem, rank, nranks);
}

template <int BM, int BN, int BUDGET, bool SPLIT>
__device__ __forceinline__ void tc_call(const brgemm_cuda_phase_args& args, const Call& c,
                                        unsigned char* smem, uint32_t rank, uint32_t nranks) {
  constexpr int NS = stages_for<BM, BN>(BUDGET, BUDGET == STAGE_BUDGET_SMALL ? 4 : 12);
  static_assert(NS >= 3 && NS * Stage<BM, BN>::BYTES <= BUDGET, "the stages fit the budget");
  const int tiles = (int)((c.kd->m + BM - 1) / BM * ((c.kd->n + BN - 1) / BN));
  for (int t = task_part(args, nranks); t < tiles; t += args.parts) {
    const int cols = (int)((c.kd->n + BN - 1) / BN);
    tc_tile<BM, BN, NS, SPLIT>(c, (int64_t)(t / cols) * BM, (int64_t)(t % cols) * BN, smem, rank,
                               nranks);
  }
}

#include "tma_tile.cuh"
#endif

/* ------------------------------------------------------------ the launch */

/* the dynamic shared memory each entry point needs; read by the host */
#define SMEM_GENERIC (GK * (GT + 1) * 4 + GK * GT * 4 + 1024)
extern "C" __device__ int brgemm_cuda_smem_generic = SMEM_GENERIC;
#if BRGEMM_TC
extern "C" __device__ int brgemm_cuda_smem = STAGE_BUDGET + 1024;
extern "C" __device__ int brgemm_cuda_smem_small = STAGE_BUDGET_SMALL + 1024;
extern "C" __device__ int brgemm_cuda_smem_wide = STAGE_BUDGET_WIDE + 1024;
/* the TMA entries: their stages and C tile, then 2 mbarriers a stage */
extern "C" __device__ int brgemm_cuda_smem_tma = STAGE_BUDGET_TMA + 1024 + 256;
extern "C" __device__ int brgemm_cuda_smem_small_tma = STAGE_BUDGET_SMALL_TMA + 1024 + 256;
#else
extern "C" __device__ int brgemm_cuda_smem = SMEM_GENERIC;
extern "C" __device__ int brgemm_cuda_smem_small = SMEM_GENERIC;
extern "C" __device__ int brgemm_cuda_smem_wide = SMEM_GENERIC;
extern "C" __device__ int brgemm_cuda_smem_tma = SMEM_GENERIC;
extern "C" __device__ int brgemm_cuda_smem_small_tma = SMEM_GENERIC;
#endif

/* the entry points: tensor-core tiles up to 128 x 128 (one block per SM),
 * alone or in clusters that split the reductions (apart: the split code's
 * registers would slow the rest); tensor-core tiles of 64 rows (two blocks
 * per SM: one's pipeline fill and epilogue overlap the other's steps), alone
 * or in clusters; 128 x 256 tensor-core tiles (one block per SM, apart: their
 * 128 accumulators a thread leave no registers for the other paths' code);
 * generic only */
enum Entry { ENTRY_TC, ENTRY_TC_SMALL, ENTRY_TC_WIDE, ENTRY_GENERIC };

/* the aligned start of the dynamic shared memory: the swizzle atoms want
 * 1024-byte alignment; the launch asks for 1024 extra */
__device__ __forceinline__ unsigned char* aligned_smem() {
  extern __shared__ unsigned char smem_raw[];
  return smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
}

/* One task on one cluster (rank of nranks); tensor-core entries: calls the
 * host marked BRGEMM_CUDA_PATH_TC run on the tensor cores, the rest on the
 * generic path. */
template <Entry E, bool SPLIT>
__device__ __forceinline__ void run_task(const brgemm_cuda_phase_args& args, int64_t task,
                                         unsigned char* smem, uint32_t rank, uint32_t nranks) {
  /* the 128 x 256 entry takes none of the small-problem path's launch
     features (parts, tile caps, the kernel index, programmatic launch): the
     GEMM measured slower with them in its code: benchmarks/RESULTS.md */
  constexpr bool SMALL = E != ENTRY_TC_WIDE;
  const int64_t* task_begin = (const int64_t*)args.task_begin;
  const int64_t first = SMALL && args.uniform ? task : task_begin[task];
  const int64_t end = SMALL && args.uniform ? task + 1 : task_begin[task + 1];
  for (int64_t ci = first; ci < end; ++ci) {
    const Call c = make_call(args, ci, SMALL);
    const brgemm_cuda_block* kd = c.kd;
    if constexpr (SMALL) wait_for_previous_launch();  /* at once after the first call's */
    bool done = false;
#if BRGEMM_TC
    const uint8_t path = ((const uint8_t*)args.call_path)[ci];
    if (E != ENTRY_GENERIC && (path & BRGEMM_CUDA_PATH_TC) && args.allow_tc) {
      /* tiles up to 128 x 128 as large as the block and the launch's caps allow */
      const bool rows128 = kd->m > 64 && args.tile_m > 64, cols128 = kd->n > 64 && args.tile_n > 64;
      if (E == ENTRY_TC_WIDE) {  /* every call on 128 x 256 tiles (the host checks some fill them) */
        tc_call_all<128, 256, STAGE_BUDGET_WIDE, false>(c, smem, rank, nranks);
      } else if (E == ENTRY_TC_SMALL) {
        if (cols128) tc_call<64, 128, STAGE_BUDGET_SMALL, SPLIT>(args, c, smem, rank, nranks);
        else tc_call<64, 64, STAGE_BUDGET_SMALL, SPLIT>(args, c, smem, rank, nranks);
      } else if (rows128) {
        if (cols128) tc_call<128, 128, STAGE_BUDGET, SPLIT>(args, c, smem, rank, nranks);
        else tc_call<128, 64, STAGE_BUDGET, SPLIT>(args, c, smem, rank, nranks);
      } else {
        if (cols128) tc_call<64, 128, STAGE_BUDGET, SPLIT>(args, c, smem, rank, nranks);
        else tc_call<64, 64, STAGE_BUDGET, SPLIT>(args, c, smem, rank, nranks);
      }
      done = true;
    }
#endif
    if (!done && rank == 0 && !SMALL) {  /* the other ranks of a cluster have no share here */
      for (int64_t i0 = 0; i0 < kd->m; i0 += GT)
        for (int64_t j0 = 0; j0 < kd->n; j0 += GT) generic_tile(c, i0, j0, smem);
    } else if (!done && rank == 0) {
      const int64_t cols = (kd->n + GT - 1) / GT, tiles = (kd->m + GT - 1) / GT * cols;
      for (int64_t t = task_part(args, nranks); t < tiles; t += args.parts)
        generic_tile(c, t / cols * GT, t % cols * GT, smem);
    }
    __syncthreads();  /* C is stored before its ops or the next call read it */
    if (!c.reg_ops && rank == 0) {
      float* c32 = (float*)c.C;
      for (int32_t o = 0; o < c.n_ops; ++o) {
        for (int64_t e = threadIdx.x; e < kd->m * kd->n; e += THREADS)
          op_memory(&c.ops[o], c32, e / kd->n, e % kd->n, kd->ldc, args.tensors);
        __syncthreads();
      }
    }
#if BRGEMM_TC
    /* ... on every rank of the cluster (after a task's last call, nothing is
       read any more: a split tile's sum ends with its own cluster barrier) */
    if (SPLIT && nranks > 1 && ci + 1 < end) cluster_sync();
#endif
  }
}

/* One part of a task per cluster. */
template <Entry E, bool SPLIT>
__device__ __forceinline__ void run_phase(const brgemm_cuda_phase_args& args) {
  uint32_t rank = 0, nranks = 1;
  if constexpr (E != ENTRY_TC_WIDE) let_next_launch_start();
#if BRGEMM_TC
  if constexpr (SPLIT) rank = cluster_rank(), nranks = cluster_blocks();
#endif
  if constexpr (E == ENTRY_TC_WIDE)
    run_task<E, SPLIT>(args, args.task0 + blockIdx.x / nranks, aligned_smem(), rank, nranks);
  else
    run_task<E, SPLIT>(args, args.task0 + blockIdx.x / nranks / args.parts, aligned_smem(), rank,
                       nranks);
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
    brgemm_cuda_phase_tc(const __grid_constant__ brgemm_cuda_phase_args args) {
  run_phase<ENTRY_TC, false>(args);
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
    brgemm_cuda_phase_tc_split(const __grid_constant__ brgemm_cuda_phase_args args) {
  run_phase<ENTRY_TC, BRGEMM_TC>(args);
}

/* phases with C blocks more than 128 columns wide and more than 64 rows: one
 * block per SM on 128 x 256 tiles (each step's B read once for twice the
 * columns: less traffic from L2 and shared memory per flop) */
extern "C" __global__ void __launch_bounds__(THREADS, 1)
    brgemm_cuda_phase_tc_wide(const __grid_constant__ brgemm_cuda_phase_args args) {
  run_phase<ENTRY_TC_WIDE, false>(args);
}

extern "C" __global__ void __launch_bounds__(THREADS, 2)
    brgemm_cuda_phase_tc_small(const __grid_constant__ brgemm_cuda_phase_args args) {
  run_phase<ENTRY_TC_SMALL, BRGEMM_TC>(args);
}

extern "C" __global__ void __launch_bounds__(THREADS, 2)
    brgemm_cuda_phase_generic(const __grid_constant__ brgemm_cuda_phase_args args) {
  run_phase<ENTRY_GENERIC, false>(args);
}


/* Uniform phases whose operands the host described as tensor maps (see
 * tma_tile.cuh): the tile by the kernel shape and the launch's caps, as
 * run_task picks it (the host reads the same to size A's box); on the
 * 64-row entry (two blocks per SM) 64-row tiles. */
template <bool SMALL, bool SPLIT>
__device__ __forceinline__ void run_phase_tma(const brgemm_cuda_phase_args& args,
                                              const TmaMaps& maps) {
#if BRGEMM_TC
  let_next_launch_start();
  const brgemm_cuda_block* kd = &((const brgemm_cuda_block*)args.blocks)[args.kernel];
  const bool rows128 = kd->m > 64 && args.tile_m > 64, cols128 = kd->n > 64 && args.tile_n > 64;
  unsigned char* smem = aligned_smem();
  if constexpr (SMALL) {
    if (cols128) tma_phase<64, 128, STAGE_BUDGET_SMALL_TMA, 4, SPLIT>(args, maps, smem);
    else tma_phase<64, 64, STAGE_BUDGET_SMALL_TMA, 4, SPLIT>(args, maps, smem);
  } else if (rows128) {
    if (cols128) tma_phase<128, 128, STAGE_BUDGET_TMA, 12, SPLIT>(args, maps, smem);
    else tma_phase<128, 64, STAGE_BUDGET_TMA, 12, SPLIT>(args, maps, smem);
  } else {
    if (cols128) tma_phase<64, 128, STAGE_BUDGET_TMA, 12, SPLIT>(args, maps, smem);
    else tma_phase<64, 64, STAGE_BUDGET_TMA, 12, SPLIT>(args, maps, smem);
  }
#endif
}

extern "C" __global__ void __launch_bounds__(TMA_THREADS, 1)
    brgemm_cuda_phase_tc_tma(const __grid_constant__ brgemm_cuda_phase_args args,
                             const __grid_constant__ TmaMaps maps) {
  run_phase_tma<false, false>(args, maps);
}

extern "C" __global__ void __launch_bounds__(TMA_THREADS, 2)
    brgemm_cuda_phase_tc_small_tma(const __grid_constant__ brgemm_cuda_phase_args args,
                                   const __grid_constant__ TmaMaps maps) {
  run_phase_tma<true, false>(args, maps);
}

/* the same in clusters that split each tile's k-steps (as tc_split, tc_small) */
extern "C" __global__ void __launch_bounds__(TMA_THREADS, 1)
    brgemm_cuda_phase_tc_split_tma(const __grid_constant__ brgemm_cuda_phase_args args,
                                   const __grid_constant__ TmaMaps maps) {
  run_phase_tma<false, BRGEMM_TC>(args, maps);
}

extern "C" __global__ void __launch_bounds__(TMA_THREADS, 2)
    brgemm_cuda_phase_tc_small_split_tma(const __grid_constant__ brgemm_cuda_phase_args args,
                                         const __grid_constant__ TmaMaps maps) {
  run_phase_tma<true, BRGEMM_TC>(args, maps);
}
