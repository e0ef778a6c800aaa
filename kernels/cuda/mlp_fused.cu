/* A fully fused MLP on tensor cores: every layer of a tile of rows runs before
 * anything goes back to memory.
 *
 *   h_0 = x,  h_{l+1} = act_l(h_l W_l^T + b_l),  y = h_L          (forward)
 *   dz_{L-1} = dy * act'(y),  dz_{l-1} = (dz_l W_l) * act'(h_l),  dx = dz_0 W_0
 *   dW_l = sum over rows of dz_l^T h_l,  db_l = sum over rows of dz_l   (backward)
 *
 * All layers are padded to one width W (16..128, zeros outside each layer), so
 * a layer is a [rows x W] @ [W x W] product: mma.sync m16n8k16, bf16 operands,
 * f32 accumulation. Every layer's W_l sits in shared memory for the whole
 * launch (loaded once per block; grids are persistent).
 *
 * Forward: a warp owns 16 * MT rows and keeps them in registers through every
 * layer: an m16n8 accumulator pair is exactly the m16k16 A fragment of the next
 * layer once bias and activation are applied and it is rounded to bf16. x is
 * read once, y written once.
 *
 * Backward: recomputes the forward per tile (cheaper than storing and reading
 * back every hidden activation), keeping each layer's input (bf16) in shared
 * memory; then, layers descending, dz in registers, rounded to bf16 as the
 * forward rounds h. dW and db need a reduction over rows: each block sums its
 * tiles into a shared-memory f32 partial (each warp owns a slice of dW, no
 * atomics) and writes it once; mlp_reduce adds the blocks' partials in a fixed
 * order, so the result is deterministic.
 *
 * act' reads the bf16 h for hidden layers (what the next layer consumed), the
 * f32 y for the last one. Shared matrices of bf16 rows are XOR-swizzled by
 * 16-byte chunk so ldmatrix and the fragment stores are free of bank conflicts.
 */
#include <stdint.h>

#include "mlp_fused.h"

namespace {

constexpr int BWD_MAX_WARPS = 8;
#ifndef FWD_MIN_BLOCKS
#define FWD_MIN_BLOCKS 3  /* forward blocks per multiprocessor the register budget is cut for */
#endif
/* Recompute-backward variants (issue 18: its training step), each off by default
 * until a device run has passed the tests with it and timed it
 * (benchmarks/device_mlp_variants.sh):
 *   BWD_DW_SWIZZLE   the block's f32 dW partial XOR-swizzled by 8-float group, so a
 *                    warp's float2 read-modify-write of it is free of bank conflicts
 *                    (4-way otherwise), and weight-gradient units dealt out so that
 *                    the ones that also sum db fall one to each scheduler
 *   BWD_WG_PIPE      weight_grads loads the next 16 rows' fragments before the
 *                    current ones' products, from addresses stepped, not recomputed
 *   BWD_FEWER_SYNCS  dz_l goes to the shared slot of h_{l+2} (dead by then), so
 *                    one barrier per layer instead of two (L + 2 a tile, not 2 L)
 *   BWD_EARLY_DY     a tile's dy (bf16, full tiles) is loaded before its forward
 *                    is recomputed, not after (its latency hides behind it), and
 *                    dy and x before the next tile's prefetch, which may evict them */
#ifndef BWD_DW_SWIZZLE
#define BWD_DW_SWIZZLE 1
#endif
#ifndef BWD_WG_PIPE
#define BWD_WG_PIPE 1
#endif
#ifndef BWD_FEWER_SYNCS
#define BWD_FEWER_SYNCS 1
#endif
#ifndef BWD_EARLY_DY
#define BWD_EARLY_DY 1
#endif

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  uint32_t r;  // round to nearest even, lo in the low half
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ float lo_f32(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float hi_f32(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }

__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)) : "memory");
}
__device__ __forceinline__ void ldsm4_t(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)) : "memory");
}

/* element (r, c) of a [rows][W] bf16 matrix in shared memory: the 16-byte
 * chunk index is XOR-ed with row bits, so the same chunk of 8 consecutive rows
 * lands in 8 different bank groups */
template <int W>
__device__ __forceinline__ int swz(int r, int c) {
  constexpr int G = W / 8 < 8 ? W / 8 : 8;  // chunks the XOR permutes
  constexpr int RS = 8 / G;                 // rows that share a 128-byte line
  return r * W + ((((c >> 3) ^ (r / RS)) & (G - 1)) | ((c >> 3) & ~(G - 1))) * 8 + (c & 7);
}

/* The activation (and its derivative) on every element of a warp's fragments.
 * The switch sits outside the unrolled element loops: one switch per element
 * would inline every activation's code at every element, a layer loop far
 * larger than the instruction cache. */
template <int A>
__device__ __forceinline__ float act_of(float v) {
  if (A == MLP_CUDA_ACT_RELU) return v > 0.0f ? v : 0.0f;
  if (A == MLP_CUDA_ACT_SIGMOID) return 1.0f / (1.0f + expf(-v));
  if (A == MLP_CUDA_ACT_TANH) return tanhf(v);
  return v;
}
/* act'(z) from h = act(z) */
template <int A>
__device__ __forceinline__ float grad_of(float h) {
  if (A == MLP_CUDA_ACT_RELU) return h > 0.0f ? 1.0f : 0.0f;
  if (A == MLP_CUDA_ACT_SIGMOID) return h * (1.0f - h);
  if (A == MLP_CUDA_ACT_TANH) return 1.0f - h * h;
  return 1.0f;
}

