/* brgemm CPU backend over libxsmm 1.17: see brgemm_cpu.h for the contract.
 *
 * libxsmm is column-major; row-major C = A B is column-major C^T = B^T A^T,
 * so libxsmm's A operand is our B, its B is our A, M = n, N = m, K = k.
 * libxsmm 1.17 accumulates with alpha = 1 and beta in {0, 1} only; other
 * alpha/beta run the kernel with beta 0 into a scratch tile and combine.
 */
#include "brgemm_amx.h"
#include "brgemm_cpu.h"
#include "brgemm_cpu_internal.h"
#include "jit.h"

#include <libxsmm.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { PATH_F32, PATH_BF16_VNNI, PATH_BF16_VIA_F32, PATH_BF16_AMX };

struct brgemm_cpu_kernel {
  brgemm_cpu_desc d;
  int path;
  int via_scratch;  /* kernel writes a scratch tile that is then combined into C */
  void* fn;         /* libxsmm function: native form for f32, address form for bf16
                       (offset form for bf16-vnni kernels of VNNI B in place: offs_direct) */
  int offs_direct;  /* bf16-vnni, b_vnni, offset form: plan calls go to fn with no lists */
  brgemm_jit_code code;  /* the mapping fn lives in (jit.c), released with the kernel */
  brgemm_jit_code stream;  /* desc.c_stream: fn with non-temporal C stores (fn stores as
                              usual, for a C off the 64-byte boundary they need) */
  const brgemm_amx_impl* amx;  /* PATH_BF16_AMX: our tile kernel instead of libxsmm */
  brgemm_amx_kernel* amx_kernel;
};

/* ---- per-thread scratch, freed when the thread exits ----
 * Two independent slots: SLOT_LISTS for address/offset lists a run builds,
 * SLOT_WORK for the blocks and tiles run_bf16 and the alpha/beta path use. */

enum { SLOT_LISTS = 0, SLOT_WORK = 1, SLOTS = 2 };
typedef struct { void* ptr[SLOTS]; size_t size[SLOTS]; } scratch_t;
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_free(void* p) {
  scratch_t* s = (scratch_t*)p;
  if (!s) return;
  for (int i = 0; i < SLOTS; ++i) free(s->ptr[i]);
  free(s);
}
static void scratch_init(void) { pthread_key_create(&scratch_key, scratch_free); }

static void* scratch_get(int slot, size_t size) {
  pthread_once(&scratch_once, scratch_init);
  scratch_t* s = (scratch_t*)pthread_getspecific(scratch_key);
  if (!s) {
    s = (scratch_t*)calloc(1, sizeof(*s));
    if (!s) return NULL;
    pthread_setspecific(scratch_key, s);
  }
  if (s->size[slot] < size) {
    size_t want = (size + 4095) & ~(size_t)4095;
    void* p = aligned_alloc(64, want);
    if (!p) return NULL;
    free(s->ptr[slot]);
    s->ptr[slot] = p;
    s->size[slot] = want;
  }
  return s->ptr[slot];
}

void* brgemm_cpu_scratch_work(size_t size) { return scratch_get(SLOT_WORK, size); }

/* carve 64-byte aligned pieces out of one scratch block */
static size_t round64(size_t x) { return (x + 63) & ~(size_t)63; }

/* ---- bf16 helpers ---- */

/* rows x cols bf16 block (row stride ld) -> contiguous f32 */
static void widen_block(const uint16_t* src, int64_t rows, int64_t cols, int64_t ld, float* dst) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = brgemm_bf16_to_f32(src[r * ld + c]);
}

/* k x n bf16 block in VNNI pairs (element (r, j) at (r/2) * 2*ld + 2*j + r%2, k even)
 * -> contiguous f32 k x n */
static void widen_vnni_block(const uint16_t* src, int64_t k, int64_t n, int64_t ld, float* dst) {
  for (int64_t r = 0; r < k; ++r)
    for (int64_t c = 0; c < n; ++c)
      dst[r * n + c] = brgemm_bf16_to_f32(src[(r / 2) * 2 * ld + 2 * c + r % 2]);
}

