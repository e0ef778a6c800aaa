/* Epilogue ops: element-wise work on a C block right after its last kernel
 * call, while the block is hot in cache. Ops are data (brgemm_plan_op), so
 * loop nests describe fusions instead of branching in their bodies. */
#include <math.h>
#include <string.h>

#include "brgemm_cpu.h"
#include "brgemm_cpu_internal.h"
#include "epilogue.h"

int brgemm_cpu_apply_op(const brgemm_plan_op* op, float* c, int64_t m, int64_t n, int64_t ldc,
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
        for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = 1.0f / (1.0f + expf(-c[i * ldc + j]));
      return BRGEMM_OK;
    case BRGEMM_OP_TANH:
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = tanhf(c[i * ldc + j]);
      return BRGEMM_OK;
    case BRGEMM_OP_STORE_BF16: {
      uint16_t* dst = (uint16_t*)tensors[op->tensor[0]] + op->offset[0];
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) dst[i * op->ld + j] = brgemm_f32_to_bf16(c[i * ldc + j]);
      return BRGEMM_OK;
    }
    case BRGEMM_OP_LSTM_CELL: {
      float* gi = (float*)tensors[op->tensor[0]] + op->offset[0];
      float *gf = gi + op->stride, *gg = gi + 2 * op->stride, *go = gi + 3 * op->stride;
      const float* cp = (const float*)tensors[op->tensor[1]] + op->offset[1];
      float* cn = (float*)tensors[op->tensor[2]] + op->offset[2];
      float* hn = (float*)tensors[op->tensor[3]] + op->offset[3];
      uint16_t* h16 = op->tensor[4] >= 0 ? (uint16_t*)tensors[op->tensor[4]] + op->offset[4] : NULL;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          const int64_t e = i * ldc + j, s = i * op->ld + j;  /* gates are C blocks */
          const float ig = 1.0f / (1.0f + expf(-gi[e])), fg = 1.0f / (1.0f + expf(-gf[e]));
          const float g = tanhf(gg[e]), og = 1.0f / (1.0f + expf(-go[e]));
          const float cc = fg * cp[s] + ig * g;
          gi[e] = ig, gf[e] = fg, gg[e] = g, go[e] = og;
          cn[s] = cc;
          hn[s] = og * tanhf(cc);
          if (h16) h16[s] = brgemm_f32_to_bf16(hn[s]);
        }
      return BRGEMM_OK;
    }
    default:
      return BRGEMM_EINVAL;
  }
}