template <int A, int MT, int NJ>
__device__ __forceinline__ void act_each(float (&acc)[MT][NJ][4]) {
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[m][j][q] = act_of<A>(acc[m][j][q]);
}
template <int MT, int NJ>
__device__ __forceinline__ void act_all(float (&acc)[MT][NJ][4], int act) {
  switch (act) {
    case MLP_CUDA_ACT_RELU: act_each<MLP_CUDA_ACT_RELU>(acc); break;
    case MLP_CUDA_ACT_SIGMOID: act_each<MLP_CUDA_ACT_SIGMOID>(acc); break;
    case MLP_CUDA_ACT_TANH: act_each<MLP_CUDA_ACT_TANH>(acc); break;
    default: break;
  }
}

/* g *= act'(h) where h is y itself (the f32 accumulators y) */
template <int A, int NJ>
__device__ __forceinline__ void times_grad_each(float (&g)[NJ][4], const float (&y)[NJ][4]) {
#pragma unroll
  for (int j = 0; j < NJ; ++j)
#pragma unroll
    for (int q = 0; q < 4; ++q) g[j][q] *= grad_of<A>(y[j][q]);
}
template <int NJ>
__device__ __forceinline__ void times_grad(float (&g)[NJ][4], const float (&y)[NJ][4], int act) {
  switch (act) {
    case MLP_CUDA_ACT_RELU: times_grad_each<MLP_CUDA_ACT_RELU>(g, y); break;
    case MLP_CUDA_ACT_SIGMOID: times_grad_each<MLP_CUDA_ACT_SIGMOID>(g, y); break;
    case MLP_CUDA_ACT_TANH: times_grad_each<MLP_CUDA_ACT_TANH>(g, y); break;
    default: break;
  }
}

/* elements (r, c), (r, c + 1) of a [rows][cols] bf16 or f32 matrix as a bf16
 * pair; zeros outside it. vec: cols even and the base aligned for pair loads */
__device__ __forceinline__ uint32_t load_pair(uint64_t base, int64_t r, int c, int64_t rows,
                                              int cols, bool f32, bool vec) {
  if (r >= rows || c >= cols) return 0u;
  const int64_t e = r * cols + c;
  const bool two = c + 1 < cols;
  if (f32) {
    const float* p = reinterpret_cast<const float*>(base) + e;
    if (vec) {
      const float2 v = *reinterpret_cast<const float2*>(p);
      return pack_bf16(v.x, v.y);
    }
    return pack_bf16(p[0], two ? p[1] : 0.0f);
  }
  const uint16_t* p = reinterpret_cast<const uint16_t*>(base) + e;
  if (vec) return *reinterpret_cast<const uint32_t*>(p);
  return (uint32_t)p[0] | (two ? (uint32_t)p[1] << 16 : 0u);
}
/* the same pair as f32 */
__device__ __forceinline__ float2 load_pair_f32(uint64_t base, int64_t r, int c, int64_t rows,
                                                int cols, bool f32, bool vec) {
  if (!f32) {
    const uint32_t v = load_pair(base, r, c, rows, cols, false, vec);
    return make_float2(lo_f32(v), hi_f32(v));
  }
  if (r >= rows || c >= cols) return make_float2(0.0f, 0.0f);
  const float* p = reinterpret_cast<const float*>(base) + r * cols + c;
  if (vec) return *reinterpret_cast<const float2*>(p);
  return make_float2(p[0], c + 1 < cols ? p[1] : 0.0f);
}
__device__ __forceinline__ void store_pair(uint64_t base, int64_t r, int c, int64_t rows, int cols,
                                           bool f32, bool vec, float v0, float v1) {
  if (r >= rows || c >= cols) return;
  const int64_t e = r * cols + c;
  const bool two = c + 1 < cols;
  if (f32) {
    float* p = reinterpret_cast<float*>(base) + e;
    if (vec) {
      *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
    } else {
      p[0] = v0;
      if (two) p[1] = v1;
    }
    return;
  }
  uint16_t* p = reinterpret_cast<uint16_t*>(base) + e;
  const uint32_t v = pack_bf16(v0, v1);
  if (vec) {
    *reinterpret_cast<uint32_t*>(p) = v;
  } else {
    p[0] = (uint16_t)v;
    if (two) p[1] = (uint16_t)(v >> 16);
  }
}

/* rows [r0, r1) of a [rows][cols] matrix of `item`-byte elements towards L1, one
 * 128-byte line per thread (i of n): the next tile's loads then wait on L1, not
 * memory, while this tile computes (a hint: nothing waits on it, nothing faults) */
__device__ __forceinline__ void prefetch_rows(uint64_t base, int64_t r0, int64_t r1, int64_t rows,
                                              int cols, int item, int i, int n) {
  if (r1 > rows) r1 = rows;
  const int64_t end = r1 * cols * item;
  for (int64_t b = ((r0 * cols * item) & ~(int64_t)127) + 128 * (int64_t)i; b < end; b += 128 * n)
    asm volatile("prefetch.global.L1 [%0];" : : "l"(base + b));
}

/* a tile that needs no bounds checks and no conversion: every row in range, bf16,
 * exactly W columns, pair-aligned (the common case: one load or store per pair) */
template <int W>
__device__ __forceinline__ bool dense_bf16(int64_t row_end, int64_t rows, int cols, bool f32,
                                           bool vec) {
  return row_end <= rows && cols == W && !f32 && vec;
}

