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

/* BEGIN device constants: brgemm/backend/sycl.py prepends the lines up to
 * "END device constants" to the OpenCL source (kernels/sycl/brgemm_plan.cl),
 * so keep them enums and comments that OpenCL C and cffi both parse. */
enum { BRGEMM_F32 = 0, BRGEMM_BF16 = 1 };
enum {  /* epilogue ops on a call's f32 C block (m x n, row stride ldc) */
  BRGEMM_OP_BIAS = 1,        /* C[i][j] += t0[off0 + j] (f32) */
  BRGEMM_OP_RELU = 2,        /* C = C < 0 ? 0 : C (NaN stays NaN, as torch.relu) */
  BRGEMM_OP_SIGMOID = 3,     /* C = 1 / (1 + exp(-C)) */
  BRGEMM_OP_TANH = 4,        /* C = tanh(C) */
  BRGEMM_OP_STORE_BF16 = 5,  /* t0[off0 + i*ld + j] = bf16(C[i][j]) (nearest even; the MLP's
                                fused chains on AVX512-BF16 CPUs flush f32 denormals to 0) */
  BRGEMM_OP_LSTM_CELL = 6,   /* the LSTM cell on m x n blocks, row stride ld, see below */
  BRGEMM_OP_LSTM_CELL_BWD = 7, /* its derivatives, see below */
  /* activation derivatives from the activation's output y = t0[off0 + i*ld + j] (f32):
   * C *= (y > 0), C *= y (1 - y), C *= 1 - y^2 */
  BRGEMM_OP_RELU_BWD = 8,
  BRGEMM_OP_SIGMOID_BWD = 9,
  BRGEMM_OP_TANH_BWD = 10,
  BRGEMM_OP_STORE_T = 11,     /* t0[off0 + j*ld + i] = C[i][j]: a transposed f32 copy */
  BRGEMM_OP_STORE_T_BF16 = 12, /* the same, rounded to bf16 */
  /* RELU_BWD, SIGMOID_BWD, TANH_BWD from a y kept in bf16 (t0 bf16) */
  BRGEMM_OP_RELU_BWD_BF16 = 13,
  BRGEMM_OP_SIGMOID_BWD_BF16 = 14,
  BRGEMM_OP_TANH_BWD_BF16 = 15,
  BRGEMM_OP_BIAS_ROWS = 16,   /* C[i][j] += t0[off0 + i] (f32): a bias per row of C */
  BRGEMM_OP_COL_SUM = 17,     /* t0[off0 + j] += sum_i C[i][j] (f32): a bias gradient */
  BRGEMM_OP_COPY_ROWS = 18,   /* t1[off1 + i*stride + j] = t0[off0 + i*ld + j], i < m,
                                 j < stride (f32; C untouched; CPU only): a block of an operand
                                 the call read (still in cache) copied into tiles, stored
                                 past the cache where aligned */
  BRGEMM_OP_COPY_B = 19,      /* BEFORE the call: t1[off1 + i*ldb + j] = t0[off0 + i*ld + j],
                                 i < k, j < n (the call's k, n, ldb; f32 B; CPU only): one of
                                 the B blocks the call reads, copied in from a plain matrix by
                                 the thread that reads it; a call's COPY_B ops come first */
  BRGEMM_OP_COPY_BT = 20,     /* BEFORE the call, as COPY_B from the transpose of a plain
                                 matrix: t1[off1 + i*ldb + j] = t0[off0 + j*ld + i] (W's rows
                                 made W^T's tiles by the thread that reads them) */
  BRGEMM_OP_COPY_TAPS = 21,   /* BEFORE the call, as COPY_BT with `stride` taps interleaved in
                                 each source row: t1[off1 + t*(k*ldb + BRGEMM_TAPS_PAD) + i*ldb
                                 + j] = t0[off0 + j*ld + i*stride + t], t < stride, i < k,
                                 j < n (a conv weight [K][C][R][S]'s R S tiles of one block
                                 pair, made by the thread that reads them) */
  BRGEMM_OP_COPY_AT = 22      /* BEFORE the call, rows of its A operand from the transpose of
                                 a plain matrix: t1[off1 + i*lda + j] = t0[off0 + j*ld + i],
                                 i < stride, j < k (the call's k and lda; f32 A, not a_t; CPU
                                 only): a row of an NCHW image's pixels, a block of channels
                                 each, made blocked rows by the thread that reads them */
};
enum { BRGEMM_OP_OPERANDS = 7 };  /* tensor slots (and offsets) of one epilogue op */
/* floats between one COPY_TAPS tile's end and the next one's start: a line, so
 * that the taps' rows, written together, do not all fall into one set of the
 * L1 cache where a tile is a multiple of 4 KiB (64 x 64 floats) */
