/* The wrap fix of the shifted forward (primitives/conv_in_place.py,
 * shifted_plan): a 3x3 convolution, stride 1, padding 1, on NCHW x and y in
 * place, whose plan runs the output rows 1..H-2 as one flat run of pixels.
 * There a tap's pixel shift crosses the row ends: output (p, 0) took tap
 * s = 0 from x's pixel (p + r - 2, W - 1) and (p, W - 1) took s = 2 from
 * (p + r, 0), where the padding has zeros. This takes those products back:
 *   y[n][k][p][0]     -= sum_{c,r} w[k][c][r][0] x[n][c][p + r - 2][W - 1],  2 <= p <= H - 2
 *   y[n][k][p][W - 1] -= sum_{c,r} w[k][c][r][2] x[n][c][p + r][0],         1 <= p <= H - 3
 * (the plan's first and last flat pixels leave those taps out, so the rows
 * 1 and H - 2 need none). The two taps' weights gathered once per call,
 * channels innermost; per task (an image's side) the column of x gathered
 * once, then sums with 32 channels as the vector (a short column of H - 3 rows would fill
 * vectors of rows in part). Three versions (AVX-512, AVX2 + FMA, plain C);
 * `isa` picks one (0: the best this CPU runs; 1 plain, 2 AVX2, 3 AVX-512:
 * for tests, which check each against NumPy). */
#include <immintrin.h>
#include <stdlib.h>

#include "brgemm_cpu.h"

/* output channels a block (wk's rows), and the most rows summed at once
 * (the column's zero tail): 2 x 6 AVX-512 sums (4 x 3 AVX2) in flight, as
 * many as an FMA's latency times its rate keeps busy */
enum { UNWRAP_K = 32, UNWRAP_P = 8 };

/* For output channels k0 + kk (kk < kn <= UNWRAP_K, their weights of this
 * side's tap in wk [C][3][UNWRAP_K], zeros past kn) and rows p0 + p, p < np:
 * sums over c and r of wk times the column's values, with the channels as
 * the vector, then taken from y's column q (y: the block's first channel,
 * rows H W apart). */
static void unwrap_plain(const float* col, int64_t C, int64_t H, int64_t W, const float* wk,
                         int64_t kn, int64_t p0, int64_t np, int64_t dp, int64_t q, float* y) {
  for (int64_t p = 0; p < np; ++p) {
    float acc[UNWRAP_K] = {0.0f};
    for (int64_t c = 0; c < C; ++c)
      for (int64_t r = 0; r < 3; ++r) {
        const float v = col[c * H + p0 + dp + r + p];
        for (int kk = 0; kk < UNWRAP_K; ++kk) acc[kk] += v * wk[(c * 3 + r) * UNWRAP_K + kk];
      }
    for (int64_t kk = 0; kk < kn; ++kk) y[kk * H * W + (p0 + p) * W + q] -= acc[kk];
  }
}

/* the sums of rows p .. p + rows - 1 (sums [rows][UNWRAP_K]) taken from y */
static inline void unwrap_store(const float* sums, int rows, int64_t kn, int64_t H, int64_t W,
                                int64_t row, int64_t q, float* y) {
  for (int i = 0; i < rows; ++i)
    for (int64_t kk = 0; kk < kn; ++kk) y[kk * H * W + (row + i) * W + q] -= sums[i * UNWRAP_K + kk];
}

/* unwrap_plain's sums in vectors: P rows at once (UNWRAP_P at most), the
 * UNWRAP_K channels as V vectors of LANES floats; one body for both widths */
#define UNWRAP_SIMD(NAME, TARGET, VEC, LANES, ROWS, ZERO, LOAD, BCAST, FMADD, STORE)         \
  __attribute__((target(TARGET))) static void NAME(                                          \
      const float* col, int64_t C, int64_t H, int64_t W, const float* wk, int64_t kn,        \
      int64_t p0, int64_t np, int64_t dp, int64_t q, float* y) {                             \
    enum { P = ROWS, V = UNWRAP_K / LANES };                                                 \
    for (int64_t p = 0; p < np; p += P) {                                                    \
      VEC acc[P][V];                                                                         \
      for (int i = 0; i < P; ++i)                                                            \
        for (int v = 0; v < V; ++v) acc[i][v] = ZERO();                                      \
      for (int64_t c = 0; c < C; ++c)                                                        \
        for (int64_t r = 0; r < 3; ++r) {                                                    \
          const float* wr = wk + (c * 3 + r) * UNWRAP_K;                                     \
          const float* xc = col + c * H + p0 + dp + r + p;                                   \
          VEC wv[V];                                                                         \
          for (int v = 0; v < V; ++v) wv[v] = LOAD(wr + LANES * v);                          \
          for (int i = 0; i < P; ++i) {                                                      \
            const VEC x = BCAST(xc + i);                                                     \
            for (int v = 0; v < V; ++v) acc[i][v] = FMADD(x, wv[v], acc[i][v]);              \
          }                                                                                  \
        }                                                                                    \
      float sums[P * UNWRAP_K];                                                              \
      for (int i = 0; i < P; ++i)                                                            \
        for (int v = 0; v < V; ++v) STORE(sums + i * UNWRAP_K + LANES * v, acc[i][v]);       \
      unwrap_store(sums, np - p < P ? (int)(np - p) : P, kn, H, W, p0 + p, q, y);            \
    }                                                                                        \
  }

