/* Epilogue ops: element-wise work on a C block right after its last kernel
 * call, while the block is hot in cache. Ops are data (brgemm_plan_op), so
 * loop nests describe fusions instead of branching in their bodies. The body
 * is in epilogue_body.h, built here for any x86-64 and in epilogue_avx2.c
 * with AVX2; the first call picks the one this CPU runs. */
#include "epilogue.h"

#define EPILOGUE_FN apply_op_base
#include "epilogue_body.h"

int apply_op_avx2(const brgemm_plan_op* op, float* c, int64_t m, int64_t n, int64_t ldc,
                  void* const* tensors);

int brgemm_cpu_apply_op(const brgemm_plan_op* op, float* c, int64_t m, int64_t n, int64_t ldc,
                        void* const* tensors) {
  static int avx2 = -1;  /* a benign race: every thread computes the same value */
  if (avx2 < 0) {
    __builtin_cpu_init();
    avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }
  return avx2 ? apply_op_avx2(op, c, m, n, ldc, tensors) : apply_op_base(op, c, m, n, ldc, tensors);
}