/* k x n bf16 block (row stride ld) -> VNNI pairs [k/2][n][2] (k even) */
static void vnni_block(const uint16_t* src, int64_t k, int64_t n, int64_t ld, uint16_t* dst) {
  for (int64_t p = 0; p < k / 2; ++p)
    for (int64_t j = 0; j < n; ++j) {
      dst[(p * n + j) * 2 + 0] = src[(2 * p + 0) * ld + j];
      dst[(p * n + j) * 2 + 1] = src[(2 * p + 1) * ld + j];
    }
}

/* ---- kernel creation ---- */

static int desc_valid(const brgemm_cpu_desc* d) {
  const int64_t lim = (int64_t)1 << 30;
  if ((d->dtype_ab != BRGEMM_F32 && d->dtype_ab != BRGEMM_BF16) ||
      (d->dtype_c != BRGEMM_F32 && d->dtype_c != BRGEMM_BF16)) return 0;
  if (d->dtype_ab == BRGEMM_F32 && d->dtype_c != BRGEMM_F32) return 0;
  if (d->form < BRGEMM_STRD || d->form > BRGEMM_OFFS) return 0;
  if (d->m < 1 || d->n < 1 || d->k < 1 || d->m > lim || d->n > lim || d->k > lim) return 0;
  if (d->a_t != 0 && d->a_t != 1) return 0;
  if (d->a_t && d->dtype_ab != BRGEMM_F32) return 0;
  if (d->lda < (d->a_t ? d->m : d->k) || d->ldb < d->n || d->ldc < d->n) return 0;
  if (d->lda > lim || d->ldb > lim || d->ldc > lim) return 0;
  if (d->form == BRGEMM_STRD && (d->stride_a < 0 || d->stride_b < 0)) return 0;
  /* libxsmm addresses rows and batch strides with 32-bit byte offsets */
  const int64_t span = ((int64_t)1 << 31) - 1, ea = d->dtype_ab == BRGEMM_F32 ? 4 : 2;
  const int64_t ec = d->dtype_c == BRGEMM_F32 ? 4 : 2;
  if ((d->a_t ? d->k : d->m) * d->lda * ea > span || d->k * d->ldb * ea > span || d->m * d->ldc * ec > span) return 0;
  if (d->stride_a * ea > span || d->stride_b * ea > span) return 0;
  if (d->b_vnni && (d->dtype_ab != BRGEMM_BF16 || !brgemm_cpu_reads_vnni_b(d->k))) return 0;
  if (d->c_stream != 0 && d->c_stream != 1) return 0;
  if (d->c_stream && (d->dtype_ab != BRGEMM_F32 || d->alpha != 1.0f || d->beta != 0.0f ||
                      d->n % 16 || d->ldc % 16)) return 0;
  return 1;
}

static int bf16_dot_available(void) {
  /* libxsmm 1.17 JITs bf16 dot products for AVX512-BF16 (cpx) and later */
  return libxsmm_get_target_archid() >= LIBXSMM_X86_AVX512_CPX;
}

/* AMX kernels take the k that split into whole tile chunks; the others any even
 * k: libxsmm's bf16 dot products read B (its A) in exactly these pairs, and the
 * widening path reads them too. */
int brgemm_cpu_reads_vnni_b(int64_t k) {
  libxsmm_init();
  if (brgemm_amx_selected()) return brgemm_cpu_takes_vnni_b(k);
  return k >= 2 && k % 2 == 0;
}

