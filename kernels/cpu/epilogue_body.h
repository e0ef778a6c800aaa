/* The body of the epilogue ops, compiled twice (epilogue.c for any x86-64,
 * epilogue_avx2.c with AVX2 and FMA) so its element loops vectorise on the
 * machine at hand; EPILOGUE_FN names the function. Not a standalone header. */
#include <stdint.h>
#include <string.h>
#include <xmmintrin.h>

#include "brgemm_cpu.h"
#include "brgemm_cpu_internal.h"
#include "layout_window.h"

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

/* A forward layer's epilogue in one pass: C = act(C + bias) (bias may be NULL,
 * act BRGEMM_OP_RELU/SIGMOID/TANH or 0 for none), and its bf16 copy to dst (row
 * stride ld): what the ops bias, act, store_bf16 give one after another. One
 * loop per case, branch-free inside, so each vectorises. */
#define FORWARD_ROWS(BIAS, ACT)                                 \
  for (int64_t i = 0; i < m; ++i) {                             \
    float* restrict row = c + i * ldc;                          \
    uint16_t* restrict out = dst + i * ld;                      \
    _Pragma("GCC ivdep") for (int64_t j = 0; j < n; ++j) {      \
      float v = row[j];                                         \
      BIAS;                                                     \
      v = ACT;                                                  \
      row[j] = v;                                               \
      out[j] = brgemm_f32_to_bf16(v);                           \
    }                                                           \
  }
#define FORWARD_ACTS(BIAS)                                                      \
  switch (act) {                                                                \
    case BRGEMM_OP_RELU: FORWARD_ROWS(BIAS, v < 0.0f ? 0.0f : v) break;         \
    case BRGEMM_OP_SIGMOID: FORWARD_ROWS(BIAS, sigmoid(v)) break;               \
    case BRGEMM_OP_TANH: FORWARD_ROWS(BIAS, tanh_approx(v)) break;              \
    default: FORWARD_ROWS(BIAS, v) break;                                       \
  }

static void EPILOGUE_FUSED_FN(float* c, int64_t m, int64_t n, int64_t ldc, const float* bias,
                              int act, uint16_t* dst, int64_t ld) {
  if (ldc == n && ld == n && !bias) {  /* rows end to end: one long row */
    n *= m;
    m = 1;
  }
  if (bias) {
    FORWARD_ACTS(v += bias[j])
  } else {
    FORWARD_ACTS((void)0)
  }
}
#undef FORWARD_ACTS
#undef FORWARD_ROWS

