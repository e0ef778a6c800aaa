/* The wrap fix of the shifted forward (primitives/conv_in_place.py,
 * shifted_plan): a 3x3 convolution, stride 1, padding 1, on NCHW x and y in
 * place, whose plan runs the output rows 1..H-2 as one flat run of pixels.
 * There a tap's pixel shift crosses the row ends: output (p, 0) took tap
 * s = 0 from x's pixel (p + r - 2, W - 1) and (p, W - 1) took s = 2 from
 * (p + r, 0), where the padding has zeros. This takes those products back:
 *   y[n][k][p][0]     -= sum_{c,r} w[k][c][r][0] x[n][c][p + r - 2][W - 1],  2 <= p <= H - 2
 *   y[n][k][p][W - 1] -= sum_{c,r} w[k][c][r][2] x[n][c][p + r][0],         1 <= p <= H - 3
 * (the plan's first and last flat pixels leave those taps out, so the rows
 * 1 and H - 2 need none). Each image's two columns of x gathered first
 * ([C][H], the rows contiguous); then per task (a side, an image, a block of
 * output channels) the sums with the column's rows as the vector, w's taps
 * broadcast from w as it lies (gathering them into vectors of channels first
 * cost as much as the sums). Three versions (AVX-512, AVX2 + FMA, plain C);
 * `isa` picks one (0: the best this CPU runs; 1 plain, 2 AVX2, 3 AVX-512:
 * for tests, which check each against NumPy). */
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "brgemm_cpu.h"

/* output channels a task takes (of one side of one image), and the floats
 * read past a column's end by the last vectors of rows (summed, never
 * stored): zeros after the last column */
enum { UNWRAP_K = 32, UNWRAP_PAD = 4 * 16 + 8 };

/* sums[kk][p] = sum_{c, r} wk[kk ldw + 9 c + 3 r] col[c H + p0 + dp + r + p]
 * for kk < kn, p < np, taken from y[kk H W + (p0 + p) W + q] (wk: w at the
 * block's first channel and this side's tap s; y at its first channel) */
static void unwrap_plain(const float* col, int64_t C, int64_t H, int64_t W, const float* wk,
                         int64_t ldw, int64_t kn, int64_t p0, int64_t np, int64_t dp, int64_t q,
                         float* y) {
  for (int64_t kk = 0; kk < kn; ++kk)
    for (int64_t p = 0; p < np; ++p) {
      float acc = 0.0f;
      for (int64_t c = 0; c < C; ++c)
        for (int64_t r = 0; r < 3; ++r)
          acc += wk[kk * ldw + 9 * c + 3 * r] * col[c * H + p0 + dp + r + p];
      y[kk * H * W + (p0 + p) * W + q] -= acc;
    }
}

/* unwrap_plain's sums in vectors of LANES rows: PV vectors of rows by KB
 * channels at once, the kn channels in blocks of KB (a last block's missing
 * channels repeat its last real one, summed and not stored); per (c, r) PV
 * loads of the column and KB broadcasts of w for KB x PV FMAs. One body for
 * both widths and every shape of the block; each version takes any kn. */
#define UNWRAP_SIMD(NAME, TARGET, VEC, LANES, PV, KB, ZERO, LOADU, BCAST, FMADD, STORE)      \
  __attribute__((target(TARGET))) static void NAME(                                          \
      const float* col, int64_t C, int64_t H, int64_t W, const float* wk, int64_t ldw,       \
      int64_t kn, int64_t p0, int64_t np, int64_t dp, int64_t q, float* y) {                 \
    for (int64_t k0 = 0; k0 < kn; k0 += KB) {                                                \
      const int64_t kr = kn - k0 < KB ? kn - k0 : KB; /* this block's real channels */      \
      const float* wr[KB];                                                                   \
      for (int kk = 0; kk < KB; ++kk) wr[kk] = wk + (k0 + (kk < kr ? kk : kr - 1)) * ldw;    \
      for (int64_t p = 0; p < np; p += PV * LANES) {                                         \
        VEC acc[KB][PV];                                                                     \
        for (int kk = 0; kk < KB; ++kk)                                                      \
          for (int v = 0; v < PV; ++v) acc[kk][v] = ZERO();                                  \
        for (int64_t c = 0; c < C; ++c)                                                      \
          for (int r = 0; r < 3; ++r) {                                                      \
            const float* xc = col + c * H + p0 + dp + r + p;                                 \
            VEC xv[PV];                                                                      \
            for (int v = 0; v < PV; ++v) xv[v] = LOADU(xc + LANES * v);                      \
            for (int kk = 0; kk < KB; ++kk) {                                                \
              const VEC b = BCAST(wr[kk] + 9 * c + 3 * r);                                   \
              for (int v = 0; v < PV; ++v) acc[kk][v] = FMADD(b, xv[v], acc[kk][v]);         \
            }                                                                                \
          }                                                                                  \
        float sums[KB][PV * LANES];                                                          \
        for (int kk = 0; kk < KB; ++kk)                                                      \
          for (int v = 0; v < PV; ++v) STORE(sums[kk] + LANES * v, acc[kk][v]);              \
        const int64_t rows = np - p < PV * LANES ? np - p : PV * LANES;                      \
        for (int64_t kk = 0; kk < kr; ++kk)                                                  \
          for (int64_t i = 0; i < rows; ++i)                                                 \
            y[(k0 + kk) * H * W + (p0 + p + i) * W + q] -= sums[kk][i];                      \
      }                                                                                      \
    }                                                                                        \
  }