int brgemm_cpu_create(const brgemm_cpu_desc* desc, brgemm_cpu_kernel** out) {
  if (!desc || !out || !desc_valid(desc)) return BRGEMM_EINVAL;
  *out = NULL;
  libxsmm_init();
  brgemm_cpu_kernel* kr = (brgemm_cpu_kernel*)calloc(1, sizeof(*kr));
  if (!kr) return BRGEMM_ENOMEM;
  const brgemm_cpu_desc* d = desc;
  kr->d = *d;
  const int direct_ab = d->alpha == 1.0f && (d->beta == 0.0f || d->beta == 1.0f);
  libxsmm_blasint M = (libxsmm_blasint)d->n, N = (libxsmm_blasint)d->m, K = (libxsmm_blasint)d->k;
  int jit = 0;

  if (d->dtype_ab == BRGEMM_F32) {
    kr->path = PATH_F32;
    kr->via_scratch = !direct_ab;
    int flags = (kr->via_scratch || d->beta == 0.0f) ? LIBXSMM_GEMM_FLAG_BETA_0 : 0;
    /* our A is libxsmm's B: given transposed, libxsmm broadcasts its elements from
     * the transposed places (element (k, n) of its B at n + k ldb) */
    if (d->a_t) flags |= LIBXSMM_GEMM_FLAG_TRANS_B;
    libxsmm_blasint lda = (libxsmm_blasint)d->ldb, ldb = (libxsmm_blasint)d->lda;
    libxsmm_blasint ldc = kr->via_scratch ? M : (libxsmm_blasint)d->ldc;
    const int form = d->form == BRGEMM_STRD   ? BRGEMM_JIT_STRD
                     : d->form == BRGEMM_ADDR ? BRGEMM_JIT_ADDR
                                              : BRGEMM_JIT_OFFS;
    jit = brgemm_jit_gemm(BRGEMM_JIT_F32, form, M, N, K, lda, ldb, ldc, flags, d->stride_b * 4,
                          d->stride_a * 4, &kr->code);
    /* whole vectors (n, ldc multiples of 16) on 64-byte lines: libxsmm's streaming
     * stores, which need that alignment; the calls whose C has it take them */
    if (jit == 0 && d->c_stream)
      jit = brgemm_jit_gemm(BRGEMM_JIT_F32, form, M, N, K, lda, ldb, ldc,
                            flags | LIBXSMM_GEMM_FLAG_ALIGN_C_NTS_HINT, d->stride_b * 4,
                            d->stride_a * 4, &kr->stream);
  } else if ((kr->amx = brgemm_amx_selected()) != NULL) {
    /* AMX tiles: any k and lda (the kernel pads odd k itself), alpha/beta inside */
    kr->path = PATH_BF16_AMX;
    kr->amx_kernel = kr->amx->create(d);
    if (!kr->amx_kernel) { free(kr); return BRGEMM_ENOMEM; }
  } else if (bf16_dot_available() && d->k % 2 == 0 && d->lda % 2 == 0) {
    /* bf16 blocks straight into the dot products; B repacked into VNNI pairs.
     * libxsmm 1.17 reads A's rows as bf16 pairs (dwords): with an odd lda its
     * results are wrong (seen on a Xeon with AVX512-BF16), hence the even lda. */
    kr->path = PATH_BF16_VNNI;
    kr->via_scratch = !direct_ab;
    int flags = LIBXSMM_GEMM_FLAG_VNNI_A;
    if (kr->via_scratch || d->beta == 0.0f) flags |= LIBXSMM_GEMM_FLAG_BETA_0;
    /* B in VNNI pairs in place: libxsmm's A with pair rows 2 ldb apart, so its lda
     * is ldb; packed per call otherwise, [k/2][n][2] (lda n) */
    libxsmm_blasint lda = d->b_vnni ? (libxsmm_blasint)d->ldb : M, ldb = (libxsmm_blasint)d->lda;
    libxsmm_blasint ldc = kr->via_scratch ? M : (libxsmm_blasint)d->ldc;
    const int types = !kr->via_scratch && d->dtype_c == BRGEMM_BF16 ? BRGEMM_JIT_BF16_BF16
                                                                     : BRGEMM_JIT_BF16_F32;
    /* with nothing to pack, plans' byte offsets go straight to an offset-form kernel */
    kr->offs_direct = d->b_vnni && d->form == BRGEMM_OFFS;
    jit = brgemm_jit_gemm(types, kr->offs_direct ? BRGEMM_JIT_OFFS : BRGEMM_JIT_ADDR, M, N, K,
                          lda, ldb, ldc, flags, 0, 0, &kr->code);
    if (jit == -1 && kr->offs_direct) {  /* no offset form from the generator: lists then */
      kr->offs_direct = 0;
      jit = brgemm_jit_gemm(types, BRGEMM_JIT_ADDR, M, N, K, lda, ldb, ldc, flags, 0, 0, &kr->code);
    }
  } else {
    /* no bf16 dot products here (or odd k or lda): widen blocks to f32, which is
     * exact, and accumulate in f32 as the bf16 contract says */
    kr->path = PATH_BF16_VIA_F32;
    kr->via_scratch = !direct_ab || d->dtype_c == BRGEMM_BF16;
    int flags = (kr->via_scratch || d->beta == 0.0f) ? LIBXSMM_GEMM_FLAG_BETA_0 : 0;
    libxsmm_blasint lda = M, ldb = K;
    libxsmm_blasint ldc = kr->via_scratch ? M : (libxsmm_blasint)d->ldc;
    jit = brgemm_jit_gemm(BRGEMM_JIT_F32, BRGEMM_JIT_ADDR, M, N, K, lda, ldb, ldc, flags, 0, 0,
                          &kr->code);
  }
  kr->fn = kr->code.fn;
  if ((!kr->fn && !kr->amx_kernel) || (d->c_stream && !kr->stream.fn)) {
    brgemm_jit_release(&kr->code);
    free(kr);
    return jit == -2 ? BRGEMM_ENOMEM : BRGEMM_EJIT;
  }
  *out = kr;
  return BRGEMM_OK;
}

