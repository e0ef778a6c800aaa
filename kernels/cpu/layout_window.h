/* Windows of a matrix copied, transposed or gathered, with f32 -> bf16
 * rounding fused in: what every layout copy (layout.c, layout_image.c) is
 * built of. Internal to the CPU backend: these trust their arguments. */
#ifndef BRGEMM_LAYOUT_WINDOW_H
#define BRGEMM_LAYOUT_WINDOW_H
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "brgemm_cpu_internal.h"

/* dst[a * ldd + b] = src[b * lds + a] for a < na, b < nb: a window transposed.
 * SSE2 (every x86-64 has it) on 4 x 4 (f32) and 8 x 8 (bf16) sub-blocks, scalar
 * edges: the compiler's own code for the plain loops ran at ~2 cycles per
 * element, slower than memory. */
static inline void brgemm_transpose4_sse(const uint32_t* src, int64_t lds, uint32_t* dst,
                                         int64_t ldd, int64_t na, int64_t nb) {
  for (int64_t b0 = 0; b0 + 4 <= nb; b0 += 4)
    for (int64_t a0 = 0; a0 + 4 <= na; a0 += 4) {
      const float* in = (const float*)(src + b0 * lds + a0);
      __m128 r0 = _mm_loadu_ps(in), r1 = _mm_loadu_ps(in + lds), r2 = _mm_loadu_ps(in + 2 * lds),
             r3 = _mm_loadu_ps(in + 3 * lds);
      _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
      float* out = (float*)(dst + a0 * ldd + b0);
      _mm_storeu_ps(out, r0);
      _mm_storeu_ps(out + ldd, r1);
      _mm_storeu_ps(out + 2 * ldd, r2);
      _mm_storeu_ps(out + 3 * ldd, r3);
    }
  for (int64_t b = 0; b < nb; ++b) /* what the sub-blocks left: right and bottom edges */
    for (int64_t a = (b < nb - nb % 4) ? na - na % 4 : 0; a < na; ++a)
      dst[a * ldd + b] = src[b * lds + a];
}

/* An 8 x 8 f32 block transposed in registers with AVX2: row k of the result
 * (column k of the eight rows at in, lds apart) into out[k]. */
__attribute__((target("avx2"))) static inline void brgemm_transpose8x8_avx2(const float* in,
                                                                            int64_t lds,
                                                                            __m256 out[8]) {
  __m256 r[8], t[8], u[8];
  for (int k = 0; k < 8; ++k) r[k] = _mm256_loadu_ps(in + k * lds);
  for (int k = 0; k < 8; k += 2) { /* pairs of rows interleaved */
    t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
    t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
  }
  for (int k = 0; k < 8; k += 4) { /* then pairs of pairs: columns of four rows */
    u[k] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int k = 0; k < 4; ++k) { /* rows 0-3 of the upper four, 4-7 from the halves */
    out[k] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x20);
    out[k + 4] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x31);
  }
}

/* The same on 8 x 8 sub-blocks with AVX2 (compiled for it here, run only where
 * CPUID has it; na, nb >= 8): eight 32-byte rows in and out per 64 elements
 * instead of sixteen 16-byte ones. A ragged edge is one more block that
 * overlaps the one before it (its elements written twice, with the same
 * values): short rows (9 taps, 14 pixels) left most of their elements to
 * scalar edges before. */
__attribute__((target("avx2"))) static inline void brgemm_transpose8_avx2(
    const uint32_t* src, int64_t lds, uint32_t* dst, int64_t ldd, int64_t a, int64_t b) {
  __m256 o[8];
  brgemm_transpose8x8_avx2((const float*)(src + b * lds + a), lds, o);
  float* out = (float*)(dst + a * ldd + b);
  for (int k = 0; k < 8; ++k) _mm256_storeu_ps(out + k * ldd, o[k]);
}