/* the A fragments (m16k16, bf16) of rows row0 .. row0 + 16 MT - 1 of x */
template <int W, int MT>
__device__ __forceinline__ void load_x(uint32_t (&a)[MT][W / 16][4], const mlp_cuda_args& p,
                                       int64_t row0, int lane) {
  const int g = lane >> 2, t = lane & 3;
  if (dense_bf16<W>(row0 + 16 * MT, p.rows, p.sizes[0], p.x_f32, p.x_vec)) {
    const uint32_t* x = reinterpret_cast<const uint32_t*>(p.x) + (row0 + g) * (W / 2) + t;
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int kk = 0; kk < W / 16; ++kk)
#pragma unroll
        for (int q = 0; q < 4; ++q)
          a[m][kk][q] = __ldg(x + (16 * m + 8 * (q & 1)) * (W / 2) + 8 * kk + 4 * (q >> 1));
    return;
  }
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int kk = 0; kk < W / 16; ++kk)
#pragma unroll
      for (int q = 0; q < 4; ++q)
        a[m][kk][q] = load_pair(p.x, row0 + 16 * m + g + 8 * (q & 1), 16 * kk + 2 * t + 8 * (q >> 1),
                                p.rows, p.sizes[0], p.x_f32, p.x_vec);
}

/* rows [row0, row0 + 16 MT) of a [..][W] bf16 matrix in global memory, every row in
 * range, from fragments: pair(m, j, h) is the packed bf16 pair of row 16 m + 8 h +
 * lane / 4, columns 8 j + 2 (lane % 4) and the next */
template <int W, int MT, class Pair>
__device__ __forceinline__ void store_pairs(uint64_t base, int64_t row0, int lane, Pair pair) {
  uint32_t* y = reinterpret_cast<uint32_t*>(base) + (row0 + (lane >> 2)) * (W / 2) + (lane & 3);
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int j = 0; j < W / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) y[(16 * m + 8 * h) * (W / 2) + 4 * j] = pair(m, j, h);
}

/* rows [row0, row0 + 16 MT) of a [rows][cols] bf16 matrix (cols == W) held as accumulator
 * fragments, stored (round to nearest even) */
template <int W, int MT>
__device__ __forceinline__ void store_rows(uint64_t base, int64_t row0, int64_t rows, int cols,
                                           bool f32, bool vec, const float (&acc)[MT][W / 8][4],
                                           int lane) {
  const int g = lane >> 2, t = lane & 3;
  if (dense_bf16<W>(row0 + 16 * MT, rows, cols, f32, vec)) {
    store_pairs<W, MT>(base, row0, lane, [&](int m, int j, int h) {
      return pack_bf16(acc[m][j][2 * h], acc[m][j][2 * h + 1]);
    });
    return;
  }
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int j = 0; j < W / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        store_pair(base, row0 + 16 * m + g + 8 * h, 8 * j + 2 * t, rows, cols, f32, vec,
                   acc[m][j][2 * h], acc[m][j][2 * h + 1]);
}

/* acc = bias + a @ W^T for one layer; w: [W][W] swizzled, out-major */
template <int W, int MT>
__device__ __forceinline__ void layer_fwd(float (&acc)[MT][W / 8][4], const uint32_t (&a)[MT][W / 16][4],
                                          const uint16_t* w, const float* bias, int lane) {
  const int t = lane & 3, mi = lane >> 3, r = lane & 7;
#pragma unroll
  for (int j = 0; j < W / 8; ++j) {
    const float2 b = *reinterpret_cast<const float2*>(bias + 8 * j + 2 * t);
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      acc[m][j][0] = b.x;
      acc[m][j][1] = b.y;
      acc[m][j][2] = b.x;
      acc[m][j][3] = b.y;
    }
  }
#pragma unroll
  for (int kk = 0; kk < W / 16; ++kk)
#pragma unroll
    for (int jj = 0; jj < W / 16; ++jj) {
      uint32_t b[4];  // B fragments of n-tiles 2jj, 2jj + 1 (rows of W are B's columns)
      ldsm4(b, w + swz<W>(16 * jj + 8 * (mi >> 1) + r, 16 * kk + 8 * (mi & 1)));
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        mma(acc[m][2 * jj], a[m][kk], b[0], b[1]);
        mma(acc[m][2 * jj + 1], a[m][kk], b[2], b[3]);
      }
    }
}

/* acc = a @ W (backward-data: B = W, [out][in] read transposed) */
template <int W>
__device__ __forceinline__ void layer_bwd(float (&acc)[W / 8][4], const uint32_t (&a)[W / 16][4],
                                          const uint16_t* w, int lane) {
  const int mi = lane >> 3, r = lane & 7;
#pragma unroll
  for (int j = 0; j < W / 8; ++j)
#pragma unroll
    for (int q = 0; q < 4; ++q) acc[j][q] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < W / 16; ++kk)
#pragma unroll
    for (int jj = 0; jj < W / 16; ++jj) {
      uint32_t b[4];  // k = out rows 16kk.., n = in columns 16jj..
      ldsm4_t(b, w + swz<W>(16 * kk + 8 * (mi & 1) + r, 16 * jj + 8 * (mi >> 1)));
      mma(acc[2 * jj], a[kk], b[0], b[1]);
      mma(acc[2 * jj + 1], a[kk], b[2], b[3]);
    }
}