void brgemm_cpu_destroy(brgemm_cpu_kernel* kernel) {
  if (kernel && kernel->amx_kernel) kernel->amx->destroy(kernel->amx_kernel);
  if (kernel) {
    brgemm_jit_release(&kernel->code);
    brgemm_jit_release(&kernel->stream);
  }
  free(kernel);
}

const char* brgemm_cpu_path(const brgemm_cpu_kernel* kr) {
  if (!kr) return "";
  return kr->path == PATH_F32 ? "f32" : kr->path == PATH_BF16_VNNI ? "bf16-vnni"
         : kr->path == PATH_BF16_AMX ? "bf16-amx" : "bf16-via-f32";
}

int brgemm_cpu_packs_b(const brgemm_cpu_kernel* kr) { return kr && kr->path != PATH_F32; }

int64_t brgemm_cpu_packed_b_elems(const brgemm_cpu_kernel* kr) {
  if (!kr) return 0;
  return kr->path == PATH_BF16_AMX ? kr->amx->packed_b_elems(kr->amx_kernel) : kr->d.k * kr->d.n;
}

int brgemm_cpu_packed_b_itemsize(const brgemm_cpu_kernel* kr) {
  if (!kr) return 0;
  return kr->path == PATH_BF16_VNNI || kr->path == PATH_BF16_AMX ? 2 : 4;
}

int brgemm_cpu_pack_b(const brgemm_cpu_kernel* kr, const void* b, int64_t ldb, void* out) {
  if (!kr || !b || !out || kr->path == PATH_F32 || ldb < kr->d.n) return BRGEMM_EINVAL;
  if (kr->path == PATH_BF16_AMX)
    kr->amx->pack_b(kr->amx_kernel, b, ldb, out);
  else if (kr->path == PATH_BF16_VNNI)
    vnni_block((const uint16_t*)b, kr->d.k, kr->d.n, ldb, (uint16_t*)out);
  else
    widen_block((const uint16_t*)b, kr->d.k, kr->d.n, ldb, (float*)out);
  return BRGEMM_OK;
}

/* ---- running ---- */

/* C = alpha * T + beta * C, T contiguous m x n f32; beta 0 ignores C (NaN included) */
static void combine(const brgemm_cpu_desc* d, const float* t, void* c) {
  for (int64_t i = 0; i < d->m; ++i)
    for (int64_t j = 0; j < d->n; ++j) {
      float v = d->alpha * t[i * d->n + j];
      if (d->dtype_c == BRGEMM_F32) {
        float* cp = (float*)c + i * d->ldc + j;
        *cp = d->beta == 0.0f ? v : v + d->beta * *cp;
      } else {
        uint16_t* cp = (uint16_t*)c + i * d->ldc + j;
        *cp = brgemm_f32_to_bf16(d->beta == 0.0f ? v : v + d->beta * brgemm_bf16_to_f32(*cp));
      }
    }
}

