/* brgemm CUDA backend: what one launch of the plan-phase kernel reads.
 *
 * A recorded plan (kernels/cpu/brgemm_cpu.h: brgemm_plan_call, brgemm_plan_op,
 * task and phase tables, A/B offsets in BYTES) goes to the device as it is;
 * this header adds the per-kernel shapes and the launch argument. One launch
 * runs the tasks task0 .. of one phase, `parts` thread blocks (or clusters)
 * per task.
 *
 * This header is also the cffi cdef of brgemm/backend/cuda.py (ABI mode): its
 * lines that start with '#' are dropped, so keep it plain C without macros.
 */
#ifndef BRGEMM_CUDA_H
#define BRGEMM_CUDA_H
#include <stdint.h>

enum { BRGEMM_CUDA_MAX_TENSORS = 32 };  /* tensor slots a launch can bind */
enum { BRGEMM_CUDA_THREADS = 256 };     /* threads per block: two warpgroups */
enum { BRGEMM_CUDA_TMA_THREADS = 288 }; /* the TMA entries': and a producer warp */

/* per call (brgemm_cuda_phase_args.call_path), set by the host */
enum {
  BRGEMM_CUDA_PATH_TC = 1,       /* bf16 tensor-core path: k, n, lda, ldb and
                                    every A/B offset are multiples of 8 elements */
  BRGEMM_CUDA_PATH_MEM_OPS = 2   /* an epilogue op reads other blocks (LSTM):
                                    store C first, then run the ops over memory */
};

typedef struct {
  int64_t m, n, k;
  int64_t lda, ldb, ldc;   /* row strides, elements */
  int32_t dtype_ab;        /* BRGEMM_F32 or BRGEMM_BF16 */
  int32_t dtype_c;
  float alpha, beta;
  int32_t b_vnni;          /* B blocks in VNNI pairs ([k/2][n][2], brgemm.vnni) */
  int32_t pad;
} brgemm_cuda_block;

typedef struct {
  uint64_t tensors[32];    /* device address of each tensor slot */
  uint64_t blocks;         /* const brgemm_cuda_block *, by brgemm_plan_call.kernel */
  uint64_t calls;          /* const brgemm_plan_call * */
  uint64_t a_offs;         /* const uint64_t *, bytes */
  uint64_t b_offs;         /* const uint64_t *, bytes */
  uint64_t ops;            /* const brgemm_plan_op * */
  uint64_t task_begin;     /* const int64_t *, n_tasks + 1 entries */
  uint64_t call_path;      /* const uint8_t *, BRGEMM_CUDA_PATH_* bits per call */
  int64_t task0;           /* the first task of this launch */
  int32_t allow_tc;        /* 0: every tensor-core call takes the generic path
                              (a tensor address is not 16-byte aligned) */
  int32_t parts;           /* blocks (or clusters) per task: part p of a task
                              computes its calls' tiles p, p + parts, ... (1: all) */
  int32_t tile_m, tile_n;  /* the most rows and columns of a tensor-core tile
                              up to 128 x 128 (64 or 128) */
  int32_t uniform;         /* 1: task t is call t alone, of kernel shape `kernel`
                              (its task range and kernel index are not read) */
  int32_t kernel;
  int32_t tasks;           /* the tasks of this launch (read by the TMA entries,
                              whose blocks may take several: see tma_tile.cuh) */
  int32_t vec_stores;      /* 1: the TMA entries' epilogue stores several C
                              elements a thread in every case that allows it
                              (bf16 C, ops in registers); 0: only f32 C without
                              register ops (the code before this flag) */
} brgemm_cuda_phase_args;

/* the TMA entries' second parameter: two CUtensorMap (cuTensorMapEncodeTiled),
 * A's tensor and B's, each a 2-D bf16 array [rows][ld] (64-byte aligned in
 * the kernel's parameter space; the device code declares it so) */
typedef struct {
  uint64_t a[16];
  uint64_t b[16];
} brgemm_cuda_tma_maps;

#endif
