/* Blocked layouts: a matrix (or its transpose) to [Rb][Sb][br][bs] tiles,
 * zero-padded, and back. Memory-bound copies, parallel over tiles: the
 * functional forms of the primitives pay these on every call. */
#include <emmintrin.h>
#include <string.h>
#include <xmmintrin.h>

#include "brgemm_cpu.h"

/* what to_blocks and from_blocks both require of their arguments */
static int args_ok(const void* src, const void* dst, int64_t R, int64_t S, int64_t ld,
                   int transpose, int itemsize, int64_t br, int64_t bs) {
  return src && dst && R >= 1 && S >= 1 && br >= 1 && bs >= 1 && ld >= (transpose ? R : S) &&
         (itemsize == 2 || itemsize == 4);
}

/* dst[a * ldd + b] = src[b * lds + a] for a < na, b < nb: a window transposed.
 * SSE2 (every x86-64 has it) on 4 x 4 (f32) and 8 x 8 (bf16) sub-blocks, scalar
 * edges: the compiler's own code for the plain loops ran at ~2 cycles per
 * element, slower than memory. */
static void transpose4(const uint32_t* src, int64_t lds, uint32_t* dst, int64_t ldd, int64_t na,
                       int64_t nb) {
  for (int64_t b0 = 0; b0 + 4 <= nb; b0 += 4)
    for (int64_t a0 = 0; a0 + 4 <= na; a0 += 4) {
      const float* in = (const float*)(src + b0 * lds + a0);
      __m128 r0 = _mm_loadu_ps(in), r1 = _mm_loadu_ps(in + lds), r2 = _mm_loadu_ps(in + 2 * lds),
             r3 = _mm_loadu_ps(in + 3 * lds);
      _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
      float* out = (float*)(dst + a0 * ldd + b0);
      _mm_storeu_ps(out, r0);
      _mm_storeu_ps(out + ldd, r1);
      _mm_storeu_ps(out + 2 * ldd, r2);
      _mm_storeu_ps(out + 3 * ldd, r3);
    }
  for (int64_t b = 0; b < nb; ++b) /* what the sub-blocks left: right and bottom edges */
    for (int64_t a = (b < nb - nb % 4) ? na - na % 4 : 0; a < na; ++a)
      dst[a * ldd + b] = src[b * lds + a];
}

static void transpose2(const uint16_t* src, int64_t lds, uint16_t* dst, int64_t ldd, int64_t na,
                       int64_t nb) {
  for (int64_t b0 = 0; b0 + 8 <= nb; b0 += 8)
    for (int64_t a0 = 0; a0 + 8 <= na; a0 += 8) {
      const uint16_t* in = src + b0 * lds + a0;
      __m128i r[8], u[8], v[8];
      for (int k = 0; k < 8; ++k) r[k] = _mm_loadu_si128((const __m128i*)(in + k * lds));
      for (int k = 0; k < 8; k += 2) {
        u[k] = _mm_unpacklo_epi16(r[k], r[k + 1]);     /* columns 0-3 of rows k, k+1 */
        u[k + 1] = _mm_unpackhi_epi16(r[k], r[k + 1]); /* columns 4-7 */
      }
      for (int k = 0; k < 2; ++k) /* k = 0: columns 0-3, k = 1: columns 4-7 */
        for (int h = 0; h < 2; ++h) {
          v[4 * k + 2 * h] = _mm_unpacklo_epi32(u[k + 4 * h], u[k + 2 + 4 * h]);
          v[4 * k + 2 * h + 1] = _mm_unpackhi_epi32(u[k + 4 * h], u[k + 2 + 4 * h]);
        }
      /* v[4k + 2h + l] holds columns 4k + 2l, +1 of rows 4h .. 4h+3 */
      uint16_t* out = dst + a0 * ldd + b0;
      for (int k = 0; k < 2; ++k)
        for (int l = 0; l < 2; ++l) {
          const __m128i lo = v[4 * k + l], hi = v[4 * k + 2 + l];
          _mm_storeu_si128((__m128i*)(out + (4 * k + 2 * l) * ldd), _mm_unpacklo_epi64(lo, hi));
          _mm_storeu_si128((__m128i*)(out + (4 * k + 2 * l + 1) * ldd),
                           _mm_unpackhi_epi64(lo, hi));
        }
    }
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t a = (b < nb - nb % 8) ? na - na % 8 : 0; a < na; ++a)
      dst[a * ldd + b] = src[b * lds + a];
}

static void transpose_window(const void* src, int64_t lds, void* dst, int64_t ldd, int64_t na,
                             int64_t nb, int itemsize) {
  if (itemsize == 4)
    transpose4(src, lds, dst, ldd, na, nb);
  else
    transpose2(src, lds, dst, ldd, na, nb);
}

/* dst[a * ldd + b] = src[a * lds + b]: rows of a window */
static void copy_window(const char* src, int64_t lds, char* dst, int64_t ldd, int64_t na,
                        int64_t nb, int itemsize) {
  for (int64_t a = 0; a < na; ++a)
    memcpy(dst + a * ldd * itemsize, src + a * lds * itemsize, (size_t)(nb * itemsize));
}