/* accumulator pairs (n-tiles 2kk, 2kk + 1) -> the next product's A fragment kk, in bf16 */
template <int W>
__device__ __forceinline__ void to_a(uint32_t (&a)[W / 16][4], const float (&acc)[W / 8][4]) {
#pragma unroll
  for (int kk = 0; kk < W / 16; ++kk) {
    a[kk][0] = pack_bf16(acc[2 * kk][0], acc[2 * kk][1]);
    a[kk][1] = pack_bf16(acc[2 * kk][2], acc[2 * kk][3]);
    a[kk][2] = pack_bf16(acc[2 * kk + 1][0], acc[2 * kk + 1][1]);
    a[kk][3] = pack_bf16(acc[2 * kk + 1][2], acc[2 * kk + 1][3]);
  }
}

/* A fragments of 16 rows (from row r0 of a swizzled [rows][W] matrix) stored / read back;
 * each thread touches only its own fragment elements */
template <int W>
__device__ __forceinline__ void store_a(uint16_t* s, int r0, const uint32_t (&a)[W / 16][4], int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int kk = 0; kk < W / 16; ++kk)
#pragma unroll
    for (int q = 0; q < 4; ++q)
      *reinterpret_cast<uint32_t*>(s + swz<W>(r0 + g + 8 * (q & 1), 16 * kk + 2 * t + 8 * (q >> 1))) =
          a[kk][q];
}

template <int W>
__device__ __forceinline__ void copy_weights(uint16_t* ws, float* bs, const mlp_cuda_args& p) {
  const int L = p.layers;
  const uint4* src = reinterpret_cast<const uint4*>(p.w);
  for (int i = threadIdx.x; i < L * W * W / 8; i += blockDim.x) {
    const int l = i / (W * W / 8), e = (i % (W * W / 8)) * 8;
    *reinterpret_cast<uint4*>(ws + l * W * W + swz<W>(e / W, e % W)) = src[i];
  }
  const float* b = reinterpret_cast<const float*>(p.b);
  for (int i = threadIdx.x; i < L * W; i += blockDim.x) bs[i] = b[i];
}

/* ---------------------------------------------------------------- forward */

/* A fragments of rows row0 .. row0 + 16 MT - 1 stored to a [rows][W] bf16 matrix
 * in global memory (every row in range: stored training pads the batch); register
 * q of 16 columns kk holds rows + 8 (q & 1), columns + 8 (q >> 1) */
template <int W, int MT>
__device__ __forceinline__ void keep_a(uint64_t base, int64_t row0, const uint32_t (&a)[MT][W / 16][4],
                                       int lane) {
  store_pairs<W, MT>(base, row0, lane,
                     [&](int m, int j, int h) { return a[m][j >> 1][2 * (j & 1) + h]; });
}

/* KEEP: stored training (h, yf, h_x of the arguments are read only then), its own
 * entry point, so the inference kernel's registers stay as they are */
template <int W, int MT, bool KEEP>
__device__ void forward(const mlp_cuda_args& p) {
  extern __shared__ __align__(16) unsigned char smem[];
  uint16_t* ws = reinterpret_cast<uint16_t*>(smem);
  float* bs = reinterpret_cast<float*>(ws + p.layers * W * W);
  copy_weights<W>(ws, bs, p);
  __syncthreads();
  const int lane = threadIdx.x & 31;
  const int warps = blockDim.x >> 5;
  // stored training runs the padded rows too (x reads zeros there): backward reads them
  const int64_t rows = KEEP ? p.rows_pad : p.rows;
  const int64_t tiles = (rows + 16 * MT - 1) / (16 * MT);
  const int L = p.layers, K = p.sizes[L];
  for (int64_t tile = (int64_t)blockIdx.x * warps + (threadIdx.x >> 5); tile < tiles;
       tile += (int64_t)gridDim.x * warps) {
    const int64_t row0 = tile * 16 * MT;
    uint32_t a[MT][W / 16][4];
    float acc[MT][W / 8][4];
    load_x<W, MT>(a, p, row0, lane);
    if (KEEP && p.h_x) keep_a<W, MT>(p.h, row0, a, lane);
    const int64_t next = row0 + (int64_t)gridDim.x * warps * 16 * MT;  // this warp's next tile
    prefetch_rows(p.x, next, next + 16 * MT, p.rows, p.sizes[0], p.x_f32 ? 4 : 2, lane, 32);
#pragma unroll 1
    for (int l = 0; l < L; ++l) {
      layer_fwd<W, MT>(acc, a, ws + l * W * W, bs + l * W, lane);
      act_all(acc, p.act[l]);
      if (l + 1 < L) {
#pragma unroll
        for (int m = 0; m < MT; ++m) to_a<W>(a[m], acc[m]);
        if (KEEP) keep_a<W, MT>(p.h + (uint64_t)(l + 1) * p.rows_pad * W * 2, row0, a, lane);
      }
    }
    store_rows<W, MT>(p.y, row0, p.rows, K, p.y_f32, p.y_vec, acc, lane);
    if (KEEP && p.yf) store_rows<W, MT>(p.yf, row0, p.rows, W, true, true, acc, lane);
  }
}

/* ---------------------------------------------------------------- backward */

/* column of element (o, c) of a block's f32 dW partial [W][W] in shared memory
 * (an involution): with BWD_DW_SWIZZLE the 8-float group is XOR-ed with row bits,
 * so the 8 rows x 4 pairs of a warp's float2 access spread over all banks */
