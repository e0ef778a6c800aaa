/* The fully fused MLP on an NVIDIA GPU (kernels/cuda/mlp_fused.cu): what its
 * launches read. Every layer is padded to one width (16, 32, 64 or 128) on the
 * host: W_l [width][width] bf16 (out-major, zeros outside out_l x in_l), b_l
 * [width] f32 (zeros past out_l); x, y, dy, dx keep their own widths.
 *
 * This header is also the cffi cdef of brgemm/backend/_cuda_mlp.py (ABI mode):
 * its lines that start with '#' are dropped, so keep it plain C without macros.
 */
#ifndef MLP_FUSED_H
#define MLP_FUSED_H
#include <stdint.h>

enum { MLP_CUDA_MAX_LAYERS = 64 };
enum { MLP_CUDA_FWD_WARPS = 4 };  /* warps per forward block (each runs its own rows) */
enum { MLP_CUDA_FWD_ROWS = 32,     /* rows a forward warp keeps in registers ... */
       MLP_CUDA_FWD_ROWS_W128 = 16 };  /* ... at width 128 */
enum { MLP_CUDA_DZT_ROWS = 64 };   /* stored training: batch rows per dz^T tile (k of a dW call) */
enum { MLP_CUDA_STORED_WARPS = 4 };  /* warps per stored-activation backward block */
enum { MLP_CUDA_ACT_NONE = 0, MLP_CUDA_ACT_RELU = 1, MLP_CUDA_ACT_SIGMOID = 2,
       MLP_CUDA_ACT_TANH = 3 };

typedef struct {
  uint64_t x;         /* [rows][sizes[0]], bf16 or f32 (x_f32) */
  uint64_t y;         /* forward: [rows][sizes[layers]], bf16 or f32 (y_f32) */
  uint64_t dy;        /* backward: [rows][sizes[layers]], bf16 or f32 (dy_f32) */
  uint64_t dx;        /* backward: [rows][sizes[0]], bf16 or f32 (dx_f32); 0: not wanted */
  uint64_t w;         /* [layers][width][width] bf16, 16-byte aligned */
  uint64_t b;         /* [layers][width] f32 */
  uint64_t partial;   /* dW partial sums, f32: `partials` of [layers][width][width], stride_w apart */
  uint64_t partial_db;  /* db partial sums, f32: `partials_db` of [layers][width], stride_b apart */
  uint64_t dw;        /* reduce: every layer's dW [out_l][in_l] end to end, f32 */
  uint64_t db;        /* reduce: every layer's db [out_l] end to end, f32 */
  /* stored training (0 where unused): the forward keeps h and yf, the backward
   * writes dzt; rows_pad = rows rounded up to MLP_CUDA_DZT_ROWS */
  uint64_t h;         /* [layers][rows_pad][width] bf16: layer l's input (l = 0 only with h_x) */
  uint64_t yf;        /* [rows][width] f32: y before rounding, where act'(y) is needed */
  uint64_t dzt;       /* [layers][rows_pad / DZT_ROWS][width][DZT_ROWS] bf16: dz_l^T by tile */
  int64_t rows;
  int64_t rows_pad;
  int64_t stride_w, stride_b;  /* reduce: floats between partial sums */
  int32_t layers;
  int32_t partials;   /* reduce: dW partial sums to add */
  int32_t partials_db;  /* reduce: db partial sums to add */
  int32_t h_x;        /* forward: also keep x (padded, bf16) as layer 0's input */
  int32_t x_f32, y_f32, dy_f32, dx_f32;
  int32_t x_vec, y_vec, dy_vec, dx_vec;  /* row width even and base aligned: paired accesses */
  int32_t sizes[65];  /* in_0, out_0 = in_1, ..., out_{layers-1} */
  int32_t act[64];    /* MLP_CUDA_ACT_* per layer */
  int32_t pad;
} mlp_cuda_args;

#endif