__attribute__((target("avx2"))) static inline void brgemm_transpose4_avx2(
    const uint32_t* src, int64_t lds, uint32_t* dst, int64_t ldd, int64_t na, int64_t nb) {
  const int64_t na8 = na - na % 8, nb8 = nb - nb % 8;
  for (int64_t b0 = 0; b0 < nb8; b0 += 8) {
    for (int64_t a0 = 0; a0 < na8; a0 += 8) brgemm_transpose8_avx2(src, lds, dst, ldd, a0, b0);
    if (na8 < na) brgemm_transpose8_avx2(src, lds, dst, ldd, na - 8, b0);
  }
  if (nb8 < nb) {
    for (int64_t a0 = 0; a0 < na8; a0 += 8) brgemm_transpose8_avx2(src, lds, dst, ldd, a0, nb - 8);
    if (na8 < na) brgemm_transpose8_avx2(src, lds, dst, ldd, na - 8, nb - 8);
  }
}

/* A 16 x 16 f32 block transposed in registers with AVX-512 (compiled for it
 * here, run only where CPUID has it): row k of the result (column k of the
 * sixteen rows r) into out[k]; a quarter fewer shuffles per element than the
 * 8 x 8 blocks. Pairs of rows interleaved by element, then by pairs, which
 * leaves in each 128-bit lane L of row 4g + j column 4L + j of rows 4g ..
 * 4g+3; two lane shuffles put each column's four lanes together. */
__attribute__((target("avx512f"))) static inline void brgemm_transpose16x16_avx512(
    __m512 r[16], __m512 out[16]) {
  __m512 t[16];
  for (int k = 0; k < 16; k += 2) {
    t[k] = _mm512_unpacklo_ps(r[k], r[k + 1]);
    t[k + 1] = _mm512_unpackhi_ps(r[k], r[k + 1]);
  }
  for (int k = 0; k < 16; k += 4) {
    r[k] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[k]), _mm512_castps_pd(t[k + 2])));
    r[k + 1] =
        _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[k]), _mm512_castps_pd(t[k + 2])));
    r[k + 2] = _mm512_castpd_ps(
        _mm512_unpacklo_pd(_mm512_castps_pd(t[k + 1]), _mm512_castps_pd(t[k + 3])));
    r[k + 3] = _mm512_castpd_ps(
        _mm512_unpackhi_pd(_mm512_castps_pd(t[k + 1]), _mm512_castps_pd(t[k + 3])));
  }
  for (int j = 0; j < 4; ++j) {
    const __m512 u0 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x44);
    const __m512 u1 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xEE);
    const __m512 u2 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x44);
    const __m512 u3 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xEE);
    out[j] = _mm512_shuffle_f32x4(u0, u2, 0x88);
    out[4 + j] = _mm512_shuffle_f32x4(u0, u2, 0xDD);
    out[8 + j] = _mm512_shuffle_f32x4(u1, u3, 0x88);
    out[12 + j] = _mm512_shuffle_f32x4(u1, u3, 0xDD);
  }
}

/* The 16 x 16 block at (a, b) of a window transposed: sixteen 64-byte rows
 * in, sixteen whole cache lines out (when dst's rows start on lines). */
__attribute__((target("avx512f"))) static inline void brgemm_transpose16_avx512(
    const uint32_t* src, int64_t lds, uint32_t* dst, int64_t ldd, int64_t a, int64_t b) {
  const float* in = (const float*)(src + b * lds + a);
  __m512 r[16], o[16];
  for (int k = 0; k < 16; ++k) r[k] = _mm512_loadu_ps(in + k * lds);
  brgemm_transpose16x16_avx512(r, o);
  float* out = (float*)(dst + a * ldd + b);
  for (int k = 0; k < 16; ++k) _mm512_storeu_ps(out + k * ldd, o[k]);
}

/* The window in 16 x 16 blocks (na, nb >= 16), ragged edges as overlapping
 * blocks, as brgemm_transpose4_avx2 does with its 8 x 8 ones. */