template <int W>
__device__ __forceinline__ int dw_col(int o, int c) {
#if BWD_DW_SWIZZLE
  constexpr int Q = W / 8 < 4 ? W / 8 : 4;  // groups the XOR permutes
  constexpr int RS = W >= 32 ? 1 : 32 / W;  // rows that share a 128-byte line
  return c ^ (((o / RS) & (Q - 1)) << 3);
#else
  return c;
#endif
}

/* one 16-row step of a weight-gradient unit: A = dz^T (pa), B = h (pb per 16 inputs),
 * `off` elements further (16 rows further is 16 W elements further: swz's XOR reads
 * the row mod 8 only) */
template <int NB>
__device__ __forceinline__ void wg_load(uint32_t (&a)[4], uint32_t (&b)[NB][4], const uint16_t* pa,
                                        const uint16_t* const (&pb)[NB], int off) {
  ldsm4_t(a, pa + off);
#pragma unroll
  for (int jj = 0; jj < NB; ++jj) ldsm4_t(b[jj], pb[jj] + off);
}
template <int NB>
__device__ __forceinline__ void wg_mma(float (&acc)[2 * NB][4], float (&sum)[4], const uint32_t (&a)[4],
                                       const uint32_t (&b)[NB][4], bool sums, uint32_t ones) {
#pragma unroll
  for (int jj = 0; jj < NB; ++jj) {
    mma(acc[2 * jj], a, b[jj][0], b[jj][1]);
    mma(acc[2 * jj + 1], a, b[jj][2], b[jj][3]);
  }
  if (sums) mma(sum, a, ones, ones);  // every column: the row sums of dz^T
}

/* dW_l (+)= DZ^T H and db_l (+)= column sums of DZ over the block's T rows, in
 * units of 16 outputs x (up to) 32 inputs; each unit belongs to one warp */
template <int W>
__device__ __forceinline__ void weight_grads(float* dw, float* db, const uint16_t* dz,
                                             const uint16_t* h, int T, int warp, int warps, int lane) {
  constexpr int NC = W >= 32 ? 4 : 2;   // n8 tiles per unit
  constexpr int CH = W / (8 * NC);      // units per 16 outputs
  const int g = lane >> 2, t = lane & 3, mi = lane >> 3, r = lane & 7;
  const uint32_t ones = pack_bf16(1.0f, 1.0f);
  for (int u = warp; u < (W / 16) * CH; u += warps) {
#if BWD_DW_SWIZZLE  // by column chunk first: warps w and w + 4 (one scheduler) get one db unit
    const int mt = u % (W / 16), n0 = (u / (W / 16)) * 8 * NC;
#else
    const int mt = u / CH, n0 = (u % CH) * 8 * NC;
#endif
    float acc[NC][4] = {};
    float sum[4] = {};
#if BWD_WG_PIPE
    const uint16_t* pa = dz + swz<W>(8 * (mi >> 1) + r, 16 * mt + 8 * (mi & 1));
    const uint16_t* pb[NC / 2];
#pragma unroll
    for (int jj = 0; jj < NC / 2; ++jj) pb[jj] = h + swz<W>(8 * (mi & 1) + r, n0 + 16 * jj + 8 * (mi >> 1));
    uint32_t a0[4], a1[4], b0[NC / 2][4], b1[NC / 2][4];
    const int KS = T / 16;
    wg_load(a0, b0, pa, pb, 0);
#pragma unroll 1
    for (int ks = 0; ks < KS; ks += 2) {  // step ks + 1 loads while step ks multiplies
      if (ks + 1 < KS) wg_load(a1, b1, pa, pb, (ks + 1) * 16 * W);
      wg_mma(acc, sum, a0, b0, n0 == 0, ones);
      if (ks + 2 < KS) wg_load(a0, b0, pa, pb, (ks + 2) * 16 * W);
      if (ks + 1 < KS) wg_mma(acc, sum, a1, b1, n0 == 0, ones);
    }
#else
#pragma unroll 2
    for (int ks = 0; ks < T / 16; ++ks) {
      uint32_t a[4];  // dz^T: m = outputs 16mt.., k = rows 16ks..
      ldsm4_t(a, dz + swz<W>(16 * ks + 8 * (mi >> 1) + r, 16 * mt + 8 * (mi & 1)));
#pragma unroll
      for (int jj = 0; jj < NC / 2; ++jj) {
        uint32_t b[4];  // h: k = rows, n = inputs n0 + 16jj..
        ldsm4_t(b, h + swz<W>(16 * ks + 8 * (mi & 1) + r, n0 + 16 * jj + 8 * (mi >> 1)));
        mma(acc[2 * jj], a, b[0], b[1]);
        mma(acc[2 * jj + 1], a, b[2], b[3]);
      }
      if (n0 == 0) mma(sum, a, ones, ones);  // every column: the row sums of dz^T
    }
#endif
#pragma unroll
    for (int j = 0; j < NC; ++j)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int o = 16 * mt + g + 8 * hh;
        float2* c = reinterpret_cast<float2*>(dw + o * W + dw_col<W>(o, n0 + 8 * j + 2 * t));
        float2 v = *c;
        v.x += acc[j][2 * hh];
        v.y += acc[j][2 * hh + 1];
        *c = v;
      }
    if (n0 == 0 && t == 0) {
      db[16 * mt + g] += sum[0];
      db[16 * mt + g + 8] += sum[2];
    }
  }
}

