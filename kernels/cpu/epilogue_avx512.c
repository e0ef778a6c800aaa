/* Fused epilogues of the MLP's layers (forward: bias, relu, bf16 copy;
 * backward: act' from a bf16 y, transposed and plain bf16 copies; see
 * forward_chain and backward_chain in epilogue.c) with AVX-512 and the
 * AVX512-BF16 conversion: vcvtneps2bf16
 * rounds 16 values to nearest even in one instruction where the portable
 * rounding takes a dozen. It treats f32 denormals as zero (as oneDNN's bf16
 * kernels do); every other value, NaN included, converts as
 * brgemm_f32_to_bf16 does. Run only where CPUID reports AVX512-BF16. */
#include <immintrin.h>
#include <stdint.h>

#include "brgemm_cpu.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16")

void forward_ops_avx512(float* c, int64_t m, int64_t n, int64_t ldc, const float* bias, int relu,
                        uint16_t* dst, int64_t ld);
void forward_ops_avx512(float* c, int64_t m, int64_t n, int64_t ldc, const float* bias, int relu,
                        uint16_t* dst, int64_t ld) {
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t i = 0; i < m; ++i) {
    float* row = c + i * ldc;
    uint16_t* out = dst + i * ld;
    for (int64_t j = 0; j < n; j += 16) {
      const __mmask16 k = n - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j)) - 1);
      __m512 v = _mm512_maskz_loadu_ps(k, row + j);
      if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, bias + j));
      /* max returns its second operand for a NaN and for two zeros: NaN and -0
       * stay, as with C < 0 ? 0 : C */
      if (relu) v = _mm512_max_ps(zero, v);
      _mm512_mask_storeu_ps(row + j, k, v);
      _mm256_mask_storeu_epi16(out + j, k, (__m256i)_mm512_cvtneps_pbh(v));
    }
  }
}

/* a[0..16): 16 rows of 16 16-bit values -> out[j] = column j. Unpacks pair
 * rows (16-bit, then 32-bit, then 64-bit units), each within 128-bit lanes,
 * then the lanes are joined: after the third step w[8h + j] holds column j
 * (low lane) and column j + 8 (high lane) of rows 8h to 8h + 7. */
static inline void transpose16(const __m256i a[16], __m256i out[16]) {
  __m256i s[16], u[16], w[16];
  for (int k = 0; k < 8; ++k) {  /* rows 2k, 2k+1: columns 0-3 | 8-11, then 4-7 | 12-15 */
    s[2 * k] = _mm256_unpacklo_epi16(a[2 * k], a[2 * k + 1]);
    s[2 * k + 1] = _mm256_unpackhi_epi16(a[2 * k], a[2 * k + 1]);
  }
  for (int q = 0; q < 4; ++q) {  /* rows 4q..4q+3: column pairs (0,1) (2,3) (4,5) (6,7) | +8 */
    u[4 * q] = _mm256_unpacklo_epi32(s[4 * q], s[4 * q + 2]);
    u[4 * q + 1] = _mm256_unpackhi_epi32(s[4 * q], s[4 * q + 2]);
    u[4 * q + 2] = _mm256_unpacklo_epi32(s[4 * q + 1], s[4 * q + 3]);
    u[4 * q + 3] = _mm256_unpackhi_epi32(s[4 * q + 1], s[4 * q + 3]);
  }
  for (int h = 0; h < 2; ++h)
    for (int c = 0; c < 4; ++c) {
      w[8 * h + 2 * c] = _mm256_unpacklo_epi64(u[8 * h + c], u[8 * h + 4 + c]);
      w[8 * h + 2 * c + 1] = _mm256_unpackhi_epi64(u[8 * h + c], u[8 * h + 4 + c]);
    }
  for (int j = 0; j < 8; ++j) {
    out[j] = _mm256_permute2x128_si256(w[j], w[8 + j], 0x20);
    out[j + 8] = _mm256_permute2x128_si256(w[j], w[8 + j], 0x31);
  }
}

void backward_ops_avx512(float* c, int64_t m, int64_t n, int64_t ldc, const uint16_t* y,
                         int64_t ldy, int act, uint16_t* t, int64_t ldt, uint16_t* d16,
                         int64_t ld16, float* sum);
void backward_ops_avx512(float* c, int64_t m, int64_t n, int64_t ldc, const uint16_t* y,
                         int64_t ldy, int act, uint16_t* t, int64_t ldt, uint16_t* d16,
                         int64_t ld16, float* sum) {
  const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
  for (int64_t i0 = 0; i0 < m; i0 += 16) {
    const int rows = m - i0 < 16 ? (int)(m - i0) : 16;
    for (int64_t j0 = 0; j0 < n; j0 += 16) {
      const int cols = n - j0 < 16 ? (int)(n - j0) : 16;
      const __mmask16 k = cols == 16 ? (__mmask16)0xffff : (__mmask16)((1u << cols) - 1);
      __m256i b[16];
      __m512 acc = zero;  /* the column sums of these rows, in row order */
      for (int r = 0; r < 16; ++r) {
        if (r >= rows) {
          b[r] = _mm256_setzero_si256();
          continue;
        }
        float* row = c + (i0 + r) * ldc + j0;
        __m512 v = _mm512_maskz_loadu_ps(k, row);
        if (act) {  /* the bf16 y widened exactly: its bits in the high half */
          const __m256i y16 = _mm256_maskz_loadu_epi16(k, y + (i0 + r) * ldy + j0);
          const __m512 yv = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(y16), 16));
          if (act == BRGEMM_OP_RELU_BWD_BF16)  /* y > 0 ? C : 0, NaN y included */
            v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(yv, zero, _CMP_GT_OQ), v);
          else if (act == BRGEMM_OP_SIGMOID_BWD_BF16)
            v = _mm512_mul_ps(v, _mm512_mul_ps(yv, _mm512_sub_ps(one, yv)));
          else
            v = _mm512_mul_ps(v, _mm512_sub_ps(one, _mm512_mul_ps(yv, yv)));
          _mm512_mask_storeu_ps(row, k, v);
        }
        acc = _mm512_add_ps(acc, v);
        b[r] = (__m256i)_mm512_cvtneps_pbh(v);
        if (d16) _mm256_mask_storeu_epi16(d16 + (i0 + r) * ld16 + j0, k, b[r]);
      }
      if (sum) _mm512_mask_storeu_ps(sum + j0, k, _mm512_add_ps(_mm512_maskz_loadu_ps(k, sum + j0), acc));
      __m256i tr[16];
      transpose16(b, tr);
      /* t's row j0 + j holds C's column j0 + j: rows i0.. of it */
      const __mmask16 kr = rows == 16 ? (__mmask16)0xffff : (__mmask16)((1u << rows) - 1);
      for (int j = 0; j < cols; ++j) _mm256_mask_storeu_epi16(t + (j0 + j) * ldt + i0, kr, tr[j]);
    }
  }
}

#pragma GCC pop_options
