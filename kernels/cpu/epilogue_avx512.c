/* A forward layer's epilogue (bias, relu, bf16 copy; see forward_ops in
 * epilogue.c) with AVX-512 and the AVX512-BF16 conversion: vcvtneps2bf16
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

#pragma GCC pop_options