/* this thread's pairs of 16 rows of dy from row0 (dense bf16: every row there, W wide) */
template <int W>
__device__ __forceinline__ void load_dy_dense(uint32_t (&d)[W / 8][2], const mlp_cuda_args& p,
                                              int64_t row0, int lane) {
  const uint32_t* dy = reinterpret_cast<const uint32_t*>(p.dy) + (row0 + (lane >> 2)) * (W / 2) + (lane & 3);
#pragma unroll
  for (int j = 0; j < W / 8; ++j)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) d[j][hh] = __ldg(dy + 8 * hh * (W / 2) + 4 * j);
}

template <int W>
__device__ void backward(const mlp_cuda_args& p) {
  constexpr int MT = 1;
  extern __shared__ __align__(16) unsigned char smem[];
  const int L = p.layers, warps = blockDim.x >> 5, T = 16 * MT * warps;
  uint16_t* ws = reinterpret_cast<uint16_t*>(smem);        // [L][W][W]
  uint16_t* hs = ws + L * W * W;                           // [L][T][W]: each layer's input
  uint16_t* dzs = hs + L * T * W;                          // [T][W]
  float* dws = reinterpret_cast<float*>(dzs + T * W);      // [L][W][W]
  float* dbs = dws + L * W * W;                            // [L][W]
  float* bs = dbs + L * W;                                 // [L][W]
  copy_weights<W>(ws, bs, p);
  for (int i = threadIdx.x; i < L * W * W + L * W; i += blockDim.x) dws[i] = 0.0f;
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int C = p.sizes[0], K = p.sizes[L], last = p.act[L - 1];
  const int64_t tiles = (p.rows + T - 1) / T;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int r0 = 16 * warp;              // this warp's rows in the tile
    const int64_t row0 = tile * T + r0;
    uint32_t a[MT][W / 16][4];
    float acc[MT][W / 8][4];
#if BWD_EARLY_DY  // this tile's dy and x before the next tile's prefetch can evict them from L1
    const bool dy_dense = dense_bf16<W>(row0 + 16, p.rows, K, p.dy_f32, p.dy_vec);
    uint32_t dyv[W / 8][2];
    if (dy_dense) load_dy_dense<W>(dyv, p, row0, lane);
    load_x<W, MT>(a, p, row0, lane);
#endif
    {  // the block's next tile: x by the first half of the threads, dy by the second
      const int64_t next = (tile + gridDim.x) * T;
      const int half = blockDim.x / 2, i = threadIdx.x % half;
      if ((int)threadIdx.x < half)
        prefetch_rows(p.x, next, next + T, p.rows, C, p.x_f32 ? 4 : 2, i, half);
      else
        prefetch_rows(p.dy, next, next + T, p.rows, K, p.dy_f32 ? 4 : 2, i, half);
    }
    // the forward again, keeping every layer's input
#if !BWD_EARLY_DY
    load_x<W, MT>(a, p, row0, lane);
#endif
    store_a<W>(hs, r0, a[0], lane);
    const int fwd_layers = last == MLP_CUDA_ACT_NONE ? L - 1 : L;  // y only for act'(y)
#pragma unroll 1
    for (int l = 0; l < fwd_layers; ++l) {
      layer_fwd<W, MT>(acc, a, ws + l * W * W, bs + l * W, lane);
      act_all(acc, p.act[l]);
      if (l + 1 < L) {
        to_a<W>(a[0], acc[0]);
        store_a<W>(hs + (l + 1) * T * W, r0, a[0], lane);
      }
    }
    // dz of the last layer: dy * act'(y), y (f32) in acc
    {
      float dz[W / 8][4];
#if !BWD_EARLY_DY
      const bool dy_dense = dense_bf16<W>(row0 + 16, p.rows, K, p.dy_f32, p.dy_vec);
      uint32_t dyv[W / 8][2];
#endif
      if (dy_dense) {
#if !BWD_EARLY_DY
        load_dy_dense<W>(dyv, p, row0, lane);
#endif
#pragma unroll
        for (int j = 0; j < W / 8; ++j)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            dz[j][2 * hh] = lo_f32(dyv[j][hh]);
            dz[j][2 * hh + 1] = hi_f32(dyv[j][hh]);
          }
      } else {
#pragma unroll
        for (int j = 0; j < W / 8; ++j)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const float2 d = load_pair_f32(p.dy, row0 + g + 8 * hh, 8 * j + 2 * t, p.rows, K,
                                           p.dy_f32, p.dy_vec);
            dz[j][2 * hh] = d.x;
            dz[j][2 * hh + 1] = d.y;
          }
      }
      times_grad(dz, acc[0], last);
#pragma unroll
      for (int j = 0; j < W / 8; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[0][j][q] = dz[j][q];
    }