/* bf16 kernels: every form arrives here as lists of block addresses */
static int run_bf16(const brgemm_cpu_kernel* kr, const void* const* a, const void* const* b,
                    void* c, int64_t count, int b_packed) {
  if (kr->path == PATH_BF16_AMX) return kr->amx->run(kr->amx_kernel, a, b, c, count, b_packed);
  const brgemm_cpu_desc* d = &kr->d;
  const int widen = kr->path == PATH_BF16_VIA_F32;
  if (d->b_vnni && !widen) b_packed = 1;  /* the pairs the kernel reads, in place */
  const size_t bsz = (size_t)d->k * d->n * (widen ? 4 : 2);
  const size_t asz = widen ? (size_t)d->m * d->k * 4 : 0;
  const size_t ptrs = round64((size_t)count * sizeof(void*));
  const size_t a_blk = round64(asz), b_blk = b_packed ? 0 : round64(bsz);
  const size_t tsz = kr->via_scratch ? round64((size_t)d->m * d->n * 4) : 0;
  char* s = (char*)scratch_get(SLOT_WORK, 2 * ptrs + (size_t)count * (a_blk + b_blk) + tsz);
  if (!s) return BRGEMM_ENOMEM;
  const void** ap = (const void**)s;
  const void** bp = (const void**)(s + ptrs);
  char* blocks = s + 2 * ptrs;
  float* t = (float*)(blocks + (size_t)count * (a_blk + b_blk));
  for (int64_t i = 0; i < count; ++i) {
    char* mine = blocks + (size_t)i * (a_blk + b_blk);
    if (widen) {
      widen_block((const uint16_t*)a[i], d->m, d->k, d->lda, (float*)mine);
      ap[i] = mine;
    } else {
      ap[i] = a[i];
    }
    if (b_packed) {
      bp[i] = b[i];
    } else if (d->b_vnni) {
      widen_vnni_block((const uint16_t*)b[i], d->k, d->n, d->ldb, (float*)(mine + a_blk));
      bp[i] = mine + a_blk;
    } else {
      brgemm_cpu_pack_b(kr, b[i], d->ldb, mine + a_blk);
      bp[i] = mine + a_blk;
    }
  }
  unsigned long long cnt = (unsigned long long)count;
  void* dst = kr->via_scratch ? (void*)t : c;
  if (widen)
    ((libxsmm_smmfunction_reducebatch_addr)kr->fn)((const float**)bp, (const float**)ap,
                                                   (float*)dst, &cnt);
  else if (!kr->via_scratch && d->dtype_c == BRGEMM_BF16)
    ((libxsmm_bmmfunction_reducebatch_addr)kr->fn)((const libxsmm_bfloat16**)bp,
                                                   (const libxsmm_bfloat16**)ap,
                                                   (libxsmm_bfloat16*)dst, &cnt);
  else
    ((libxsmm_bsmmfunction_reducebatch_addr)kr->fn)((const libxsmm_bfloat16**)bp,
                                                    (const libxsmm_bfloat16**)ap, (float*)dst,
                                                    &cnt);
  if (kr->via_scratch) combine(d, t, c);
  return BRGEMM_OK;
}

/* zero blocks: C = beta * C (libxsmm is not asked for count 0) */
static int run_empty(const brgemm_cpu_kernel* kr, void* c) {
  const brgemm_cpu_desc* d = &kr->d;
  if (d->beta == 0.0f) {  /* the common case in loop nests: an output no block reaches */
    const size_t item = d->dtype_c == BRGEMM_F32 ? 4 : 2;
    for (int64_t i = 0; i < d->m; ++i) memset((char*)c + (size_t)(i * d->ldc) * item, 0, d->n * item);
    return BRGEMM_OK;
  }
  float* t = (float*)scratch_get(SLOT_WORK, (size_t)d->m * d->n * 4);
  if (!t) return BRGEMM_ENOMEM;
  memset(t, 0, (size_t)d->m * d->n * 4);
  combine(d, t, c);
  return BRGEMM_OK;
}