__attribute__((target("avx512f"))) static inline void brgemm_transpose4_avx512(
    const uint32_t* src, int64_t lds, uint32_t* dst, int64_t ldd, int64_t na, int64_t nb) {
  const int64_t na16 = na - na % 16, nb16 = nb - nb % 16;
  for (int64_t b0 = 0; b0 < nb16; b0 += 16) {
    for (int64_t a0 = 0; a0 < na16; a0 += 16) brgemm_transpose16_avx512(src, lds, dst, ldd, a0, b0);
    if (na16 < na) brgemm_transpose16_avx512(src, lds, dst, ldd, na - 16, b0);
  }
  if (nb16 < nb) {
    for (int64_t a0 = 0; a0 < na16; a0 += 16)
      brgemm_transpose16_avx512(src, lds, dst, ldd, a0, nb - 16);
    if (na16 < na) brgemm_transpose16_avx512(src, lds, dst, ldd, na - 16, nb - 16);
  }
}

__attribute__((target("avx2"))) static inline void brgemm_taps_transposed_avx2(
    const float* in, int64_t lds, float* out, int64_t na8, int64_t nb8, int64_t RS, int64_t tile,
    int64_t bk) {
  /* sixteen of w's rows at a time (eight at the end), each read front to
   * back, so that each result row's 64 bytes are stored together rather than
   * in halves one pass apart (by when 147 KiB of tiles have pushed the line
   * out of L1); the tiles written (RS of them) stay in L2. The rows lie C R S
   * apart, and the hardware prefetcher left each pass waiting on memory: the
   * next pass's rows are prefetched a pass ahead (res5a_branch2b's w, one
   * thread, from memory: 0.95 -> 0.79 ms) */
  const int64_t nb16 = nb8 - nb8 % 16;
  for (int64_t b0 = 0; b0 < nb8; b0 += b0 < nb16 ? 16 : 8) {
    const int two = b0 < nb16; /* sixteen rows: each result row's 64 bytes stored together */
    int64_t rs = 0, c = 0; /* of column a: a = c * RS + rs, counted (no divisions) */
    for (int64_t a0 = 0; a0 < na8; a0 += 8) {
      __m256 o[8], u[8];
      if (a0 % 16 == 0) /* the next pass's rows' lines, a pass ahead */
        for (int k = 8 << two; k < 16 << two && b0 + k < nb8; ++k)
          _mm_prefetch((const char*)(in + (b0 + k) * lds + a0), _MM_HINT_T0);
      brgemm_transpose8x8_avx2(in + b0 * lds + a0, lds, o);
      /* (a pass of eight transposes its rows twice, storing them once) */
      brgemm_transpose8x8_avx2(in + (b0 + 8 * two) * lds + a0, lds, u);
      for (int k = 0; k < 8; ++k) {
        float* row = out + rs * tile + c * bk + b0;
        _mm256_storeu_ps(row, o[k]);
        if (two) _mm256_storeu_ps(row + 8, u[k]);
        if (++rs == RS) rs = 0, ++c;
      }
    }
  }
}

static inline int brgemm_layout_avx2(void) {
  static int have = -1; /* a benign race: every thread computes the same answer */
  if (have < 0) have = __builtin_cpu_supports("avx2") ? 1 : 0;
  return have;
}

/* AVX-512 copies where the CPU has them, unless LIBXSMM_TARGET names a target
 * without AVX-512 (brgemm.info.NARROW_TARGETS): then the copies take the AVX2
 * and plain paths too, so that a run forced to AVX2 kernels on an AVX-512
 * machine tests what an AVX2 machine runs */
static inline int brgemm_layout_avx512(void) {
  static int have = -1; /* a benign race: every thread computes the same answer */
  if (have < 0) {
    const char* target = getenv("LIBXSMM_TARGET");
    const char* narrow[] = {"generic", "wsm", "snb", "hsw"};
    have = __builtin_cpu_supports("avx512f") ? 1 : 0;
    for (int i = 0; target && i < 4; ++i)
      if (!strcmp(target, narrow[i])) have = 0;
  }
  return have;
}

/* brgemm_taps_transposed_avx2 on 16 x 16 blocks with AVX-512 (na16, nb16
 * multiples of 16): each result row's 64 bytes in one store. Where a copy
 * runs from the cache (copy_taps in a conv plan) it took a quarter less
 * time than the 8 x 8 blocks (benchmarks/RESULTS.md, issue 17, thirty-first
 * session); w's whole blocked copy ran level */
