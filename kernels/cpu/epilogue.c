/* Epilogue ops: element-wise work on a C block right after its last kernel
 * call, while the block is hot in cache. Ops are data (brgemm_plan_op), so
 * loop nests describe fusions instead of branching in their bodies. The body
 * is in epilogue_body.h, built here for any x86-64 and in epilogue_avx2.c
 * with AVX2; the first call picks the one this CPU runs. */
#include "epilogue.h"
#include "layout_window.h"

#define EPILOGUE_FN apply_op_base
#define EPILOGUE_FUSED_FN forward_ops_base
#include "epilogue_body.h"

int apply_op_avx2(const brgemm_plan_op* op, float* c, int64_t m, int64_t n, int64_t ldc,
                  void* const* tensors);
void forward_ops_avx2(float* c, int64_t m, int64_t n, int64_t ldc, const float* bias, int act,
                      uint16_t* dst, int64_t ld);
void forward_ops_avx512(float* c, int64_t m, int64_t n, int64_t ldc, const float* bias, int relu,
                        uint16_t* dst, int64_t ld);
void backward_ops_avx512(float* c, int64_t m, int64_t n, int64_t ldc, const uint16_t* y,
                         int64_t ldy, int act, uint16_t* t, int64_t ldt, uint16_t* d16,
                         int64_t ld16, float* sum);

static int has_avx2(void) {
  static int avx2 = -1;  /* a benign race: every thread computes the same value */
  if (avx2 < 0) {
    __builtin_cpu_init();
    avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }
  return avx2;
}

/* AVX512-BF16 where the CPU has it, unless LIBXSMM_TARGET names a target
 * without AVX-512 (brgemm_layout_avx512): a run forced to AVX2 kernels then
 * takes the epilogues an AVX2 machine takes, so that its tests cover them */
static int has_avx512_bf16(void) {
  static int yes = -1;
  if (yes < 0) {
    __builtin_cpu_init();
    yes = brgemm_layout_avx512() && __builtin_cpu_supports("avx512bw") &&
          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
  }
  return yes;
}

int brgemm_cpu_apply_op(const brgemm_plan_op* op, float* c, int64_t m, int64_t n, int64_t ldc,
                        void* const* tensors) {
  return has_avx2() ? apply_op_avx2(op, c, m, n, ldc, tensors) : apply_op_base(op, c, m, n, ldc, tensors);
}

void brgemm_cpu_copy_b(const brgemm_plan_op* op, int64_t k, int64_t n, int64_t ldb,
                       void* const* tensors) {
  const float* src = (const float*)tensors[op->tensor[0]] + op->offset[0];
  float* dst = (float*)tensors[op->tensor[1]] + op->offset[1];
  /* plain stores: the kernel reads the block next, from this core's cache */
  if (op->code == BRGEMM_OP_COPY_BT) /* dst[i][j] = src[j][i]: SIMD sub-block transposes */
    brgemm_window((const char*)src, 1, op->ld, 4, (char*)dst, ldb, 4, k, n);
  else if (op->code == BRGEMM_OP_COPY_TAPS) /* each row read once, into all the taps' tiles */
    brgemm_taps_transposed(src, op->ld, dst, k * op->stride, n, op->stride,
                           k * ldb + BRGEMM_TAPS_PAD, ldb);
  else
    for (int64_t i = 0; i < k; ++i)
      memcpy(dst + i * ldb, src + i * op->ld, (size_t)n * sizeof(float));
}

void brgemm_cpu_copy_a(const brgemm_plan_op* op, int64_t k, int64_t lda, void* const* tensors) {
  /* dst[i][j] = src[j][i], i < stride: SIMD sub-block transposes, plain stores (the kernel
   * reads the rows next, from this core's cache) */
  brgemm_window((const char*)((const float*)tensors[op->tensor[0]] + op->offset[0]), 1, op->ld,
                4, (char*)((float*)tensors[op->tensor[1]] + op->offset[1]), lda, 4, op->stride, k);
}

