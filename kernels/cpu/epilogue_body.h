/* The body of the epilogue ops, compiled twice (epilogue.c for any x86-64,
 * epilogue_avx2.c with AVX2 and FMA) so its element loops vectorise on the
 * machine at hand; EPILOGUE_FN names the function. Not a standalone header. */
#include <stdint.h>
#include <string.h>

#include "brgemm_cpu.h"
#include "brgemm_cpu_internal.h"

/* exp without a libm call, so the element loops below vectorise: 2^n e^r with
 * n = round(x / ln 2), |r| <= ln(2)/2 and a degree-6 Taylor polynomial for
 * e^r (error < 2e-7 relative there, about 2 ulp of f32 with the rounding). */
static inline float exp_approx(float x) {
  x = x < -87.0f ? -87.0f : x > 88.0f ? 88.0f : x;
  const float n = (x * 1.44269504f + 12582912.0f) - 12582912.0f;  /* round via 1.5 * 2^23 */
  const float r = (x - n * 0.693145752f) - n * 1.42860677e-6f;  /* ln 2 in two parts */
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int32_t bits = ((int32_t)n + 127) << 23;
  float scale;
  memcpy(&scale, &bits, 4);
  return p * scale;
}

static inline float sigmoid(float x) { return 1.0f / (1.0f + exp_approx(-x)); }
static inline float tanh_approx(float x) { return 2.0f * sigmoid(2.0f * x) - 1.0f; }

static int EPILOGUE_FN(const brgemm_plan_op* op, float* c, int64_t m, int64_t n, int64_t ldc,
                        void* const* tensors) {
  switch (op->code) {
    case BRGEMM_OP_BIAS: {
      const float* bias = (const float*)tensors[op->tensor[0]] + op->offset[0];
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) c[i * ldc + j] += bias[j];
      return BRGEMM_OK;
    }
    case BRGEMM_OP_RELU:
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = c[i * ldc + j] > 0.0f ? c[i * ldc + j] : 0.0f;
      return BRGEMM_OK;
    case BRGEMM_OP_SIGMOID:
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = sigmoid(c[i * ldc + j]);
      return BRGEMM_OK;
    case BRGEMM_OP_TANH:
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = tanh_approx(c[i * ldc + j]);
      return BRGEMM_OK;
    case BRGEMM_OP_STORE_BF16: {
      uint16_t* dst = (uint16_t*)tensors[op->tensor[0]] + op->offset[0];
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) dst[i * op->ld + j] = brgemm_f32_to_bf16(c[i * ldc + j]);
      return BRGEMM_OK;
    }
    case BRGEMM_OP_LSTM_CELL: {
      /* the operands are distinct blocks (the recorder checks offsets): restrict
       * lets the element loop vectorise */
      float* restrict gi = (float*)tensors[op->tensor[0]] + op->offset[0];
      float* restrict gf = gi + op->stride;
      float* restrict gg = gi + 2 * op->stride;
      float* restrict go = gi + 3 * op->stride;
      const float* restrict cp = (const float*)tensors[op->tensor[1]] + op->offset[1];
      float* restrict cn = (float*)tensors[op->tensor[2]] + op->offset[2];
      float* restrict hn = (float*)tensors[op->tensor[3]] + op->offset[3];
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          const int64_t e = i * ldc + j, s = i * op->ld + j;  /* gates are C blocks */
          const float ig = sigmoid(gi[e]), fg = sigmoid(gf[e]);
          const float g = tanh_approx(gg[e]), og = sigmoid(go[e]);
          const float cc = fg * cp[s] + ig * g;
          gi[e] = ig, gf[e] = fg, gg[e] = g, go[e] = og;
          cn[s] = cc;
          hn[s] = og * tanh_approx(cc);
        }
      if (op->tensor[4] >= 0) {
        uint16_t* h16 = (uint16_t*)tensors[op->tensor[4]] + op->offset[4];
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) h16[i * op->ld + j] = brgemm_f32_to_bf16(hn[i * op->ld + j]);
      }
      return BRGEMM_OK;
    }
    case BRGEMM_OP_LSTM_CELL_BWD: {
      const float* restrict dy = (const float*)tensors[op->tensor[0]] + op->offset[0];
      const float* restrict gi = (const float*)tensors[op->tensor[1]] + op->offset[1];
      const float* restrict gf = gi + op->stride;
      const float* restrict gg = gi + 2 * op->stride;
      const float* restrict go = gi + 3 * op->stride;
      const float* restrict ct = (const float*)tensors[op->tensor[2]] + op->offset[2];
      const float* restrict cp = (const float*)tensors[op->tensor[3]] + op->offset[3];
      float* restrict dc = (float*)tensors[op->tensor[4]] + op->offset[4];
      float* restrict di = (float*)tensors[op->tensor[5]] + op->offset[5];
      float* restrict df = di + op->stride;
      float* restrict dg = di + 2 * op->stride;
      float* restrict dout = di + 3 * op->stride;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          const int64_t s = i * op->ld + j;
          const float dh = c[i * ldc + j] + dy[s];
          const float tc = tanh_approx(ct[s]);
          const float ig = gi[s], fg = gf[s], g = gg[s], og = go[s];
          const float dcc = dc[s] + dh * og * (1.0f - tc * tc);
          dout[s] = dh * tc * og * (1.0f - og);
          di[s] = dcc * g * ig * (1.0f - ig);
          dg[s] = dcc * ig * (1.0f - g * g);
          df[s] = dcc * cp[s] * fg * (1.0f - fg);
          dc[s] = dcc * fg;
        }
      if (op->tensor[6] >= 0) { /* bf16 copies: the next step's and the weight GEMMs' operands */
        uint16_t* d16 = (uint16_t*)tensors[op->tensor[6]] + op->offset[6];
        for (int q = 0; q < 4; ++q)
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
              const int64_t s = q * op->stride + i * op->ld + j;
              d16[s] = brgemm_f32_to_bf16(di[s]);
            }
      }
      return BRGEMM_OK;
    }
    default:
      return BRGEMM_EINVAL;
  }
}