/* Whether a call that writes C at c streams it: the kernel has the streaming
 * function and c sits on a 64-byte boundary (its stores need one) */
static int streams_at(const brgemm_cpu_kernel* kr, const void* c) {
  return kr->stream.fn && ((uintptr_t)c & 63) == 0;
}

/* The f32 function for a call that writes C at c (streams_at picks) */
static void* f32_fn(const brgemm_cpu_kernel* kr, const void* c) {
  return streams_at(kr, c) ? kr->stream.fn : kr->fn;
}

/* After a call through f32_fn: streaming stores are weakly ordered, so they are
 * fenced before the call returns, as ordinary stores need not be */
static void f32_done(const brgemm_cpu_kernel* kr, const void* c) {
  if (streams_at(kr, c)) __builtin_ia32_sfence();
}

/* f32 result in the scratch tile, when alpha/beta need it */
static float* f32_dst(const brgemm_cpu_kernel* kr, void* c) {
  return kr->via_scratch ? (float*)scratch_get(SLOT_WORK, (size_t)kr->d.m * kr->d.n * 4) : (float*)c;
}

static int ranges_meet(const void* p, int64_t p_bytes, const void* q, int64_t q_bytes) {
  const char *x = (const char*)p, *y = (const char*)q;
  return x < y + q_bytes && y < x + p_bytes;
}

/* does C's byte range meet A's or B's in the stride form? */
static int strd_overlap(const brgemm_cpu_kernel* kr, const void* a, const void* b, const void* c,
                        int64_t count, int b_packed) {
  const brgemm_cpu_desc* d = &kr->d;
  const int64_t ea = d->dtype_ab == BRGEMM_F32 ? 4 : 2, ec = d->dtype_c == BRGEMM_F32 ? 4 : 2;
  const int64_t a_bytes = ((count - 1) * d->stride_a +
                           (d->a_t ? (d->k - 1) * d->lda + d->m : (d->m - 1) * d->lda + d->k)) * ea;
  const int64_t b_bytes =
      b_packed ? count * brgemm_cpu_packed_b_elems(kr) * brgemm_cpu_packed_b_itemsize(kr)
               : ((count - 1) * d->stride_b + (d->k - 1) * d->ldb + d->n) * ea;
  const int64_t c_bytes = ((d->m - 1) * d->ldc + d->n) * ec;
  return ranges_meet(c, c_bytes, a, a_bytes) || ranges_meet(c, c_bytes, b, b_bytes);
}

static int run_strd_(const brgemm_cpu_kernel* kr, const void* a, const void* b, void* c,
                        int64_t count, int b_packed, int check_overlap) {
  if (!kr || !c || count < 0 || kr->d.form != BRGEMM_STRD) return BRGEMM_EINVAL;
  if (b_packed && kr->path == PATH_F32) return BRGEMM_EINVAL;
  if (count == 0) return run_empty(kr, c);
  if (!a || !b) return BRGEMM_EINVAL;
  if (check_overlap && strd_overlap(kr, a, b, c, count, b_packed)) return BRGEMM_EOVERLAP;
  const brgemm_cpu_desc* d = &kr->d;
  if (kr->path == PATH_F32) {
    float* dst = f32_dst(kr, c);
    if (!dst) return BRGEMM_ENOMEM;
    unsigned long long cnt = (unsigned long long)count;
    ((libxsmm_smmfunction_reducebatch_strd)f32_fn(kr, dst))((const float*)b, (const float*)a, dst,
                                                           &cnt);
    f32_done(kr, dst);
    if (kr->via_scratch) combine(d, dst, c);
    return BRGEMM_OK;
  }
  /* bf16: turn strides into address lists */
  const void** lists = (const void**)scratch_get(SLOT_LISTS, (size_t)count * 2 * sizeof(void*));
  if (!lists) return BRGEMM_ENOMEM;
  const int64_t sb = b_packed ? brgemm_cpu_packed_b_elems(kr) * brgemm_cpu_packed_b_itemsize(kr)
                              : d->stride_b * 2;
  for (int64_t i = 0; i < count; ++i) {
    lists[i] = (const char*)a + i * d->stride_a * 2;
    lists[count + i] = (const char*)b + i * sb;
  }
  return run_bf16(kr, lists, lists + count, c, count, b_packed);
}