/* The op with its operands moved down r rows of C (which the caller moves). */
static brgemm_plan_op rows_down(const brgemm_plan_op* op, int64_t r, int64_t ldc) {
  brgemm_plan_op o = *op;
  switch (op->code) {
    case BRGEMM_OP_STORE_T:
    case BRGEMM_OP_STORE_T_BF16:
    case BRGEMM_OP_BIAS_ROWS:
      o.offset[0] += r;  /* C's row i is the destination's column i, or bias[i] */
      break;
    case BRGEMM_OP_LSTM_CELL:  /* the gates are C-shaped (ldc), the states ld apart */
      o.offset[0] += r * ldc;
      for (int q = 1; q < BRGEMM_OP_OPERANDS; ++q) o.offset[q] += r * op->ld;
      break;
    case BRGEMM_OP_BIAS:
    case BRGEMM_OP_COL_SUM:  /* one row for all of C's */
      break;
    default:  /* row-shaped operands, ld apart (unused slots move harmlessly) */
      for (int q = 0; q < BRGEMM_OP_OPERANDS; ++q) o.offset[q] += r * op->ld;
  }
  return o;
}

void brgemm_cpu_prefetch_ops(const brgemm_plan_op* ops, int32_t count, int64_t m, int64_t n,
                             void* const* tensors) {
  for (int32_t q = 0; q < count; ++q) {
    const brgemm_plan_op* op = &ops[q];
    int64_t rows = m, cols = n, item;
    int write = 0;
    switch (op->code) {
      case BRGEMM_OP_RELU_BWD: case BRGEMM_OP_SIGMOID_BWD: case BRGEMM_OP_TANH_BWD:
        item = 4;
        break;
      case BRGEMM_OP_RELU_BWD_BF16: case BRGEMM_OP_SIGMOID_BWD_BF16: case BRGEMM_OP_TANH_BWD_BF16:
        item = 2;
        break;
      case BRGEMM_OP_STORE_BF16:
        item = 2, write = 1;
        break;
      case BRGEMM_OP_STORE_T: case BRGEMM_OP_STORE_T_BF16:
        rows = n, cols = m, item = op->code == BRGEMM_OP_STORE_T ? 4 : 2, write = 1;
        break;
      default:
        continue;
    }
    const char* base = (const char*)tensors[op->tensor[0]] + op->offset[0] * item;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < cols * item; b += 64) {  /* a line at a time */
        if (write)  /* (the hint's arguments must be constants) */
          __builtin_prefetch(base + r * op->ld * item + b, 1, 2);
        else
          __builtin_prefetch(base + r * op->ld * item + b, 0, 2);
      }
  }
}

/* Is ops[0..count) [bias] [relu | sigmoid | tanh] store_bf16 (two or three
 * ops)? Then the bias (or NULL), the activation's code (or 0) and the store. */
static const brgemm_plan_op* forward_chain(const brgemm_plan_op* ops, int32_t count,
                                           const brgemm_plan_op** bias, int* act) {
  if (count < 2 || count > 3 || ops[count - 1].code != BRGEMM_OP_STORE_BF16) return NULL;
  int i = 0;
  *bias = ops[0].code == BRGEMM_OP_BIAS ? &ops[i++] : NULL;
  *act = 0;
  if (i < count - 1) {
    const int code = ops[i].code;
    if (code != BRGEMM_OP_RELU && code != BRGEMM_OP_SIGMOID && code != BRGEMM_OP_TANH) return NULL;
    *act = code;
    ++i;
  }
  return i == count - 1 ? &ops[i] : NULL;
}

/* Is ops[0..count) [relu | sigmoid | tanh]_bwd_bf16, store_t_bf16, [store_bf16],
 * [col_sum] (a backward layer's epilogue in bf16)? Then the act' op, the plain
 * store and the column sum (each or NULL), and the transposed store. */