__attribute__((target("avx512f"))) static inline void brgemm_taps_transposed_avx512(
    const float* in, int64_t lds, float* out, int64_t na16, int64_t nb16, int64_t RS, int64_t tile,
    int64_t bk) {
  for (int64_t b0 = 0; b0 < nb16; b0 += 16) {
    int64_t rs = 0, c = 0; /* of column a: a = c * RS + rs, counted (no divisions) */
    for (int64_t a0 = 0; a0 < na16; a0 += 16) {
      __m512 r[16], o[16];
      for (int k = 0; k < 16; ++k) r[k] = _mm512_loadu_ps(in + (b0 + k) * lds + a0);
      brgemm_transpose16x16_avx512(r, o);
      for (int k = 0; k < 16; ++k) {
        _mm512_storeu_ps(out + rs * tile + c * bk + b0, o[k]);
        if (++rs == RS) rs = 0, ++c;
      }
    }
  }
}

/* out[(a % RS) * tile + (a / RS) * bk + b] = in[b * lds + a] for a < na (= nc *
 * RS), b < nb: a window of w's rows (k) transposed, each result row (c, rs)
 * placed in its tap's tile (tile floats apart), rows bk apart: one pass of
 * AVX-512 16 x 16 blocks or AVX2 8 x 8 ones, where de-interleaving the taps
 * first and transposing each tap after took two; without AVX2, element by
 * element. */
static inline void brgemm_taps_transposed(const float* in, int64_t lds, float* out, int64_t na,
                                          int64_t nb, int64_t RS, int64_t tile, int64_t bk) {
  int64_t da, db; /* the window's part the SIMD blocks take */
  if (na >= 16 && nb >= 16 && brgemm_layout_avx512()) {
    da = na - na % 16, db = nb - nb % 16;
    brgemm_taps_transposed_avx512(in, lds, out, da, db, RS, tile, bk);
  } else if (brgemm_layout_avx2()) {
    da = na - na % 8, db = nb - nb % 8;
    if (da && db) brgemm_taps_transposed_avx2(in, lds, out, da, db, RS, tile, bk);
  } else {
    da = db = 0; /* all of it the edges' way */
  }
  for (int64_t a = 0; a < na; ++a) { /* the edges: scalar */
    float* row = out + (a % RS) * tile + (a / RS) * bk;
    for (int64_t b = a < da ? db : 0; b < nb; ++b) row[b] = in[b * lds + a];
  }
}

/* f32 windows in 16 x 16 blocks where the CPU has AVX-512 (the lent Xeon's
 * NCHW image copies ran faster so), else 8 x 8 with AVX2; not 16 x 16 where
 * either side's rows lie a multiple of 4 KiB apart (fc's W, C = 1024 or
 * 4096): sixteen such rows share one set of the L1 cache, and on the EPYC
 * those copies ran slower than with eight (benchmarks/RESULTS.md, issue 17,
 * seventeenth session) */
static inline void brgemm_transpose4(const uint32_t* src, int64_t lds, uint32_t* dst, int64_t ldd,
                                     int64_t na, int64_t nb) {
  if (na >= 16 && nb >= 16 && lds % 1024 && ldd % 1024 && brgemm_layout_avx512())
    brgemm_transpose4_avx512(src, lds, dst, ldd, na, nb);
  else if (na >= 8 && nb >= 8 && brgemm_layout_avx2())
    brgemm_transpose4_avx2(src, lds, dst, ldd, na, nb);
  else
    brgemm_transpose4_sse(src, lds, dst, ldd, na, nb);
}

/* An 8 x 8 block of 16-bit elements transposed in SSE registers: row j of the
 * result (column j of the eight rows at in, lds apart) into out[j]. */