/* _mm256_broadcast_ss's AVX-512 twin: a float from memory into every lane */
__attribute__((target("avx512f"))) static inline __m512 broadcast512(const float* x) {
  return _mm512_set1_ps(*x);
}

/* blocks sized so that the sums (KB x PV vectors), a row of column vectors
 * and a broadcast fit the registers: 16 and 32 for AVX2 and AVX-512; the
 * AVX-512 version by the column's length, so that short columns do not sum
 * rows of zeros */
UNWRAP_SIMD(unwrap_avx2, "avx2,fma", __m256, 8, 2, 6, _mm256_setzero_ps, _mm256_loadu_ps,
            _mm256_broadcast_ss, _mm256_fmadd_ps, _mm256_storeu_ps)
UNWRAP_SIMD(unwrap_avx512_1, "avx512f", __m512, 16, 1, 12, _mm512_setzero_ps, _mm512_loadu_ps,
            broadcast512, _mm512_fmadd_ps, _mm512_storeu_ps)
UNWRAP_SIMD(unwrap_avx512_2, "avx512f", __m512, 16, 2, 10, _mm512_setzero_ps, _mm512_loadu_ps,
            broadcast512, _mm512_fmadd_ps, _mm512_storeu_ps)
UNWRAP_SIMD(unwrap_avx512_4, "avx512f", __m512, 16, 4, 6, _mm512_setzero_ps, _mm512_loadu_ps,
            broadcast512, _mm512_fmadd_ps, _mm512_storeu_ps)

typedef void (*unwrap_fn)(const float*, int64_t, int64_t, int64_t, const float*, int64_t, int64_t,
                          int64_t, int64_t, int64_t, int64_t, float*);

int brgemm_cpu_conv_unwrap(const float* x, int64_t N, int64_t C, int64_t H, int64_t W,
                           const float* w, int64_t K, float* y, int isa, int threads) {
  if (!x || !w || !y || N < 1 || C < 1 || K < 1 || H < 2 || W < 2 || isa < 0 || isa > 3)
    return BRGEMM_EINVAL;
  __builtin_cpu_init();
  if (isa == 0)
    isa = __builtin_cpu_supports("avx512f") ? 3
          : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 2 : 1;
  if ((isa == 3 && !__builtin_cpu_supports("avx512f")) ||
      (isa == 2 && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))))
    return BRGEMM_EINVAL;  /* asked for what this CPU lacks */
  const int64_t np = H - 3; /* rows each side fixes */
  if (np < 1) return BRGEMM_OK;
  const unwrap_fn fn = isa == 1   ? unwrap_plain
                       : isa == 2 ? unwrap_avx2
                       : np <= 16 ? unwrap_avx512_1
                       : np <= 32 ? unwrap_avx512_2
                                  : unwrap_avx512_4;
  /* the columns [N][2][C][H]: x's last column (side 0) and its first (side 1) */
  float* cols = malloc((size_t)(N * 2 * C * H + UNWRAP_PAD) * sizeof(float));
  if (!cols) return BRGEMM_ENOMEM;
  memset(cols + N * 2 * C * H, 0, UNWRAP_PAD * sizeof(float));
  const int64_t blocks = (K + UNWRAP_K - 1) / UNWRAP_K;
#pragma omp parallel num_threads(brgemm_cpu_plan_threads(threads))
  {
#pragma omp for schedule(static)
    for (int64_t t = 0; t < N * 2; ++t) {
      const float* xn = x + t / 2 * C * H * W + (t % 2 ? 0 : W - 1);
      float* col = cols + t * C * H;
      for (int64_t c = 0; c < C * H; ++c) col[c] = xn[c * W];
    }
#pragma omp for schedule(static)
    for (int64_t t = 0; t < N * 2 * blocks; ++t) { /* (image, side, channel block) */
      const int64_t n = t / (2 * blocks), side = t / blocks % 2, k0 = t % blocks * UNWRAP_K;
      const int64_t kn = K - k0 < UNWRAP_K ? K - k0 : UNWRAP_K;
      /* left: p = 2 .. H-2 read column W-1, rows p + r - 2, tap s = 0; right:
       * p = 1 .. H-3, column 0, rows p + r, tap s = 2 */
      const int64_t p0 = side ? 1 : 2, dp = side ? 0 : -2, q = side ? W - 1 : 0;
      const float* col = cols + (n * 2 + side) * C * H;
      fn(col, C, H, W, w + k0 * C * 9 + (side ? 2 : 0), C * 9, kn, p0, np, dp, q,
         y + (n * K + k0) * H * W);
    }
  }
  free(cols);
  return BRGEMM_OK;
}