static const brgemm_plan_op* backward_chain(const brgemm_plan_op* ops, int32_t count,
                                            const brgemm_plan_op** act,
                                            const brgemm_plan_op** plain,
                                            const brgemm_plan_op** sum) {
  int i = 0;
  *act = *plain = *sum = NULL;
  if (count > 0 && ops[0].code >= BRGEMM_OP_RELU_BWD_BF16 && ops[0].code <= BRGEMM_OP_TANH_BWD_BF16)
    *act = &ops[i++];
  if (i >= count || ops[i].code != BRGEMM_OP_STORE_T_BF16) return NULL;
  const brgemm_plan_op* t = &ops[i++];
  if (i < count && ops[i].code == BRGEMM_OP_STORE_BF16) *plain = &ops[i++];
  if (i < count && ops[i].code == BRGEMM_OP_COL_SUM) *sum = &ops[i++];
  return i == count ? t : NULL;
}

int brgemm_cpu_apply_ops(const brgemm_plan_op* ops, int32_t count, float* c, int64_t m, int64_t n,
                         int64_t ldc, void* const* tensors) {
  const brgemm_plan_op *bias, *store, *grad, *plain, *sum, *tr;
  int act;
  if (has_avx512_bf16() && (tr = backward_chain(ops, count, &grad, &plain, &sum)) != NULL) {
    /* a backward layer's epilogue: one pass, the transposed copy by 16 x 16 blocks */
    backward_ops_avx512(
        c, m, n, ldc, grad ? (const uint16_t*)tensors[grad->tensor[0]] + grad->offset[0] : NULL,
        grad ? grad->ld : 0, grad ? grad->code : 0,
        (uint16_t*)tensors[tr->tensor[0]] + tr->offset[0], tr->ld,
        plain ? (uint16_t*)tensors[plain->tensor[0]] + plain->offset[0] : NULL,
        plain ? plain->ld : 0, sum ? (float*)tensors[sum->tensor[0]] + sum->offset[0] : NULL);
    return BRGEMM_OK;
  }
  if (count == 1) return brgemm_cpu_apply_op(ops, c, m, n, ldc, tensors);
  if ((store = forward_chain(ops, count, &bias, &act)) != NULL) {
    /* a forward layer's epilogue: one pass over C instead of one per op */
    const float* b = bias ? (const float*)tensors[bias->tensor[0]] + bias->offset[0] : NULL;
    uint16_t* dst = (uint16_t*)tensors[store->tensor[0]] + store->offset[0];
    if ((act == 0 || act == BRGEMM_OP_RELU) && has_avx512_bf16())
      forward_ops_avx512(c, m, n, ldc, b, act == BRGEMM_OP_RELU, dst, store->ld);
    else
      (has_avx2() ? forward_ops_avx2 : forward_ops_base)(c, m, n, ldc, b, act, dst, store->ld);
    return BRGEMM_OK;
  }
  /* copies leave C alone: each once, before the chunks */
  for (int32_t j = 0; j < count; ++j)
    if (ops[j].code == BRGEMM_OP_COPY_ROWS) {
      const int rc = brgemm_cpu_apply_op(&ops[j], c, m, n, ldc, tensors);
      if (rc != BRGEMM_OK) return rc;
    }
  /* a few KiB of C at a time: every op passes over a chunk while it is in L1 */
  const int64_t step = n >= 2048 ? 1 : 2048 / n;
  for (int64_t r = 0; r < m; r += step) {
    const int64_t rows = m - r < step ? m - r : step;
    for (int32_t j = 0; j < count; ++j) {
      if (ops[j].code == BRGEMM_OP_COPY_ROWS) continue;
      const brgemm_plan_op o = rows_down(&ops[j], r, ldc);
      const int rc = brgemm_cpu_apply_op(&o, c + r * ldc, rows, n, ldc, tensors);
      if (rc != BRGEMM_OK) return rc;
    }
  }
  return BRGEMM_OK;
}