enum { BRGEMM_TAPS_PAD = 16 };
/* The device backends' flat int64 tables of a plan. A call row: */
enum {
  BRGEMM_CALL_KERNEL, BRGEMM_CALL_A, BRGEMM_CALL_B, BRGEMM_CALL_C, BRGEMM_CALL_COFF,
  BRGEMM_CALL_COUNT, BRGEMM_CALL_OFFS, BRGEMM_CALL_OPBEGIN, BRGEMM_CALL_OPCOUNT,
  BRGEMM_CALL_FIELDS  /* the row's width */
};
/* An op row: code, the operands' tensor slots (-1 unused), their element
 * offsets, ld, stride (the fields of brgemm_plan_op below, in order). */
enum {
  BRGEMM_OPROW_CODE = 0,
  BRGEMM_OPROW_TENSOR = 1,
  BRGEMM_OPROW_OFFSET = 1 + BRGEMM_OP_OPERANDS,
  BRGEMM_OPROW_LD = 1 + 2 * BRGEMM_OP_OPERANDS,
  BRGEMM_OPROW_STRIDE = 2 + 2 * BRGEMM_OP_OPERANDS,
  BRGEMM_OP_FIELDS = 3 + 2 * BRGEMM_OP_OPERANDS  /* the row's width */
};
/* A kernel row: m, n, k, lda, ldb, ldc, dtype_ab, dtype_c (BRGEMM_F32/BF16). */
enum { BRGEMM_KDESC_FIELDS = 8 };
/* END device constants */
enum { BRGEMM_STRD = 0, BRGEMM_ADDR = 1, BRGEMM_OFFS = 2 };
enum {
  BRGEMM_OK = 0,
  BRGEMM_EINVAL = -1,   /* a descriptor or argument the checks should have caught */
  BRGEMM_ENOMEM = -2,   /* scratch allocation failed */
  BRGEMM_EJIT = -3,     /* libxsmm could not generate the kernel */
  BRGEMM_EOVERLAP = -4, /* the byte ranges of C and A or B intersect (stride form) */
  BRGEMM_EGEOMETRY = -5 /* the arrays are not of a bound call's geometry (bound_call.h) */
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
  int b_vnni;            /* B blocks are VNNI pairs in place: element (r, j) of a block
                            at (r/2) * 2*ldb + 2*j + r%2; bf16 kernels of a k that
                            brgemm_cpu_reads_vnni_b accepts, else BRGEMM_EINVAL */
  int a_t;               /* A blocks given transposed: element (i, j) of a block at
                            j * lda + i, lda >= m; f32 only, else BRGEMM_EINVAL */
  int c_stream;          /* C stored past the caches (non-temporal stores): a tile that
                            is final after the call and not read again soon. f32, alpha
                            1, beta 0, n and ldc multiples of 16, else BRGEMM_EINVAL; a
                            call whose C is not on a 64-byte boundary stores as usual */
} brgemm_cpu_desc;

typedef struct brgemm_cpu_kernel brgemm_cpu_kernel;

/* Create (JIT) a kernel. *out is owned by the caller: brgemm_cpu_destroy. */
int brgemm_cpu_create(const brgemm_cpu_desc* desc, brgemm_cpu_kernel** out);
void brgemm_cpu_destroy(brgemm_cpu_kernel* kernel);

/* How the kernel runs: "f32", "bf16-amx" (AMX tiles on VNNI-packed B),
 * "bf16-vnni" (AVX512-BF16 dot products on VNNI-packed B) or "bf16-via-f32"
 * (bf16 widened exactly to f32 per block, for CPUs without AVX512-BF16).
 * Static string. */
const char* brgemm_cpu_path(const brgemm_cpu_kernel* kernel);

/* Why bf16 kernels do not run on AMX here ("" when they do): no AMX in the
 * CPU, tile state not enabled by the OS or not granted to this process, or
 * BRGEMM_AMX=0. Decided once per process. Static string. */