/* _mm256_broadcast_ss's AVX-512 twin: a float from memory into every lane */
__attribute__((target("avx512f"))) static inline __m512 broadcast512(const float* x) {
  return _mm512_set1_ps(*x);
}

UNWRAP_SIMD(unwrap_avx2, "avx2,fma", __m256, 8, 3, _mm256_setzero_ps, _mm256_loadu_ps,
            _mm256_broadcast_ss, _mm256_fmadd_ps, _mm256_storeu_ps)
UNWRAP_SIMD(unwrap_avx512, "avx512f", __m512, 16, 6, _mm512_setzero_ps, _mm512_loadu_ps,
            broadcast512, _mm512_fmadd_ps, _mm512_storeu_ps)

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
  /* each side's tap weights, once for all images: wt [2][kb][C][3][UNWRAP_K] (a channel
   * block's rows for one (c, r) side by side; zeros past K) */
  const int64_t kb = (K + UNWRAP_K - 1) / UNWRAP_K, block = C * 3 * UNWRAP_K;
  float* wt = malloc((size_t)(2 * kb * block) * sizeof(float));
  if (!wt) return BRGEMM_ENOMEM;
  int err = BRGEMM_OK;
#pragma omp parallel num_threads(brgemm_cpu_plan_threads(threads))
  {
#pragma omp for schedule(static)
    for (int64_t t = 0; t < 2 * kb; ++t) { /* (side, channel block) */
      const int s = t / kb ? 2 : 0;
      float* out = wt + t * block;
      for (int64_t kk = 0; kk < UNWRAP_K; ++kk) {
        const int64_t k = t % kb * UNWRAP_K + kk;
        for (int64_t c = 0; c < C; ++c)
          for (int64_t r = 0; r < 3; ++r)
            out[(c * 3 + r) * UNWRAP_K + kk] = k < K ? w[((k * C + c) * 3 + r) * 3 + s] : 0.0f;
      }
    }
    /* the column of x ([C][H]), UNWRAP_P zeros past its end: rows past np are summed, not stored */
    float* col = malloc((size_t)(C * H + UNWRAP_P) * sizeof(float));
    if (!col) {
#pragma omp atomic write
      err = BRGEMM_ENOMEM;
    }
#pragma omp for schedule(static)
    for (int64_t t = 0; t < N * 2; ++t) { /* an image's side: its column gathered once */
      if (!col) continue;
      const int64_t n = t / 2, side = t % 2;
      /* left: p = 2 .. H-2 read column W-1, rows p + r - 2; right: p = 1 .. H-3, column 0, rows p + r */
      const int64_t p0 = side ? 1 : 2, np = H - 3, dp = side ? 0 : -2;
      const int64_t from = side ? 0 : W - 1, q = side ? W - 1 : 0;
      if (np < 1) continue;
      const float* xn = x + n * C * H * W;
      for (int64_t c = 0; c < C; ++c)
        for (int64_t h = 0; h < H; ++h) col[c * H + h] = xn[(c * H + h) * W + from];
      for (int i = 0; i < UNWRAP_P; ++i) col[C * H + i] = 0.0f;
      for (int64_t b = 0; b < kb; ++b) {
        const int64_t k0 = b * UNWRAP_K, kn = K - k0 < UNWRAP_K ? K - k0 : UNWRAP_K;
        const float* wk = wt + (side * kb + b) * block;
        float* yk = y + (n * K + k0) * H * W;
        if (isa == 3)
          unwrap_avx512(col, C, H, W, wk, kn, p0, np, dp, q, yk);
        else if (isa == 2)
          unwrap_avx2(col, C, H, W, wk, kn, p0, np, dp, q, yk);
        else
          unwrap_plain(col, C, H, W, wk, kn, p0, np, dp, q, yk);
      }
    }
    free(col);
  }
  free(wt);
  return err;
}