static int run_addr_(const brgemm_cpu_kernel* kr, const void* const* a, const void* const* b,
                        void* c, int64_t count, int b_packed) {
  if (!kr || !c || count < 0 || kr->d.form != BRGEMM_ADDR) return BRGEMM_EINVAL;
  if (b_packed && kr->path == PATH_F32) return BRGEMM_EINVAL;
  if (count == 0) return run_empty(kr, c);
  if (!a || !b) return BRGEMM_EINVAL;
  for (int64_t i = 0; i < count; ++i)
    if (!a[i] || !b[i]) return BRGEMM_EINVAL;
  if (kr->path != PATH_F32) return run_bf16(kr, a, b, c, count, b_packed);
  float* dst = f32_dst(kr, c);
  if (!dst) return BRGEMM_ENOMEM;
  unsigned long long cnt = (unsigned long long)count;
  ((libxsmm_smmfunction_reducebatch_addr)f32_fn(kr, dst))((const float**)b, (const float**)a, dst,
                                                           &cnt);
  f32_done(kr, dst);
  if (kr->via_scratch) combine(&kr->d, dst, c);
  return BRGEMM_OK;
}

int brgemm_cpu_run_offs_bytes(const brgemm_cpu_kernel* kr, const void* a, const void* b,
                              const unsigned long long* a_offs, const unsigned long long* b_offs,
                              void* c, int64_t count, int b_packed) {
  if (count == 0) return run_empty(kr, c);
  if (kr->path == PATH_F32) {
    float* dst = f32_dst(kr, c);
    if (!dst) return BRGEMM_ENOMEM;
    unsigned long long cnt = (unsigned long long)count;
    ((libxsmm_smmfunction_reducebatch_offs)f32_fn(kr, dst))((const float*)b, (const float*)a, dst,
                                                           &cnt, b_offs, a_offs);
    f32_done(kr, dst);
    if (kr->via_scratch) combine(&kr->d, dst, c);
    return BRGEMM_OK;
  }
  if (kr->offs_direct) {
    float* dst = f32_dst(kr, c);
    if (!dst) return BRGEMM_ENOMEM;
    unsigned long long cnt = (unsigned long long)count;
    if (!kr->via_scratch && kr->d.dtype_c == BRGEMM_BF16)
      ((libxsmm_bmmfunction_reducebatch_offs)kr->fn)(
          (const libxsmm_bfloat16*)b, (const libxsmm_bfloat16*)a, (libxsmm_bfloat16*)c, &cnt,
          b_offs, a_offs);
    else
      ((libxsmm_bsmmfunction_reducebatch_offs)kr->fn)(
          (const libxsmm_bfloat16*)b, (const libxsmm_bfloat16*)a, dst, &cnt, b_offs, a_offs);
    if (kr->via_scratch) combine(&kr->d, dst, c);
    return BRGEMM_OK;
  }
  const void** ap = (const void**)scratch_get(SLOT_LISTS, (size_t)count * 2 * sizeof(void*));
  if (!ap) return BRGEMM_ENOMEM;
  const void** bp = ap + count;
  for (int64_t i = 0; i < count; ++i) {
    ap[i] = (const char*)a + a_offs[i];
    bp[i] = (const char*)b + b_offs[i];
  }
  return run_bf16(kr, ap, bp, c, count, b_packed);
}