static int EPILOGUE_FN(const brgemm_plan_op* op, float* c, int64_t m, int64_t n, int64_t ldc,
                        void* const* tensors) {
  /* element-wise ops on rows laid end to end (C's and the operand's): one long
   * row, so narrow blocks (16 to 64 columns) run no per-row loop overhead */
  const int elementwise = op->code == BRGEMM_OP_RELU || op->code == BRGEMM_OP_SIGMOID ||
                          op->code == BRGEMM_OP_TANH;
  const int with_operand = op->code == BRGEMM_OP_STORE_BF16 ||
                           (op->code >= BRGEMM_OP_RELU_BWD && op->code <= BRGEMM_OP_TANH_BWD) ||
                           (op->code >= BRGEMM_OP_RELU_BWD_BF16 &&
                            op->code <= BRGEMM_OP_TANH_BWD_BF16);
  if (m > 1 && ldc == n && (elementwise || (with_operand && op->ld == n))) {
    n *= m;
    m = 1;
  }
  switch (op->code) {
    case BRGEMM_OP_BIAS: {
      const float* bias = (const float*)tensors[op->tensor[0]] + op->offset[0];
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) c[i * ldc + j] += bias[j];
      return BRGEMM_OK;
    }
    case BRGEMM_OP_COL_SUM: {
      float* restrict sum = (float*)tensors[op->tensor[0]] + op->offset[0];
      for (int64_t i = 0; i < m; ++i) {
        const float* restrict row = c + i * ldc;
        for (int64_t j = 0; j < n; ++j) sum[j] += row[j];
      }
      return BRGEMM_OK;
    }
    case BRGEMM_OP_RELU:
      for (int64_t i = 0; i < m; ++i) {  /* NaN stays NaN, as torch.relu */
        float* restrict row = c + i * ldc;
        for (int64_t j = 0; j < n; ++j) row[j] = row[j] < 0.0f ? 0.0f : row[j];
      }
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
      /* the operands are distinct blocks (the recorder checks offsets); strides
       * in locals and one row at a time let the element loop vectorise */
      const int64_t ld = op->ld, st = op->stride;
      float* g0 = (float*)tensors[op->tensor[0]] + op->offset[0];
      const float* cp0 = (const float*)tensors[op->tensor[1]] + op->offset[1];
      float* cn0 = (float*)tensors[op->tensor[2]] + op->offset[2];
      float* hn0 = (float*)tensors[op->tensor[3]] + op->offset[3];
      uint16_t* h16 = op->tensor[4] >= 0 ? (uint16_t*)tensors[op->tensor[4]] + op->offset[4] : NULL;
      for (int64_t i = 0; i < m; ++i) {
        /* gates are C blocks: row stride ldc; the states: ld */
        float* restrict gi = g0 + i * ldc;
        float* restrict gf = gi + st;
        float* restrict gg = gi + 2 * st;
        float* restrict go = gi + 3 * st;
        const float* restrict cp = cp0 + i * ld;
        float* restrict cn = cn0 + i * ld;
        float* restrict hn = hn0 + i * ld;
        /* GCC ignores block-scope restrict: ivdep says the rows do not overlap */
#pragma GCC ivdep
        for (int64_t j = 0; j < n; ++j) {
          const float ig = sigmoid(gi[j]), fg = sigmoid(gf[j]);
          const float g = tanh_approx(gg[j]), og = sigmoid(go[j]);
          const float cc = fg * cp[j] + ig * g;
          gi[j] = ig;
          gf[j] = fg;
          gg[j] = g;
          go[j] = og;
          cn[j] = cc;
          hn[j] = og * tanh_approx(cc);
        }
        if (h16) {
          uint16_t* restrict hr = h16 + i * ld;
          for (int64_t j = 0; j < n; ++j) hr[j] = brgemm_f32_to_bf16(hn[j]);
        }
      }
      return BRGEMM_OK;
    }
    case BRGEMM_OP_LSTM_CELL_BWD: {
      const int64_t ld = op->ld, st = op->stride;
      const float* dy0 = (const float*)tensors[op->tensor[0]] + op->offset[0];
      const float* g0 = (const float*)tensors[op->tensor[1]] + op->offset[1];
      const float* ct0 = (const float*)tensors[op->tensor[2]] + op->offset[2];
      const float* cp0 = (const float*)tensors[op->tensor[3]] + op->offset[3];
      float* dc0 = (float*)tensors[op->tensor[4]] + op->offset[4];
      float* d0 = (float*)tensors[op->tensor[5]] + op->offset[5];
      uint16_t* d16 = op->tensor[6] >= 0 ? (uint16_t*)tensors[op->tensor[6]] + op->offset[6] : NULL;
      for (int64_t i = 0; i < m; ++i) {
        const int64_t r = i * ld;
        const float* restrict dh_in = c + i * ldc;
        const float* restrict dy = dy0 + r;
        const float* restrict gi = g0 + r;
        const float* restrict gf = gi + st;
        const float* restrict gg = gi + 2 * st;
        const float* restrict go = gi + 3 * st;
        const float* restrict ct = ct0 + r;
        const float* restrict cp = cp0 + r;
        float* restrict dc = dc0 + r;
        float* restrict di = d0 + r;
        float* restrict df = di + st;
        float* restrict dg = di + 2 * st;
        float* restrict dout = di + 3 * st;
#pragma GCC ivdep
        for (int64_t j = 0; j < n; ++j) {
          const float dh = dh_in[j] + dy[j];
          const float tc = tanh_approx(ct[j]);
          const float ig = gi[j], fg = gf[j], g = gg[j], og = go[j];
          const float dcc = dc[j] + dh * og * (1.0f - tc * tc);
          dout[j] = dh * tc * og * (1.0f - og);
          di[j] = dcc * g * ig * (1.0f - ig);
          dg[j] = dcc * ig * (1.0f - g * g);
          df[j] = dcc * cp[j] * fg * (1.0f - fg);
          dc[j] = dcc * fg;
        }
        if (d16) /* bf16 copies: the next step's and the weight GEMMs' operands */
          for (int q = 0; q < 4; ++q) {
            const float* restrict from = di + q * st;
            uint16_t* restrict to = d16 + r + q * st;
            for (int64_t j = 0; j < n; ++j) to[j] = brgemm_f32_to_bf16(from[j]);
          }
      }
      return BRGEMM_OK;
    }
    case BRGEMM_OP_RELU_BWD:
    case BRGEMM_OP_SIGMOID_BWD:
    case BRGEMM_OP_TANH_BWD: {
      const float* y0 = (const float*)tensors[op->tensor[0]] + op->offset[0];
      for (int64_t i = 0; i < m; ++i) {
        float* restrict ci = c + i * ldc;
        const float* restrict y = y0 + i * op->ld;
        if (op->code == BRGEMM_OP_RELU_BWD) {
#pragma GCC ivdep
          for (int64_t j = 0; j < n; ++j) ci[j] = y[j] > 0.0f ? ci[j] : 0.0f;
        } else if (op->code == BRGEMM_OP_SIGMOID_BWD) {
#pragma GCC ivdep
          for (int64_t j = 0; j < n; ++j) ci[j] *= y[j] * (1.0f - y[j]);
        } else {
#pragma GCC ivdep
          for (int64_t j = 0; j < n; ++j) ci[j] *= 1.0f - y[j] * y[j];
        }
      }
      return BRGEMM_OK;
    }
    case BRGEMM_OP_STORE_T:
    case BRGEMM_OP_STORE_T_BF16: {
      const int di = op->code == BRGEMM_OP_STORE_T ? 4 : 2;
      char* dst = (char*)tensors[op->tensor[0]] + op->offset[0] * di;
      /* dst[j * ld + i] = c[i * ldc + j] (bf16: rounded): in 8 x 8 (AVX2) or
       * 4 x 4 sub-blocks, as the layout copies transpose (element by element
       * it ran at ~2 cycles each), bf16 through small f32 tiles rounded a row
       * at a time */
      brgemm_window((const char*)c, 1, ldc, 4, dst, op->ld, di, n, m);
      /* conv's NCHW stores: a task's next tile usually lands on the next m
       * columns of the same n rows, too many rows far apart for the hardware
       * prefetchers to follow; asked for now, their lines arrive during the
       * next tile's calls (a hint: no fault past the array's end; measured
       * in benchmarks/RESULTS.md, issue 17, eleventh session) */
      for (int64_t j = 0; j < n; ++j) brgemm_prefetch_span(dst + (j * op->ld + m) * di, di * m, 1);
      return BRGEMM_OK;
    }
    case BRGEMM_OP_RELU_BWD_BF16:
    case BRGEMM_OP_SIGMOID_BWD_BF16:
    case BRGEMM_OP_TANH_BWD_BF16: {
      const uint16_t* y0 = (const uint16_t*)tensors[op->tensor[0]] + op->offset[0];
      for (int64_t i = 0; i < m; ++i) {
        float* restrict ci = c + i * ldc;
        const uint16_t* restrict y = y0 + i * op->ld;
        if (op->code == BRGEMM_OP_RELU_BWD_BF16) {
#pragma GCC ivdep
          for (int64_t j = 0; j < n; ++j) ci[j] = brgemm_bf16_to_f32(y[j]) > 0.0f ? ci[j] : 0.0f;
        } else if (op->code == BRGEMM_OP_SIGMOID_BWD_BF16) {
#pragma GCC ivdep
          for (int64_t j = 0; j < n; ++j) {
            const float v = brgemm_bf16_to_f32(y[j]);
            ci[j] *= v * (1.0f - v);
          }
        } else {
#pragma GCC ivdep
          for (int64_t j = 0; j < n; ++j) {
            const float v = brgemm_bf16_to_f32(y[j]);
            ci[j] *= 1.0f - v * v;
          }
        }
      }
      return BRGEMM_OK;
    }
    case BRGEMM_OP_BIAS_ROWS: {
      const float* bias = (const float*)tensors[op->tensor[0]] + op->offset[0];
      for (int64_t i = 0; i < m; ++i) {
        float* restrict row = c + i * ldc;
        const float add = bias[i];
        for (int64_t j = 0; j < n; ++j) row[j] += add;
      }
      return BRGEMM_OK;
    }
    case BRGEMM_OP_COPY_ROWS: {
      const float* src = (const float*)tensors[op->tensor[0]] + op->offset[0];
      float* dst = (float*)tensors[op->tensor[1]] + op->offset[1];
      const int64_t cols = op->stride;
      /* streaming stores: the tile is for a later pass, its lines need not be
       * read in first (nor evict what this pass reads) */
      const uintptr_t bits = (uintptr_t)dst | (uintptr_t)src | (uintptr_t)(cols * 4) |
                             (uintptr_t)(op->ld * 4);
      if (bits % 16 == 0) {
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < cols; j += 4)
            _mm_stream_ps(dst + i * cols + j, _mm_load_ps(src + i * op->ld + j));
        _mm_sfence();
      } else {
        for (int64_t i = 0; i < m; ++i)
          memcpy(dst + i * cols, src + i * op->ld, (size_t)cols * sizeof(float));
      }
      return BRGEMM_OK;
    }
    default:
      return BRGEMM_EINVAL;
  }
}
