/* Epilogue ops (see brgemm_cpu.h, BRGEMM_OP_*), shared by the plan executor. */
#ifndef BRGEMM_EPILOGUE_H
#define BRGEMM_EPILOGUE_H
#include "brgemm_cpu.h"

/* Apply one op to the f32 block c (m x n, row stride ldc). */
int brgemm_cpu_apply_op(const brgemm_plan_op* op, float* c, int64_t m, int64_t n, int64_t ldc,
                        void* const* tensors);
/* All `count` ops of one call on its block, in order, a chunk of rows at a time
 * (each chunk through every op while it is in L1): the same results as
 * applying the ops one after another to the whole block, since each op reads
 * and writes only the rows of the chunk. */
int brgemm_cpu_apply_ops(const brgemm_plan_op* ops, int32_t count, float* c, int64_t m, int64_t n,
                         int64_t ldc, void* const* tensors);
/* Prefetch what the ops read from memory besides C, and the blocks they write,
 * into the cache: called before the call's kernel runs, whose time hides the
 * misses (a training backward's act' reads activations stored long before). */
void brgemm_cpu_prefetch_ops(const brgemm_plan_op* ops, int32_t count, int64_t m, int64_t n,
                             void* const* tensors);
/* The COPY_B, COPY_BT or COPY_TAPS op before its call: one k x n block into B's tile (row
 * stride ldb), or COPY_TAPS's `stride` of them, k ldb apart. */
void brgemm_cpu_copy_b(const brgemm_plan_op* op, int64_t k, int64_t n, int64_t ldb,
                       void* const* tensors);
/* The COPY_AT op before its call: `stride` rows of k elements into A's rows (stride lda). */
void brgemm_cpu_copy_a(const brgemm_plan_op* op, int64_t k, int64_t lda, void* const* tensors);
#endif