static int run_offs_(const brgemm_cpu_kernel* kr, const void* a, const void* b,
                        const int64_t* a_offs, const int64_t* b_offs, void* c, int64_t count,
                        int b_packed) {
  if (!kr || !c || count < 0 || kr->d.form != BRGEMM_OFFS) return BRGEMM_EINVAL;
  if (b_packed && kr->path == PATH_F32) return BRGEMM_EINVAL;
  if (count == 0) return run_empty(kr, c);
  if (!a || !b || !a_offs || !b_offs) return BRGEMM_EINVAL;
  const uint64_t ea = kr->path == PATH_F32 ? 4 : 2;
  const uint64_t eb = b_packed ? (uint64_t)brgemm_cpu_packed_b_itemsize(kr) : ea;
  /* libxsmm wants byte offsets; ours are elements */
  unsigned long long* ao =
      (unsigned long long*)scratch_get(SLOT_LISTS, (size_t)count * 2 * sizeof(unsigned long long));
  if (!ao) return BRGEMM_ENOMEM;
  unsigned long long* bo = ao + count;
  for (int64_t i = 0; i < count; ++i) {
    if (a_offs[i] < 0 || b_offs[i] < 0) return BRGEMM_EINVAL;
    ao[i] = (unsigned long long)a_offs[i] * ea;
    bo[i] = (unsigned long long)b_offs[i] * eb;
  }
  /* the byte-offset runner reuses SLOT_LISTS for bf16 address lists: copy out first */
  if (kr->path != PATH_F32 && !kr->offs_direct) {
    const void** ap = (const void**)ao;  /* same size per entry: convert in place */
    const void** bp = (const void**)bo;
    for (int64_t i = 0; i < count; ++i) {
      ap[i] = (const char*)a + ao[i];
      bp[i] = (const char*)b + bo[i];
    }
    return run_bf16(kr, ap, bp, c, count, b_packed);
  }
  return brgemm_cpu_run_offs_bytes(kr, a, b, ao, bo, c, count, b_packed);
}

const char* brgemm_cpu_arch(void) {
  libxsmm_init();
  return libxsmm_get_target_arch();
}

int brgemm_cpu_ab_itemsize(const brgemm_cpu_kernel* kr) { return kr->d.dtype_ab == BRGEMM_F32 ? 4 : 2; }
int brgemm_cpu_c_itemsize(const brgemm_cpu_kernel* kr) { return kr->d.dtype_c == BRGEMM_F32 ? 4 : 2; }
int brgemm_cpu_form(const brgemm_cpu_kernel* kr) { return kr->d.form; }
int brgemm_cpu_b_vnni(const brgemm_cpu_kernel* kr) { return kr->d.b_vnni; }
int64_t brgemm_cpu_dim(const brgemm_cpu_kernel* kr, char which) {
  return which == 'm' ? kr->d.m : which == 'n' ? kr->d.n : which == 'k' ? kr->d.k
         : which == 'a' ? kr->d.lda : which == 'b' ? kr->d.ldb : kr->d.ldc;
}

int brgemm_cpu_a_t(const brgemm_cpu_kernel* kr) { return kr->d.a_t; }

/* The public runs leave no tile state behind (the plan executor releases per
 * thread when a run ends, so its calls keep their tile config loaded), unless
 * a kernel made with BRGEMM_AMX_KEEP=1 keeps its tiles (brgemm_amx.c). */
int brgemm_cpu_run_strd(const brgemm_cpu_kernel* kr, const void* a, const void* b, void* c,
                        int64_t count, int b_packed, int check_overlap) {
  int rc = run_strd_(kr, a, b, c, count, b_packed, check_overlap);
  if (kr && kr->path == PATH_BF16_AMX) kr->amx->finish(kr->amx_kernel);
  return rc;
}

int brgemm_cpu_run_addr(const brgemm_cpu_kernel* kr, const void* const* a, const void* const* b,
                        void* c, int64_t count, int b_packed) {
  int rc = run_addr_(kr, a, b, c, count, b_packed);
  if (kr && kr->path == PATH_BF16_AMX) kr->amx->finish(kr->amx_kernel);
  return rc;
}

int brgemm_cpu_run_offs(const brgemm_cpu_kernel* kr, const void* a, const void* b,
                        const int64_t* a_offs, const int64_t* b_offs, void* c, int64_t count,
                        int b_packed) {
  int rc = run_offs_(kr, a, b, a_offs, b_offs, c, count, b_packed);
  if (kr && kr->path == PATH_BF16_AMX) kr->amx->finish(kr->amx_kernel);
  return rc;
}