static inline void brgemm_transpose8x8_u16(const uint16_t* in, int64_t lds, __m128i out[8]) {
  __m128i r[8], u[8], v[8];
  for (int k = 0; k < 8; ++k) r[k] = _mm_loadu_si128((const __m128i*)(in + k * lds));
  for (int k = 0; k < 8; k += 2) {
    u[k] = _mm_unpacklo_epi16(r[k], r[k + 1]);     /* columns 0-3 of rows k, k+1 */
    u[k + 1] = _mm_unpackhi_epi16(r[k], r[k + 1]); /* columns 4-7 */
  }
  for (int k = 0; k < 2; ++k) /* k = 0: columns 0-3, k = 1: columns 4-7 */
    for (int h = 0; h < 2; ++h) {
      v[4 * k + 2 * h] = _mm_unpacklo_epi32(u[k + 4 * h], u[k + 2 + 4 * h]);
      v[4 * k + 2 * h + 1] = _mm_unpackhi_epi32(u[k + 4 * h], u[k + 2 + 4 * h]);
    }
  /* v[4k + 2h + l] holds columns 4k + 2l, +1 of rows 4h .. 4h+3 */
  for (int k = 0; k < 2; ++k)
    for (int l = 0; l < 2; ++l) {
      const __m128i lo = v[4 * k + l], hi = v[4 * k + 2 + l];
      out[4 * k + 2 * l] = _mm_unpacklo_epi64(lo, hi);
      out[4 * k + 2 * l + 1] = _mm_unpackhi_epi64(lo, hi);
    }
}

static inline void brgemm_transpose2(const uint16_t* src, int64_t lds, uint16_t* dst, int64_t ldd,
                                     int64_t na, int64_t nb) {
  for (int64_t b0 = 0; b0 + 8 <= nb; b0 += 8)
    for (int64_t a0 = 0; a0 + 8 <= na; a0 += 8) {
      __m128i o[8];
      brgemm_transpose8x8_u16(src + b0 * lds + a0, lds, o);
      for (int j = 0; j < 8; ++j) _mm_storeu_si128((__m128i*)(dst + (a0 + j) * ldd + b0), o[j]);
    }
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t a = (b < nb - nb % 8) ? na - na % 8 : 0; a < na; ++a)
      dst[a * ldd + b] = src[b * lds + a];
}

/* brgemm_pair_rows' first n16 (a multiple of 16) pairs with AVX2 */
__attribute__((target("avx2"))) static inline void brgemm_pair_rows_avx2(
    const uint16_t* r0, const uint16_t* r1, uint16_t* out, int64_t n16) {
  for (int64_t j = 0; j < n16; j += 16) {
    const __m256i a = _mm256_loadu_si256((const __m256i*)(r0 + j));
    const __m256i b = _mm256_loadu_si256((const __m256i*)(r1 + j));
    /* within each 128-bit lane: pairs of elements 0-3 (lo) and 4-7 (hi) */
    const __m256i lo = _mm256_unpacklo_epi16(a, b), hi = _mm256_unpackhi_epi16(a, b);
    _mm256_storeu_si256((__m256i*)(out + 2 * j), _mm256_permute2x128_si256(lo, hi, 0x20));
    _mm256_storeu_si256((__m256i*)(out + 2 * j + 16), _mm256_permute2x128_si256(lo, hi, 0x31));
  }
}

/* Rows r0 and r1 of n bf16 each as one row of VNNI pairs: out[2j] = r0[j],
 * out[2j + 1] = r1[j] (what an AMX or AVX512-BF16 kernel reads as B) */
static inline void brgemm_pair_rows(const uint16_t* r0, const uint16_t* r1, uint16_t* out,
                                    int64_t n) {
  const int64_t n16 = brgemm_layout_avx2() ? n - n % 16 : 0;
  if (n16) brgemm_pair_rows_avx2(r0, r1, out, n16);
  for (int64_t j = n16; j < n; ++j) {
    out[2 * j] = r0[j];
    out[2 * j + 1] = r1[j];
  }
}

/* brgemm_f32_to_bf16 on 16 values: nearest even, NaN stays NaN (each bf16 in
 * the low half of its 32-bit lane) */
__attribute__((target("avx512f"))) static inline __m512i brgemm_round16_avx512(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(
      _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  const __m512i high = _mm512_srli_epi32(u, 16);
  const __m512i r = _mm512_srli_epi32(
      _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                           _mm512_and_si512(high, _mm512_set1_epi32(1)))), 16);
  return _mm512_mask_or_epi32(r, nan, high, _mm512_set1_epi32(0x40));
}

