/* brgemm CPU backend: the C API of the one kernel, over libxsmm 1.17.
 *
 *   C = beta * C + alpha * sum_{i < count} A_i @ B_i      (row-major)
 *
 * A_i is m x k with row stride lda, B_i is k x n with row stride ldb,
 * C is m x n with row stride ldc; all strides and offsets in ELEMENTS.
 * Every function returns BRGEMM_OK (0) or a negative error code.
 *
 * This header is also the cffi cdef: brgemm/_build_cpu.py drops the lines
 * that start with '#', so keep the declarations plain C that cffi parses.
 */
#ifndef BRGEMM_CPU_H
#define BRGEMM_CPU_H
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

enum { BRGEMM_F32 = 0, BRGEMM_BF16 = 1 };
enum { BRGEMM_STRD = 0, BRGEMM_ADDR = 1, BRGEMM_OFFS = 2 };
enum {
  BRGEMM_OK = 0,
  BRGEMM_EINVAL = -1,   /* a descriptor or argument the checks should have caught */
  BRGEMM_ENOMEM = -2,   /* scratch allocation failed */
  BRGEMM_EJIT = -3,     /* libxsmm could not generate the kernel */
  BRGEMM_EOVERLAP = -4  /* the byte ranges of C and A or B intersect (stride form) */
};

/* What a kernel computes; fixed when it is created (libxsmm JITs per shape). */
typedef struct {
  int dtype_ab;          /* BRGEMM_F32 or BRGEMM_BF16 */
  int dtype_c;           /* BRGEMM_F32 or BRGEMM_BF16 */
  int form;              /* BRGEMM_STRD, BRGEMM_ADDR or BRGEMM_OFFS */
  int64_t m, n, k;
  int64_t lda, ldb, ldc; /* row strides, elements, >= k, n, n */
  int64_t stride_a;      /* BRGEMM_STRD only: elements between A_i and A_{i+1} */
  int64_t stride_b;      /* BRGEMM_STRD only: elements between B_i and B_{i+1} */
  float alpha, beta;
} brgemm_cpu_desc;

typedef struct brgemm_cpu_kernel brgemm_cpu_kernel;

/* Create (JIT) a kernel. *out is owned by the caller: brgemm_cpu_destroy. */
int brgemm_cpu_create(const brgemm_cpu_desc* desc, brgemm_cpu_kernel** out);
void brgemm_cpu_destroy(brgemm_cpu_kernel* kernel);

/* How the kernel runs: "f32", "bf16-vnni" (AVX512-BF16 dot products on
 * VNNI-packed B) or "bf16-via-f32" (bf16 widened exactly to f32 per block,
 * for CPUs without AVX512-BF16). Static string. */
const char* brgemm_cpu_path(const brgemm_cpu_kernel* kernel);

/* Non-zero when B may be given pre-packed (brgemm_cpu_pack_b) to the runs
 * below with b_packed = 1: VNNI pairs for bf16-vnni, f32 for bf16-via-f32. */
int brgemm_cpu_packs_b(const brgemm_cpu_kernel* kernel);
/* Elements (of the packed type) one packed k x n block occupies. */
int64_t brgemm_cpu_packed_b_elems(const brgemm_cpu_kernel* kernel);
/* Element size in bytes of a packed B. */
int brgemm_cpu_packed_b_itemsize(const brgemm_cpu_kernel* kernel);
/* Pack one k x n block b (row stride ldb, dtype_ab) into out. */
int brgemm_cpu_pack_b(const brgemm_cpu_kernel* kernel, const void* b, int64_t ldb, void* out);

/* The three forms. With b_packed, B blocks are packed blocks (contiguous,
 * brgemm_cpu_packed_b_elems apart in the stride form) instead of k x n rows.
 * With check_overlap, the stride form first compares the byte ranges that C
 * and all of A and B span, and returns BRGEMM_EOVERLAP without touching C if
 * they meet: a cheap test; the caller decides on exact element overlap. */
int brgemm_cpu_run_strd(const brgemm_cpu_kernel* kernel, const void* a, const void* b,
                        void* c, int64_t count, int b_packed, int check_overlap);
int brgemm_cpu_run_addr(const brgemm_cpu_kernel* kernel, const void* const* a,
                        const void* const* b, void* c, int64_t count, int b_packed);
int brgemm_cpu_run_offs(const brgemm_cpu_kernel* kernel, const void* a, const void* b,
                        const int64_t* a_offs, const int64_t* b_offs, void* c,
                        int64_t count, int b_packed);

/* Benchmark support: run the stride form `reps` times back to back from C
 * and store the elapsed seconds; the yardstick for the Python call path. */
int brgemm_cpu_time_strd(const brgemm_cpu_kernel* kernel, const void* a, const void* b, void* c,
                         int64_t count, int64_t reps, double* seconds);

/* libxsmm's target ("hsw", "skx", "cpx", ...). Static string. */
const char* brgemm_cpu_arch(void);

/* Measured single-thread peak in GFLOP/s of f32 FMA on the widest vector
 * unit this CPU has (AVX-512 or AVX2), timed over about `seconds`. */
double brgemm_cpu_fma_peak(double seconds);
/* Which vector unit brgemm_cpu_fma_peak used: "avx512", "avx2" or "scalar". */
const char* brgemm_cpu_fma_isa(void);
/* Measured single-thread peak in GFLOP/s of AVX512-BF16 dot products
 * (vdpbf16ps, two flops per bf16 pair), or 0 where the CPU has none. */
double brgemm_cpu_bf16_peak(double seconds);

#ifdef __cplusplus
}
#endif
#endif
