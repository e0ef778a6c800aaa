/* Blocked layouts: a matrix (or its transpose) to [Rb][Sb][br][bs] tiles,
 * zero-padded, and back. Memory-bound copies, parallel over tiles: the
 * functional forms of the primitives pay these on every call. */
#include <string.h>

#include "brgemm_cpu.h"

/* what to_blocks and from_blocks both require of their arguments */
static int args_ok(const void* src, const void* dst, int64_t R, int64_t S, int64_t ld,
                   int transpose, int itemsize, int64_t br, int64_t bs) {
  return src && dst && R >= 1 && S >= 1 && br >= 1 && bs >= 1 && ld >= (transpose ? R : S) &&
         (itemsize == 2 || itemsize == 4);
}

#define TILE_LOOP(T)                                                                         \
  _Pragma("omp parallel for collapse(2) schedule(static) num_threads(nt)")                   \
  for (int64_t rb = 0; rb < Rb; ++rb)                                                        \
    for (int64_t sb = 0; sb < Sb; ++sb) {                                                    \
      T* tile = (T*)dst + ((swap_grid ? sb * Rb + rb : rb * Sb + sb) * br * bs);             \
      const T* s = (const T*)src;                                                            \
      const int full = (rb + 1) * br <= R && (sb + 1) * bs <= S;                             \
      if (transpose && full && br % 8 == 0 && bs % 8 == 0) /* 8 x 8 sub-blocks, no edges */ \
        for (int64_t j0 = 0; j0 < bs; j0 += 8)                                               \
          for (int64_t i0 = 0; i0 < br; i0 += 8) {                                           \
            const T* in = s + (sb * bs + j0) * ld + rb * br + i0;                            \
            T* o = tile + i0 * bs + j0;                                                      \
            for (int j = 0; j < 8; ++j)                                                      \
              for (int i = 0; i < 8; ++i) o[i * bs + j] = in[j * ld + i];                    \
          }                                                                                  \
      else if (transpose)                                                                    \
        for (int64_t j = 0; j < bs; ++j)                                                     \
          for (int64_t i = 0; i < br; ++i) {                                                 \
            const int64_t r = rb * br + i, c = sb * bs + j;                                  \
            tile[i * bs + j] = (r < R && c < S) ? s[c * ld + r] : 0;                         \
          }                                                                                  \
      else                                                                                   \
        for (int64_t i = 0; i < br; ++i)                                                     \
          for (int64_t j = 0; j < bs; ++j) {                                                 \
            const int64_t r = rb * br + i, c = sb * bs + j;                                  \
            tile[i * bs + j] = (r < R && c < S) ? s[r * ld + c] : 0;                         \
          }                                                                                  \
    }

int brgemm_cpu_to_blocks(const void* src, int64_t R, int64_t S, int64_t ld, int transpose,
                         int swap_grid, int itemsize, int64_t br, int64_t bs, void* dst,
                         int threads) {
  if (!args_ok(src, dst, R, S, ld, transpose, itemsize, br, bs)) return BRGEMM_EINVAL;
  const int64_t Rb = (R + br - 1) / br, Sb = (S + bs - 1) / bs;
  const int nt = brgemm_cpu_plan_threads(threads);
  if (itemsize == 4) {
    TILE_LOOP(uint32_t)
  } else {
    TILE_LOOP(uint16_t)
  }
  return BRGEMM_OK;
}

#define UNTILE_LOOP(T)                                                                       \
  _Pragma("omp parallel for collapse(2) schedule(static) num_threads(nt)")                   \
  for (int64_t rb = 0; rb < Rb; ++rb)                                                        \
    for (int64_t sb = 0; sb < Sb; ++sb) {                                                    \
      const T* tile = (const T*)src + ((swap_grid ? sb * Rb + rb : rb * Sb + sb) * br * bs); \
      T* d = (T*)dst;                                                                        \
      if (transpose) /* 8 x 8 sub-blocks, as above */                                       \
        for (int64_t j0 = 0; j0 < bs; j0 += 8)                                               \
          for (int64_t i0 = 0; i0 < br; i0 += 8)                                             \
            for (int64_t j = j0; j < j0 + 8 && j < bs && sb * bs + j < S; ++j)               \
              for (int64_t i = i0; i < i0 + 8 && i < br && rb * br + i < R; ++i)             \
                d[(sb * bs + j) * ld + rb * br + i] = tile[i * bs + j];                      \
      else                                                                                   \
        for (int64_t i = 0; i < br && rb * br + i < R; ++i)                                  \
          for (int64_t j = 0; j < bs && sb * bs + j < S; ++j)                                \
            d[(rb * br + i) * ld + sb * bs + j] = tile[i * bs + j];                          \
    }

int brgemm_cpu_from_blocks(const void* src, int64_t R, int64_t S, int64_t br, int64_t bs,
                           int swap_grid, int transpose, int itemsize, void* dst, int64_t ld,
                           int threads) {
  if (!args_ok(src, dst, R, S, ld, transpose, itemsize, br, bs)) return BRGEMM_EINVAL;
  const int64_t Rb = (R + br - 1) / br, Sb = (S + bs - 1) / bs;
  const int nt = brgemm_cpu_plan_threads(threads);
  if (itemsize == 4) {
    UNTILE_LOOP(uint32_t)
  } else {
    UNTILE_LOOP(uint16_t)
  }
  return BRGEMM_OK;
}

#define SWAP_LOOP(T)                                                                         \
  _Pragma("omp parallel for collapse(2) schedule(static) num_threads(nt)")                   \
  for (int64_t rb = 0; rb < Rb; ++rb)                                                        \
    for (int64_t sb = 0; sb < Sb; ++sb) {                                                    \
      const T* in = (const T*)src + (rb * Sb + sb) * br * bs;                                \
      T* o = (T*)dst + (sb * Rb + rb) * br * bs;                                             \
      for (int64_t i0 = 0; i0 < br; i0 += 8)                                                 \
        for (int64_t j0 = 0; j0 < bs; j0 += 8)                                               \
          for (int64_t i = i0; i < i0 + 8 && i < br; ++i)                                    \
            for (int64_t j = j0; j < j0 + 8 && j < bs; ++j) o[j * br + i] = in[i * bs + j];  \
    }

int brgemm_cpu_swap_tiles(const void* src, int64_t Rb, int64_t Sb, int64_t br, int64_t bs,
                          int itemsize, void* dst, int threads) {
  if (!src || !dst || Rb < 1 || Sb < 1 || br < 1 || bs < 1 || (itemsize != 2 && itemsize != 4))
    return BRGEMM_EINVAL;
  const int nt = brgemm_cpu_plan_threads(threads);
  if (itemsize == 4) {
    SWAP_LOOP(uint32_t)
  } else {
    SWAP_LOOP(uint16_t)
  }
  return BRGEMM_OK;
}