/* brgemm_f32_to_bf16 on 16 values at a time */
__attribute__((target("avx512f"))) static inline void brgemm_round_row_avx512(const float* src,
                                                                              uint16_t* dst,
                                                                              int64_t n) {
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = n - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j)) - 1u);
    _mm512_mask_cvtepi32_storeu_epi16(dst + j, m,
                                      brgemm_round16_avx512(_mm512_maskz_loadu_ps(m, src + j)));
  }
}

/* n f32 values rounded to bf16 */
static inline void brgemm_round_row(const float* src, uint16_t* dst, int64_t n) {
  if (n >= 16 && brgemm_layout_avx512()) {
    brgemm_round_row_avx512(src, dst, n);
    return;
  }
  for (int64_t j = 0; j < n; ++j) dst[j] = brgemm_f32_to_bf16(src[j]);
}

/* dst[a * ldd + b] = src[a * sa + b * sb] for a < na, b < nb, element sizes si
 * and di (4 -> 2 rounds f32 to bf16; otherwise si == di). Unit sb copies rows,
 * unit sa transposes with SIMD sub-blocks, anything else gathers. */
static inline void brgemm_window(const char* src, int64_t sa, int64_t sb, int si, char* dst,
                                 int64_t ldd, int di, int64_t na, int64_t nb) {
  if (na <= 0 || nb <= 0) return;
  if (si == di) {
    if (sb == 1) {
      for (int64_t a = 0; a < na; ++a)
        memcpy(dst + a * ldd * di, src + a * sa * si, (size_t)(nb * si));
    } else if (sa == 1) {
      if (si == 4)
        brgemm_transpose4((const uint32_t*)src, sb, (uint32_t*)dst, ldd, na, nb);
      else
        brgemm_transpose2((const uint16_t*)src, sb, (uint16_t*)dst, ldd, na, nb);
    } else if (si == 4) {
      for (int64_t a = 0; a < na; ++a)
        for (int64_t b = 0; b < nb; ++b)
          ((uint32_t*)dst)[a * ldd + b] = ((const uint32_t*)src)[a * sa + b * sb];
    } else {
      for (int64_t a = 0; a < na; ++a)
        for (int64_t b = 0; b < nb; ++b)
          ((uint16_t*)dst)[a * ldd + b] = ((const uint16_t*)src)[a * sa + b * sb];
    }
    return;
  }
  /* f32 -> bf16 */
  const float* s = (const float*)src;
  uint16_t* d = (uint16_t*)dst;
  if (sb == 1) {
    for (int64_t a = 0; a < na; ++a) brgemm_round_row(s + a * sa, d + a * ldd, nb);
  } else if (sa == 1) { /* transposed through a small f32 tile, rounded row by row */
    float tmp[32 * 32];
    for (int64_t a0 = 0; a0 < na; a0 += 32)
      for (int64_t b0 = 0; b0 < nb; b0 += 32) {
        const int64_t ma = na - a0 < 32 ? na - a0 : 32, mb = nb - b0 < 32 ? nb - b0 : 32;
        brgemm_transpose4((const uint32_t*)(s + a0 + b0 * sb), sb, (uint32_t*)tmp, 32, ma, mb);
        for (int64_t a = 0; a < ma; ++a) brgemm_round_row(tmp + a * 32, d + (a0 + a) * ldd + b0, mb);
      }
  } else {
    for (int64_t a = 0; a < na; ++a)
      for (int64_t b = 0; b < nb; ++b) d[a * ldd + b] = brgemm_f32_to_bf16(s[a * sa + b * sb]);
  }
}

/* element sizes a copy takes: the same type, or f32 in and bf16 out */
static inline int brgemm_sizes_ok(int si, int di) {
  return (si == di && (si == 2 || si == 4)) || (si == 4 && di == 2);
}

static inline int64_t brgemm_min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* n elements of size `size` zeroed */
static inline void brgemm_zero(char* dst, int64_t n, int size) {
  if (n > 0) memset(dst, 0, (size_t)(n * size));
}
#endif