#pragma unroll 1
    for (int l = L - 1; l >= 0; --l) {
      to_a<W>(a[0], acc[0]);              // dz_l in bf16
#if BWD_FEWER_SYNCS
      // dz_l into the slot of h_{l+2} (slot L = dzs for the top two): every warp read
      // that last in weight_grads of layer l + 2, before the barrier of layer l + 1
      uint16_t* dz = hs + (l + 2 < L ? l + 2 : L) * T * W;
      if (l == L - 2) __syncthreads();    // slot L: weight_grads of layer L - 1 reads it
#else
      uint16_t* dz = dzs;
#endif
      store_a<W>(dz, r0, a[0], lane);
      if (l > 0 || p.dx) {
        layer_bwd<W>(acc[0], a[0], ws + l * W * W, lane);
        if (l > 0) {                      // dz_{l-1} = dh_l * act'(h_l), h_l as this thread stored it
          const int act = p.act[l - 1];
          if (act != MLP_CUDA_ACT_NONE) {
            const uint16_t* h = hs + l * T * W;
            float hf[W / 8][4];
#pragma unroll
            for (int j = 0; j < W / 8; ++j)
#pragma unroll
              for (int hh = 0; hh < 2; ++hh) {
                const uint32_t hv = *reinterpret_cast<const uint32_t*>(
                    h + swz<W>(r0 + g + 8 * hh, 8 * j + 2 * t));
                hf[j][2 * hh] = lo_f32(hv);
                hf[j][2 * hh + 1] = hi_f32(hv);
              }
            times_grad(acc[0], hf, act);
          }
        } else {
          store_rows<W, MT>(p.dx, row0, p.rows, C, p.dx_f32, p.dx_vec, acc, lane);
        }
      }
      __syncthreads();                    // every warp's dz_l is in shared memory
      weight_grads<W>(dws + l * W * W, dbs + l * W, dz, hs + l * T * W, T, warp, warps, lane);
#if !BWD_FEWER_SYNCS
      __syncthreads();                    // before dz_{l-1} overwrites it
#endif
    }
#if BWD_FEWER_SYNCS
    __syncthreads();  // before the next tile's forward overwrites what weight_grads read
#endif
  }
  float* out = reinterpret_cast<float*>(p.partial) + (int64_t)blockIdx.x * (L * W * W + L * W);
  for (int i = threadIdx.x; i < L * W * W + L * W; i += blockDim.x) {
    const int o = i / W % W, c = i % W;  // dW rows o of each layer, then db (not swizzled)
    out[i] = dws[i < L * W * W ? i - c + dw_col<W>(o, c) : i];
  }
}

/* ------------------------------------------------- backward from stored activations */

__device__ __forceinline__ uint32_t transpose8(uint32_t v) {
  uint32_t r;  // an 8 x 8 bf16 matrix in the mma fragment layout, transposed in registers
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(r) : "r"(v));
  return r;
}

/* dz (A fragments of 16 rows from row0, bf16) -> dz^T into its [W][DZT_ROWS] tile, and
 * its column sums added to db (f32, this warp's own partial in shared memory).
 * Each 8 x 8 block is transposed in registers; the transposed blocks are also the
 * m16k16 A fragment of dz^T, whose product with ones gives the sums. */
template <int W>
__device__ __forceinline__ void keep_dz(uint16_t* dzt, float* db, int64_t row0,
                                        const uint32_t (&a)[W / 16][4], int lane) {
  constexpr int T = MLP_CUDA_DZT_ROWS;
  const int g = lane >> 2, t = lane & 3;
  uint16_t* tile = dzt + (row0 / T) * W * T + row0 % T + 2 * t;
  const uint32_t ones = pack_bf16(1.0f, 1.0f);
#pragma unroll
  for (int kk = 0; kk < W / 16; ++kk) {
    uint32_t tr[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {  // block q: rows 8 (q & 1).., outputs 16 kk + 8 (q >> 1)..
      tr[q] = transpose8(a[kk][q]);
      *reinterpret_cast<uint32_t*>(tile + (16 * kk + 8 * (q >> 1) + g) * T + 8 * (q & 1)) = tr[q];
    }
    const uint32_t at[4] = {tr[0], tr[2], tr[1], tr[3]};
    float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    mma(sum, at, ones, ones);
    if (t == 0) {
      db[16 * kk + g] += sum[0];
      db[16 * kk + g + 8] += sum[2];
    }
  }
}

/* Backward-data from the activations the training forward kept (no recompute):
 * per 16 rows, layers descending, dz_l = dh_l * act'(h_l) with h_l read back
 * (bf16) and dh_l = dz_{l+1} W_{l+1} on tensor cores; every dz_l goes out as
 * dz^T tiles (the weight gradients' batch-reduce GEMMs read them) and its
 * column sums into this warp's db partial (shared memory, written out once).
 * Runs the padded rows too (their dy reads as zeros, so their dz are zeros). */
template <int W>
__device__ void backward_stored(const mlp_cuda_args& p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int L = p.layers, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  uint16_t* ws = reinterpret_cast<uint16_t*>(smem);         // [L][W][W]
  float* bs = reinterpret_cast<float*>(ws + L * W * W);     // [L][W]
  float* db = bs + L * W + warp * L * W;                    // this warp's db partial [L][W]
  copy_weights<W>(ws, bs, p);
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  for (int i = lane; i < L * W; i += 32) db[i] = 0.0f;
  __syncthreads();
  const int64_t gw = (int64_t)blockIdx.x * warps + warp;
  const int64_t nw = (int64_t)gridDim.x * warps;
  const int C = p.sizes[0], K = p.sizes[L], last = p.act[L - 1];
  const int64_t tiles = p.rows_pad / 16, plane = p.rows_pad * W;
  for (int64_t tile = gw; tile < tiles; tile += nw) {
    const int64_t row0 = tile * 16;
    float acc[1][W / 8][4];
#pragma unroll
    for (int j = 0; j < W / 8; ++j)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const float2 d = load_pair_f32(p.dy, row0 + g + 8 * hh, 8 * j + 2 * t, p.rows, K,
                                       p.dy_f32, p.dy_vec);
        acc[0][j][2 * hh] = d.x;
        acc[0][j][2 * hh + 1] = d.y;
      }
    if (last != MLP_CUDA_ACT_NONE) {  // act'(y) from the forward's f32 y
      float yv[W / 8][4];
#pragma unroll
      for (int j = 0; j < W / 8; ++j)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const float2 v = load_pair_f32(p.yf, row0 + g + 8 * hh, 8 * j + 2 * t, p.rows, W, true,
                                         true);
          yv[j][2 * hh] = v.x;
          yv[j][2 * hh + 1] = v.y;
        }
      times_grad(acc[0], yv, last);
    }
#pragma unroll 1
    for (int l = L - 1; l >= 0; --l) {
      uint32_t a[W / 16][4];
      to_a<W>(a, acc[0]);  // dz_l in bf16
      keep_dz<W>(reinterpret_cast<uint16_t*>(p.dzt) + l * plane, db + l * W, row0, a, lane);
      if (l == 0 && !p.dx) break;
      layer_bwd<W>(acc[0], a, ws + l * W * W, lane);
      if (l == 0) {
        store_rows<W, 1>(p.dx, row0, p.rows, C, p.dx_f32, p.dx_vec, acc, lane);
        break;
      }
      const int act = p.act[l - 1];
      if (act != MLP_CUDA_ACT_NONE) {  // dz_{l-1} = dh_l * act'(h_l), h_l as the forward kept it
        const uint32_t* h = reinterpret_cast<const uint32_t*>(p.h) + (l * plane + (row0 + g) * W) / 2 + t;
        float hf[W / 8][4];
#pragma unroll
        for (int j = 0; j < W / 8; ++j)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const uint32_t hv = __ldg(h + 8 * hh * (W / 2) + 4 * j);
            hf[j][2 * hh] = lo_f32(hv);
            hf[j][2 * hh + 1] = hi_f32(hv);
          }
        times_grad(acc[0], hf, act);
      }
    }
  }
  __syncwarp();
  float* out = reinterpret_cast<float*>(p.partial_db) + gw * L * W;
  for (int i = lane; i < L * W; i += 32) out[i] = db[i];
}

}  // namespace