/* zero a br x bs tile outside its valid rows x cols corner */
static void zero_edges(char* tile, int64_t br, int64_t bs, int64_t rows, int64_t cols,
                       int itemsize) {
  if (cols < bs)
    for (int64_t i = 0; i < rows; ++i)
      memset(tile + (i * bs + cols) * itemsize, 0, (size_t)((bs - cols) * itemsize));
  if (rows < br) memset(tile + rows * bs * itemsize, 0, (size_t)((br - rows) * bs * itemsize));
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* The t-th tile in the order the copies visit them. Transposed, tiles next to
 * each other along rb touch the same rows of the plain matrix (its rows are M's
 * columns), so those go innermost and a thread's next tile finds its rows in
 * cache and TLB: a 1024 x 1024 f32 W^T into tiles 0.44 -> 0.22 ms, 64 MB of dW
 * tiles back to plain 14.8 -> 12.6 ms (EPYC, 2 threads). */
static void tile_order(int64_t t, int64_t Rb, int64_t Sb, int transpose, int64_t* rb,
                       int64_t* sb) {
  if (transpose) {
    *sb = t / Rb;
    *rb = t % Rb;
  } else {
    *rb = t / Sb;
    *sb = t % Sb;
  }
}

int brgemm_cpu_to_blocks(const void* src, int64_t R, int64_t S, int64_t ld, int transpose,
                         int swap_grid, int itemsize, int64_t br, int64_t bs, void* dst,
                         int threads) {
  if (!args_ok(src, dst, R, S, ld, transpose, itemsize, br, bs)) return BRGEMM_EINVAL;
  const int64_t Rb = (R + br - 1) / br, Sb = (S + bs - 1) / bs;
  const int nt = brgemm_cpu_plan_threads(threads);
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t t = 0; t < Rb * Sb; ++t) {
    int64_t rb, sb;
    tile_order(t, Rb, Sb, transpose, &rb, &sb);
    char* tile = (char*)dst + (swap_grid ? sb * Rb + rb : rb * Sb + sb) * br * bs * itemsize;
    const int64_t rows = min64(br, R - rb * br), cols = min64(bs, S - sb * bs);
    if (transpose) /* M[r][c] = src[c * ld + r] */
      transpose_window((const char*)src + (sb * bs * ld + rb * br) * itemsize, ld, tile, bs,
                       rows, cols, itemsize);
    else
      copy_window((const char*)src + (rb * br * ld + sb * bs) * itemsize, ld, tile, bs, rows,
                  cols, itemsize);
    zero_edges(tile, br, bs, rows, cols, itemsize);
  }
  return BRGEMM_OK;
}

int brgemm_cpu_from_blocks(const void* src, int64_t R, int64_t S, int64_t br, int64_t bs,
                           int swap_grid, int transpose, int itemsize, void* dst, int64_t ld,
                           int threads) {
  if (!args_ok(src, dst, R, S, ld, transpose, itemsize, br, bs)) return BRGEMM_EINVAL;
  const int64_t Rb = (R + br - 1) / br, Sb = (S + bs - 1) / bs;
  const int nt = brgemm_cpu_plan_threads(threads);
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t t = 0; t < Rb * Sb; ++t) {
    int64_t rb, sb;
    tile_order(t, Rb, Sb, transpose, &rb, &sb);
    const char* tile =
        (const char*)src + (swap_grid ? sb * Rb + rb : rb * Sb + sb) * br * bs * itemsize;
    const int64_t rows = min64(br, R - rb * br), cols = min64(bs, S - sb * bs);
    if (transpose) /* dst[c * ld + r] = M[r][c] */
      transpose_window(tile, bs, (char*)dst + (sb * bs * ld + rb * br) * itemsize, ld, cols,
                       rows, itemsize);
    else
      copy_window(tile, bs, (char*)dst + (rb * br * ld + sb * bs) * itemsize, ld, rows, cols,
                  itemsize);
  }
  return BRGEMM_OK;
}

int brgemm_cpu_swap_tiles(const void* src, int64_t Rb, int64_t Sb, int64_t br, int64_t bs,
                          int itemsize, void* dst, int threads) {
  if (!src || !dst || Rb < 1 || Sb < 1 || br < 1 || bs < 1 || (itemsize != 2 && itemsize != 4))
    return BRGEMM_EINVAL;
  const int nt = brgemm_cpu_plan_threads(threads);
#pragma omp parallel for collapse(2) schedule(static) num_threads(nt)
  for (int64_t rb = 0; rb < Rb; ++rb)
    for (int64_t sb = 0; sb < Sb; ++sb) /* tile (sb, rb) of M.T = tile (rb, sb) of M, transposed */
      transpose_window((const char*)src + (rb * Sb + sb) * br * bs * itemsize, bs,
                       (char*)dst + (sb * Rb + rb) * br * bs * itemsize, br, bs, br, itemsize);
  return BRGEMM_OK;
}
