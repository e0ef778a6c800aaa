/* Epilogue ops (see brgemm_cpu.h, BRGEMM_OP_*), shared by the plan executor. */
#ifndef BRGEMM_EPILOGUE_H
#define BRGEMM_EPILOGUE_H
#include "brgemm_cpu.h"

/* Apply one op to the f32 block c (m x n, row stride ldc). */
int brgemm_cpu_apply_op(const brgemm_plan_op* op, float* c, int64_t m, int64_t n, int64_t ldc,
                        void* const* tensors);
#endif