const char* brgemm_cpu_amx_reason(void);
/* Which tiles bf16 kernels use: "hardware", "model" (BRGEMM_AMX=model: the
 * software model of the tile instructions, for tests) or "" (none). */
const char* brgemm_cpu_amx_impl(void);
/* Non-zero when bf16 kernels of depth k run on AMX and take B as VNNI pairs in
 * place (desc.b_vnni): k even and split into whole tile chunks. */
int brgemm_cpu_takes_vnni_b(int64_t k);
/* Non-zero when bf16 kernels of depth k here take B as VNNI pairs in place
 * (desc.b_vnni): on AMX, brgemm_cpu_takes_vnni_b; elsewhere any even k (the
 * AVX512-BF16 dot products read those pairs with nothing to pack, and the
 * widening path reads them too). */
int brgemm_cpu_reads_vnni_b(int64_t k);
/* The model's count of tile instructions the hardware would have faulted on. */
int64_t brgemm_cpu_amx_model_faults(void);

/* Non-zero when B may be given pre-packed (brgemm_cpu_pack_b) to the runs
 * below with b_packed = 1: VNNI pairs for bf16-vnni, f32 for bf16-via-f32. */
int brgemm_cpu_packs_b(const brgemm_cpu_kernel* kernel);
/* Elements (of the packed type) one packed k x n block occupies. */
int64_t brgemm_cpu_packed_b_elems(const brgemm_cpu_kernel* kernel);
/* Element size in bytes of a packed B. */
int brgemm_cpu_packed_b_itemsize(const brgemm_cpu_kernel* kernel);
/* Pack one k x n block b (row stride ldb, dtype_ab) into out: VNNI pairs
 * [k/2][n][2] for bf16-vnni, [kp/2][n][2] with zero rows from k to kp in
 * strips of 16 columns, [n/16][kp/2][16][2], for bf16-amx (kp from
 * brgemm_cpu_packed_b_elems / n; brgemm_amx.h), f32 for bf16-via-f32. */
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

/* ---- plans: a recorded loop nest, replayed with OpenMP ----
 * A plan is rows of kernel calls grouped into tasks (one parallel-loop
 * iteration each, run in order by one thread) grouped into phases (separated
 * by barriers). Tensors are slots bound to base pointers per run. Offsets of
 * A and B blocks are in BYTES (libxsmm's unit); everything else in elements.
 * brgemm/plan.py builds plans and checks every offset against the bound
 * arrays; brgemm_cpu_plan_seal checks the plan's internal indices once, and
 * brgemm_cpu_plan_run runs only a plan sealed with its tables as they are. */

/* LSTM_CELL: t0 holds the four gate pre-activations i, f, g, o as m x n
 * blocks at off0 + q * stride (q = 0..3) with the call's ldc as row stride;
 * t1 at off1 is c_prev; writes c to t2 at off2 and h to t3 at off3 (those
 * three with row stride ld), a bf16 copy of h to t4 at off4 when t4 >= 0,
 * and the activated gates back over their inputs (what backward needs):
 * i,f,o = sigmoid, g = tanh, c = f c_prev + i g, h = o tanh(c).
 * LSTM_CELL_BWD: the call's C block holds dh from the next step (dG W_hh);
 * t0 dy, t1 the activated gates (4 blocks, stride), t2 c_t, t3 c_prev, t4 dc
 * (read, then overwritten with the dc that flows to the previous step), t5
 * dG (4 blocks, stride): the gradients at the gates' pre-activations, and
 * their bf16 copies to t6 (same offsets) when t6 >= 0. All but the C block
 * have row stride ld. */

typedef struct {
  int32_t code;       /* BRGEMM_OP_* */
  int32_t tensor[BRGEMM_OP_OPERANDS];  /* operand slots, -1 where unused */
  int64_t offset[BRGEMM_OP_OPERANDS];  /* element offsets of the operands */
  int64_t ld;         /* row stride of 2-D operands, elements */
  int64_t stride;     /* LSTM_CELL: elements between gate blocks */
} brgemm_plan_op;

typedef struct {
  int32_t kernel;   /* index into the plan's kernels */
  int32_t a, b, c;  /* tensor slots */
  int64_t c_off;    /* element offset of the C block */
  int64_t count;    /* blocks to reduce */
  int64_t offs;     /* first of this call's entries in a_offs / b_offs */
  int32_t op_begin, op_count;  /* this call's epilogue ops, applied in order */
} brgemm_plan_call;