/* ---------------------------------------------------------------- entry points */

#define MLP_ENTRIES(W)                                                                  \
  extern "C" __global__ void __launch_bounds__(MLP_CUDA_FWD_WARPS * 32, FWD_MIN_BLOCKS) \
      mlp_forward_w##W(const __grid_constant__ mlp_cuda_args p) {                       \
    forward<W, (W >= 128 ? MLP_CUDA_FWD_ROWS_W128 : MLP_CUDA_FWD_ROWS) / 16, false>(p); \
  }                                                                                     \
  extern "C" __global__ void __launch_bounds__(MLP_CUDA_FWD_WARPS * 32, FWD_MIN_BLOCKS) \
      mlp_forward_keep_w##W(const __grid_constant__ mlp_cuda_args p) {                  \
    forward<W, (W >= 128 ? MLP_CUDA_FWD_ROWS_W128 : MLP_CUDA_FWD_ROWS) / 16, true>(p);  \
  }                                                                                     \
  extern "C" __global__ void __launch_bounds__(BWD_MAX_WARPS * 32, 1)                   \
      mlp_backward_w##W(const __grid_constant__ mlp_cuda_args p) { backward<W>(p); }     \
  extern "C" __global__ void __launch_bounds__(MLP_CUDA_STORED_WARPS * 32)               \
      mlp_backward_stored_w##W(const __grid_constant__ mlp_cuda_args p) {                \
    backward_stored<W>(p);                                                              \
  }

MLP_ENTRIES(16)
MLP_ENTRIES(32)
MLP_ENTRIES(64)
MLP_ENTRIES(128)

/* dW and db: the sums of their partials (dW: `partials` stride_w apart, db:
 * `partials_db` stride_b apart), each in a fixed order, unpadded into every
 * layer's [out_l][in_l] and [out_l] end to end */
extern "C" __global__ void mlp_reduce(const __grid_constant__ mlp_cuda_args p, int width) {
  const int L = p.layers;
  const int64_t nw = (int64_t)L * width * width;
  const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= nw + L * width) return;
  if (e < nw) {
    const int l = (int)(e / (width * width)), i = (int)(e / width % width), j = (int)(e % width);
    const int in = p.sizes[l], out = p.sizes[l + 1];
    if (i >= out || j >= in) return;
    const float* part = reinterpret_cast<const float*>(p.partial) + e;
    float s = 0.0f;
    for (int b = 0; b < p.partials; ++b) s += part[b * p.stride_w];
    int64_t off = 0;
    for (int k = 0; k < l; ++k) off += (int64_t)p.sizes[k] * p.sizes[k + 1];
    reinterpret_cast<float*>(p.dw)[off + (int64_t)i * in + j] = s;
  } else {
    const int64_t f = e - nw;
    const int l = (int)(f / width), i = (int)(f % width);
    if (i >= p.sizes[l + 1]) return;
    const float* part = reinterpret_cast<const float*>(p.partial_db) + f;
    float s = 0.0f;
    for (int b = 0; b < p.partials_db; ++b) s += part[b * p.stride_b];
    int64_t off = 0;
    for (int k = 0; k < l; ++k) off += p.sizes[k + 1];
    reinterpret_cast<float*>(p.db)[off + i] = s;
  }
}
