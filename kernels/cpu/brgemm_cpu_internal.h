/* Entry points shared between the CPU backend's C files, not part of the
 * Python-facing API (brgemm_cpu.h): they trust their arguments. */
#ifndef BRGEMM_CPU_INTERNAL_H
#define BRGEMM_CPU_INTERNAL_H
#include <string.h>

#include "brgemm_cpu.h"

static inline float brgemm_bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline uint16_t brgemm_f32_to_bf16(float f) {  /* round to nearest even, NaN stays NaN */
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* Every cache line of the `bytes` at p asked for now, to be read (write 0) or
 * written (write 1): a hint, which faults nowhere, even past an array's end.
 * For spans the hardware prefetchers do not follow (rows pages apart). */
static inline void brgemm_prefetch_span(const void* p, int64_t bytes, int write) {
  const char* c = (const char*)p;
  for (int64_t o = 0; o < bytes; o += 64) {
    if (write)  /* (the hint's arguments must be constants) */
      __builtin_prefetch(c + o, 1, 3);
    else
      __builtin_prefetch(c + o, 0, 3);
  }
  if (write)  /* the last line, where the span ends past a 64-byte step */
    __builtin_prefetch(c + bytes - 1, 1, 3);
  else
    __builtin_prefetch(c + bytes - 1, 0, 3);
}

/* The offset form with BYTE offsets, as libxsmm takes them: no conversion
 * pass, for plans that store byte offsets. Works for any form's kernel whose
 * f32 function is the offset form (the plan creates BRGEMM_OFFS kernels). */
int brgemm_cpu_run_offs_bytes(const brgemm_cpu_kernel* kernel, const void* a, const void* b,
                              const unsigned long long* a_offs, const unsigned long long* b_offs,
                              void* c, int64_t count, int b_packed);

/* This thread's work scratch (64-byte aligned, kept until the thread exits);
 * a run owns it until it returns. NULL when out of memory. */
void* brgemm_cpu_scratch_work(size_t size);

/* Element sizes of a kernel's A/B and C, in bytes. */
int brgemm_cpu_ab_itemsize(const brgemm_cpu_kernel* kernel);
int brgemm_cpu_c_itemsize(const brgemm_cpu_kernel* kernel);
int brgemm_cpu_form(const brgemm_cpu_kernel* kernel);
int brgemm_cpu_b_vnni(const brgemm_cpu_kernel* kernel);
int64_t brgemm_cpu_dim(const brgemm_cpu_kernel* kernel, char which); /* 'm', 'n', 'k', 'a' for
                                                                       lda, 'b' ldb, 'c' ldc */
int brgemm_cpu_a_t(const brgemm_cpu_kernel* kernel); /* A blocks given transposed */
#endif