typedef struct {
  const brgemm_cpu_kernel* const* kernels;  /* BRGEMM_OFFS kernels */
  int32_t n_kernels;
  int32_t n_tensors;
  const brgemm_plan_call* calls;
  int64_t n_calls;
  const uint64_t* a_offs;    /* bytes */
  const uint64_t* b_offs;    /* bytes */
  int64_t n_offs;
  const brgemm_plan_op* ops;
  int64_t n_ops;
  const int64_t* task_begin;  /* n_tasks + 1 entries: calls of task t */
  int64_t n_tasks;
  const int64_t* phase_begin; /* n_phases + 1 entries: tasks of phase p */
  int64_t n_phases;
  uint64_t seal;              /* set by brgemm_cpu_plan_seal; 0 before */
} brgemm_cpu_plan;

/* Check the plan's own indices (every call, op, task and phase: once, not on
 * each run, which at 64k calls cost a fifth of a millisecond) and seal it:
 * BRGEMM_OK, or BRGEMM_EINVAL (the seal left 0). The seal covers the struct's
 * table pointers and counts, not the tables' contents: the caller keeps them
 * unchanged from here on (brgemm/backend/cpu.py: private copies). */
int brgemm_cpu_plan_seal(brgemm_cpu_plan* plan);

/* Replay: every phase in order; within a phase its tasks spread over
 * `threads` OpenMP threads (<= 0: OpenMP's default), each task's calls in
 * order. Bitwise reproducible: a C block belongs to one task per phase.
 * BRGEMM_EINVAL for a plan not sealed as it is now or a NULL tensor. */
int brgemm_cpu_plan_run(const brgemm_cpu_plan* plan, void* const* tensors, int threads);
/* Threads a run with `threads` would use: threads, or OpenMP's default when
 * threads <= 0, at most brgemm_cpu_max_threads(). */
int brgemm_cpu_plan_threads(int threads);
/* The most threads a run uses: 4 per core the process may run on (counted at
 * the first call), in [8, 1024]. */
int brgemm_cpu_max_threads(void);
/* OpenMP's default thread count from now on (as OMP_NUM_THREADS at start-up;
 * libraries sharing the OpenMP runtime, such as oneDNN's gomp build, follow). */
void brgemm_cpu_set_threads(int threads);
/* Benchmark support: seconds for `reps` passes over all calls of the plan,
 * one thread, kernels only (no epilogues, no OpenMP): "kernel calls from C". */
int brgemm_cpu_plan_time_bare(const brgemm_cpu_plan* plan, void* const* tensors, int64_t reps,
                              double* seconds);

/* ---- blocked layouts ----
 * Element sizes: src_itemsize == dst_itemsize (2 or 4: copies), or 4 -> 2
 * (f32 rounded to bf16, nearest even, on the way). OpenMP over tiles or rows;
 * `threads` <= 0: OpenMP's default.
 * to_blocks: M = src (R x S, row stride ld), or with transpose M = src^T
 * (src is S x R, row stride ld); dst gets M as [Rb][Sb][br][bs] tiles
 * ([Sb][Rb][br][bs] with swap_grid), zero-padded to whole tiles. from_blocks
 * is the inverse (padding dropped). */
int brgemm_cpu_to_blocks(const void* src, int64_t R, int64_t S, int64_t ld, int transpose,
                         int swap_grid, int src_itemsize, int64_t br, int64_t bs, void* dst,
                         int dst_itemsize, int threads);
/* to_blocks, and sums (src's column count, f32) = src's column sums, added
 * in f32 over its rows in order (as brgemm_cpu_column_sums) while the copy
 * reads them; NULL: none. */
int brgemm_cpu_to_blocks_sums(const void* src, int64_t R, int64_t S, int64_t ld, int transpose,
                              int swap_grid, int src_itemsize, int64_t br, int64_t bs, void* dst,
                              int dst_itemsize, float* sums, int threads);
/* to_blocks into bf16 tiles in VNNI pairs (as brgemm_cpu_vnni_tiles leaves
 * them; br even), in one pass over src (f32 rounded on the way). */
int brgemm_cpu_to_blocks_vnni(const void* src, int64_t R, int64_t S, int64_t ld, int transpose,
                              int swap_grid, int src_itemsize, int64_t br, int64_t bs, void* dst,
                              int threads);
