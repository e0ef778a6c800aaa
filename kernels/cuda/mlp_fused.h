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
enum { MLP_CUDA_ACT_NONE = 0, MLP_CUDA_ACT_RELU = 1, MLP_CUDA_ACT_SIGMOID = 2,
       MLP_CUDA_ACT_TANH = 3 };

typedef struct {
  uint64_t x;         /* [rows][sizes[0]], bf16 or f32 (x_f32) */
  uint64_t y;         /* forward: [rows][sizes[layers]], bf16 or f32 (y_f32) */
  uint64_t dy;        /* backward: [rows][sizes[layers]], bf16 or f32 (dy_f32) */
  uint64_t dx;        /* backward: [rows][sizes[0]], bf16 or f32 (dx_f32); 0: not wanted */
  uint64_t w;         /* [layers][width][width] bf16, 16-byte aligned */
  uint64_t b;         /* [layers][width] f32 */
  uint64_t partial;   /* backward: per block [layers][width][width] dW, then [layers][width] db, f32 */
  uint64_t dw;        /* reduce: every layer's dW [out_l][in_l] end to end, f32 */
  uint64_t db;        /* reduce: every layer's db [out_l] end to end, f32 */
  int64_t rows;
  int32_t layers;
  int32_t partials;   /* reduce: blocks of the backward launch (partial sums to add) */
  int32_t x_f32, y_f32, dy_f32, dx_f32;
  int32_t x_vec, y_vec, dy_vec, dx_vec;  /* row width even and base aligned: paired accesses */
  int32_t sizes[65];  /* in_0, out_0 = in_1, ..., out_{layers-1} */
  int32_t act[64];    /* MLP_CUDA_ACT_* per layer */
  int32_t pad;
} mlp_cuda_args;

#endif
