/* The epilogue ops built for AVX2 + FMA (see epilogue.c, which dispatches). */
#pragma GCC target("avx2,fma")

#include "epilogue.h"

#define EPILOGUE_FN apply_op_avx2_impl
#define EPILOGUE_FUSED_FN forward_ops_avx2_impl
#include "epilogue_body.h"

void forward_ops_avx2(float* c, int64_t m, int64_t n, int64_t ldc, const float* bias, int act,
                      uint16_t* dst, int64_t ld);
void forward_ops_avx2(float* c, int64_t m, int64_t n, int64_t ldc, const float* bias, int act,
                      uint16_t* dst, int64_t ld) {
  forward_ops_avx2_impl(c, m, n, ldc, bias, act, dst, ld);
}

int apply_op_avx2(const brgemm_plan_op* op, float* c, int64_t m, int64_t n, int64_t ldc,
                  void* const* tensors);
int apply_op_avx2(const brgemm_plan_op* op, float* c, int64_t m, int64_t n, int64_t ldc,
                  void* const* tensors) {
  return apply_op_avx2_impl(op, c, m, n, ldc, tensors);
}