int brgemm_cpu_from_blocks(const void* src, int64_t R, int64_t S, int64_t br, int64_t bs,
                           int swap_grid, int transpose, int src_itemsize, void* dst, int64_t ld,
                           int dst_itemsize, int threads);

/* bf16 tiles [tiles][rows][cols] -> [tiles][rows/2][cols][2] (rows even, dst
 * apart from src): B tiles as the AMX kernel reads them with desc.b_vnni. */
int brgemm_cpu_vnni_tiles(const void* src, int64_t tiles, int64_t rows, int64_t cols, void* dst,
                          int threads);

/* Tiles of M as [Rb][Sb][br][bs] -> tiles of M^T as [Sb/pair][Rb][pair*bs][br]
 * (pair 1: [Sb][Rb][bs][br]; pair > 1 divides Sb and stacks `pair` neighbouring
 * transposed tiles in one); sums (f32 [Sb*bs], or NULL): M's column sums,
 * summed down the rows in order as brgemm_cpu_column_sums does. */
int brgemm_cpu_swap_tiles(const void* src, int64_t Rb, int64_t Sb, int64_t br, int64_t bs,
                          int itemsize, int64_t pair, void* dst, float* sums, int threads);

/* dst (rows x cols, contiguous) = src (row stride ld), converted. */
int brgemm_cpu_convert(const void* src, int64_t rows, int64_t cols, int64_t ld, int src_itemsize,
                       void* dst, int dst_itemsize, int threads);

/* dst[q][i][j] = src[q][i][j], q < count, i < rows, j < cols: windows of rows
 * of contiguous elements (itemsize 2 or 4, the same both sides), window q at
 * q * step elements past the start, its rows ld apart, on either side: an
 * NCHW image's last pixels gathered beside other images' (and back). */
int brgemm_cpu_copy_windows(const void* src, int64_t src_step, int64_t src_ld, void* dst,
                            int64_t dst_step, int64_t dst_ld, int64_t count, int64_t rows,
                            int64_t cols, int itemsize, int threads);

/* dst[c] = sum over r of src[r * ld + c] (f32 or bf16 in, f32 sums), c < cols. */
int brgemm_cpu_column_sums(const void* src, int64_t rows, int64_t cols, int64_t ld, int itemsize,
                           float* dst, int threads);

/* Images (kernels/cpu/layout_image.c). image_to_blocks: src [N][C][H][W] with
 * element strides {n, c, h, w} (4 values, >= 0) -> dst [N][Cb][Hp][Wp][bc],
 * the image at row `top`, column `left`, zeros around it and in the padded
 * channels; with pixels_last, dst [N][Cb][Hp][phases][bc][Wp / phases]: padded
 * column j * phases + p at [p][..][j] (phases 1: [N][Cb][Hp][bc][Wp]).
 * blocks_to_image is the inverse of the first layout, into a contiguous
 * [N][C][H][W]. */
int brgemm_cpu_image_to_blocks(const void* src, int64_t N, int64_t C, int64_t H, int64_t W,
                               const int64_t* strides, int src_itemsize, int64_t bc, int64_t Hp,
                               int64_t Wp, int64_t top, int64_t left, int64_t phases,
                               int pixels_last, void* dst, int dst_itemsize, int threads);
int brgemm_cpu_blocks_to_image(const void* src, int64_t N, int64_t C, int64_t H, int64_t W,
                               int64_t bc, int64_t Hp, int64_t Wp, int64_t top, int64_t left,
                               int src_itemsize, void* dst, int dst_itemsize, int threads);
/* image_to_planes: src as above -> dst [N][Cb][sh][sw][bc][L], one plane per
 * channel and phase (a, b) of the strides: element i * Ws + j (i < Hs, j < Ws)
 * is the padded image's pixel (i * sh + a, j * sw + b), the image at (top,
 * left) with zeros around it; zeros from Hs * Ws to L and in padded channels. */
int brgemm_cpu_image_to_planes(const void* src, int64_t N, int64_t C, int64_t H, int64_t W,
                               const int64_t* strides, int src_itemsize, int64_t bc, int64_t top,
                               int64_t left, int64_t sh, int64_t sw, int64_t Hs, int64_t Ws,
                               int64_t L, void* dst, int dst_itemsize, int threads);
