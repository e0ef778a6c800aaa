/* JIT code the CPU backend owns: libxsmm 1.17's generator writes a batch-reduce
 * GEMM into memory mapped here, and brgemm_jit_release unmaps it.
 *
 * libxsmm's own dispatchers keep every kernel in a registry for the life of
 * the process (1.17 cannot unregister GEMM kernels, and refuses new ones once
 * 131072 are registered), so a program that meets ever new shapes would grow
 * without bound and then fail. Code made here lives exactly as long as the
 * brgemm_cpu_kernel that holds it. */
#ifndef BRGEMM_JIT_H
#define BRGEMM_JIT_H
#include <stddef.h>

#include <libxsmm.h>

enum { BRGEMM_JIT_F32, BRGEMM_JIT_BF16_F32, BRGEMM_JIT_BF16_BF16 };  /* A/B in, C out */
enum { BRGEMM_JIT_ADDR, BRGEMM_JIT_OFFS, BRGEMM_JIT_STRD };           /* batch-reduce form */

typedef struct {
  void* fn;      /* the kernel, called as libxsmm's *_reducebatch_* function types */
  size_t bytes;  /* the mapping that holds it */
} brgemm_jit_code;

/* Column-major C (M x N, ldc) = [beta] C + sum_i A_i (M x K, lda) B_i (K x N, ldb),
 * libxsmm's convention; flags are LIBXSMM_GEMM_FLAG_* (BETA_0, VNNI_A); with
 * BRGEMM_JIT_STRD, A_i and B_i are stride_a and stride_b BYTES apart.
 * Returns 0, or -1 when libxsmm cannot generate it, -2 when out of memory. */
int brgemm_jit_gemm(int types, int form, libxsmm_blasint M, libxsmm_blasint N, libxsmm_blasint K,
                    libxsmm_blasint lda, libxsmm_blasint ldb, libxsmm_blasint ldc, int flags,
                    long long stride_a, long long stride_b, brgemm_jit_code* out);
void brgemm_jit_release(brgemm_jit_code* code);
#endif
