/* See jit.h: libxsmm's generator, our executable mappings. */
#include "jit.h"

#include <libxsmm/libxsmm_main.h> /* the descriptor struct: its strides are set here */
#include <libxsmm_generator.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

enum { CODE_MAX = 131072 };  /* libxsmm 1.17's own bound on one kernel's code */

int brgemm_jit_gemm(int types, int form, libxsmm_blasint M, libxsmm_blasint N, libxsmm_blasint K,
                    libxsmm_blasint lda, libxsmm_blasint ldb, libxsmm_blasint ldc, int flags,
                    long long stride_a, long long stride_b, brgemm_jit_code* out) {
  out->fn = NULL;
  out->bytes = 0;
  libxsmm_init();
  const float beta = (flags & LIBXSMM_GEMM_FLAG_BETA_0) ? 0.0f : 1.0f;
  const int prefetch = LIBXSMM_GEMM_PREFETCH_NONE;
  flags |= form == BRGEMM_JIT_ADDR   ? LIBXSMM_GEMM_FLAG_BATCH_REDUCE_ADDRESS
           : form == BRGEMM_JIT_OFFS ? LIBXSMM_GEMM_FLAG_BATCH_REDUCE_OFFSET
                                     : LIBXSMM_GEMM_FLAG_BATCH_REDUCE_STRIDE;
  libxsmm_descriptor_blob blob;
  libxsmm_gemm_descriptor* desc =
      types == BRGEMM_JIT_F32
          ? libxsmm_sgemm_descriptor_init(&blob, M, N, K, lda, ldb, ldc, 1.0f, beta, flags, prefetch)
      : types == BRGEMM_JIT_BF16_F32
          ? libxsmm_bsgemm_descriptor_init(&blob, M, N, K, lda, ldb, ldc, 1.0f, beta, flags, prefetch)
          : libxsmm_bgemm_descriptor_init(&blob, M, N, K, lda, ldb, ldc, 1.0f, beta, flags, prefetch);
  if (!desc) return -1;
  if (form == BRGEMM_JIT_STRD) {  /* as libxsmm's strided dispatcher sets them */
    if (stride_a < 0 || stride_b < 0) return -1;
    desc->c1 = (unsigned long long)stride_a;
    desc->c2 = (unsigned long long)stride_b;
  }
  libxsmm_generated_code gen;
  memset(&gen, 0, sizeof(gen));
  gen.generated_code = malloc(CODE_MAX);
  if (!gen.generated_code) return -2;
  gen.buffer_size = CODE_MAX;
  gen.code_type = 2;  /* machine code */
  gen.arch = (unsigned int)libxsmm_get_target_archid();
  /* libxsmm's dispatcher builds tiny f32 kernels for AVX2 even on AVX-512: same here */
  if (gen.arch > LIBXSMM_X86_AVX2 && types == BRGEMM_JIT_F32 &&
      ((long long)M * K <= 16 || (long long)K * N <= 16 || (long long)M * N <= 16))
    gen.arch = LIBXSMM_X86_AVX2;
  libxsmm_generator_gemm_kernel(&gen, desc);
  int rc = -1;
  if (gen.last_error == 0 && gen.code_size > 0) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t bytes = (gen.code_size + page - 1) / page * page;
    void* p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      rc = -2;
    } else {
      memcpy(p, gen.generated_code, gen.code_size);
      if (mprotect(p, bytes, PROT_READ | PROT_EXEC) != 0) {
        munmap(p, bytes);
        rc = -2;
      } else {
        out->fn = p;
        out->bytes = bytes;
        rc = 0;
      }
    }
  }
  free(gen.generated_code);
  return rc;
}

void brgemm_jit_release(brgemm_jit_code* code) {
  if (code && code->fn) munmap(code->fn, code->bytes);
  if (code) code->fn = NULL;
}