/* image_to_columns: src as above -> the im2col matrix of an R x S convolution
 * (strides sh, sw, zero padding ph, pw, output P x Q) as tiles [Pb][Db][bd][bp]:
 * row d = (c * R + r) * S + s, column (n * P + p) * Q + q holds the padded
 * image's pixel (p * sh + r, q * sw + s) of channel c, image n; zeros outside
 * the image and past the D = C R S rows and N P Q columns. transposed: the
 * matrix's transpose, as tiles [Db][Pb][bp][bd] (each tile transposed from a
 * per-thread one on its way out: one pass over dst, not two). */
int brgemm_cpu_image_to_columns(const void* src, int64_t N, int64_t C, int64_t H, int64_t W,
                                const int64_t* strides, int src_itemsize, int64_t R, int64_t S,
                                int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t P,
                                int64_t Q, int64_t bd, int64_t bp, void* dst, int dst_itemsize,
                                int transposed, int threads);
/* columns_to_image: the transposed im2col matrix src [N P Q][ld] (row (n * P +
 * p) * Q + q, column (c * R + r) * S + s: the gradient of the im2col matrix's
 * element) -> dst [N][C][H][W] f32 (contiguous): each element summed into the
 * pixel (p * sh + r - ph, q * sw + s - pw) it was copied from, where that lies
 * in the image (image_to_columns' adjoint). */
int brgemm_cpu_columns_to_image(const float* src, int64_t ld, int64_t N, int64_t C, int64_t H,
                                int64_t W, int64_t R, int64_t S, int64_t sh, int64_t sw,
                                int64_t ph, int64_t pw, int64_t P, int64_t Q, float* dst,
                                int threads);
/* Conv weights src [K][C][RS] (contiguous) -> [Kb][Cb][RS][bc][bk] tiles, or
 * with transposed [Cb][Kb][RS][bk][bc], zero-padded; vnni: bf16 tiles in VNNI
 * pairs of their rows (as brgemm_cpu_vnni_tiles leaves them). */
int brgemm_cpu_conv_weights_to_blocks(const void* src, int64_t K, int64_t C, int64_t RS,
                                      int src_itemsize, int64_t bk, int64_t bc, int transposed,
                                      int vnni, void* dst, int dst_itemsize, int threads);
/* The sum of J shares of weight tiles src [J][Kb][Cb][RS][bk][bc] (f32; with
 * c_rows [..][bc][bk]) -> dst [K][C][RS], contiguous, f32 or bf16 (itemsize). */
int brgemm_cpu_conv_weights_from_blocks(const float* src, int64_t J, int64_t K, int64_t C,
                                        int64_t RS, int64_t bk, int64_t bc, int c_rows,
                                        void* dst, int dst_itemsize, int threads);

/* Benchmark support: run the stride form `reps` times from C and store the
 * elapsed seconds; the yardstick for the Python call path. With gap > 0 or
 * touch > 0, between two calls write `touch` bytes of other memory and wait
 * until `gap` seconds have passed (as the Python call path would), and store
 * the calls' seconds alone. */
int brgemm_cpu_time_strd(const brgemm_cpu_kernel* kernel, const void* a, const void* b, void* c,
                         int64_t count, int b_packed, int64_t reps, double gap, int64_t touch,
                         double* seconds);

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
/* Measured single-thread peak in GFLOP/s of AMX tdpbf16ps (16 x 16 x 32 bf16
 * pairs, two flops each), or 0 where bf16 kernels do not run on AMX tiles. */
double brgemm_cpu_amx_peak(double seconds);
/* The AMX kernel's inner step alone, GFLOP/s on one core (0 without AMX
 * tiles): pattern 0, four accumulators fed from registers; 1, the same with
 * four tile loads per step from L1; 2 to 7, the latter with a turn between
 * macro blocks (C tiles stored and others loaded) every 2, 8 or 32 steps, all
 * at once (even) or tile by tile (odd). Against brgemm_cpu_amx_peak they say
 * what the 2x2 C tiles, the loads and the turns cost before any data comes
 * from L2. */
double brgemm_cpu_amx_probe(int pattern, double seconds);
/* Nanoseconds per tile config load (with a tile zeroed and stored) and, with
 * release, a tile release after each: what a kernel call through the API pays
 * around its tile work (0 without AMX tiles). */
double brgemm_cpu_amx_config_ns(int release, double seconds);

#ifdef __cplusplus
}
#endif
#endif
