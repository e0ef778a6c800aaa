/* Blocked layouts: a matrix (or its transpose) to [Rb][Sb][br][bs] tiles,
 * zero-padded, and back, with f32 -> bf16 rounding fused in where the
 * element sizes say so. Memory-bound copies, parallel over tiles: the
 * functional forms of the primitives pay these on every call. */
#include "layout_window.h"


/* what to_blocks and from_blocks both require of their arguments */
static int args_ok(const void* src, const void* dst, int64_t R, int64_t S, int64_t ld,
                   int transpose, int si, int di, int64_t br, int64_t bs) {
  return src && dst && R >= 1 && S >= 1 && br >= 1 && bs >= 1 && ld >= (transpose ? R : S) &&
         brgemm_sizes_ok(si, di);
}

/* zero a br x bs tile outside its valid rows x cols corner */
static void zero_edges(char* tile, int64_t br, int64_t bs, int64_t rows, int64_t cols,
                       int itemsize) {
  if (cols < bs)
    for (int64_t i = 0; i < rows; ++i) brgemm_zero(tile + (i * bs + cols) * itemsize, bs - cols, itemsize);
  if (rows < br) brgemm_zero(tile + rows * bs * itemsize, (br - rows) * bs, itemsize);
}

/* The t-th tile in the order the copies visit them. Transposed, tiles next to
 * each other along rb touch the same rows of the plain matrix (its rows are M's
 * columns), so those go innermost and a thread's next tile finds its rows in
 * cache and TLB (see RESULTS.md). */
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

/* Tile (rb, sb) of to_blocks' M copied from src into `tile` (br x bs). */
static void copy_tile_to(const char* src, int64_t R, int64_t S, int64_t ld, int transpose,
                         int si, int64_t br, int64_t bs, char* tile, int di, int64_t rb,
                         int64_t sb) {
  const int64_t rows = brgemm_min64(br, R - rb * br), cols = brgemm_min64(bs, S - sb * bs);
  if (transpose) /* M[r][c] = src[c * ld + r] */
    brgemm_window(src + (sb * bs * ld + rb * br) * si, 1, ld, si, tile, bs, di, rows, cols);
  else
    brgemm_window(src + (rb * br * ld + sb * bs) * si, ld, 1, si, tile, bs, di, rows, cols);
  zero_edges(tile, br, bs, rows, cols, di);
}

/* where tile (rb, sb) of to_blocks' M lies in dst */
static char* tile_at(char* dst, int64_t R, int64_t S, int swap_grid, int64_t br, int64_t bs,
                     int di, int64_t rb, int64_t sb) {
  const int64_t Rb = (R + br - 1) / br, Sb = (S + bs - 1) / bs;
  return dst + (swap_grid ? sb * Rb + rb : rb * Sb + sb) * br * bs * di;
}

/* Tile (rb, sb) of to_blocks' M copied from src (see brgemm_cpu_to_blocks). */
static void copy_tile(const char* src, int64_t R, int64_t S, int64_t ld, int transpose,
                      int swap_grid, int si, int64_t br, int64_t bs, char* dst, int di,
                      int64_t rb, int64_t sb) {
  copy_tile_to(src, R, S, ld, transpose, si, br, bs,
               tile_at(dst, R, S, swap_grid, br, bs, di, rb, sb), di, rb, sb);
}

/* sums[j] += src[i][j] over a rows x cols window of src (row stride ld), row
 * by row in f32: the order brgemm_cpu_column_sums adds in */
static void add_rows(const char* src, int64_t ld, int si, int64_t rows, int64_t cols,
                     float* sums) {
  for (int64_t i = 0; i < rows; ++i) {
    if (si == 4) {
      const float* in = (const float*)src + i * ld;
      for (int64_t j = 0; j < cols; ++j) sums[j] += in[j];
    } else {
      const uint16_t* in = (const uint16_t*)src + i * ld;
      for (int64_t j = 0; j < cols; ++j) sums[j] += brgemm_bf16_to_f32(in[j]);
    }
  }
}

int brgemm_cpu_to_blocks(const void* src, int64_t R, int64_t S, int64_t ld, int transpose,
                         int swap_grid, int src_itemsize, int64_t br, int64_t bs, void* dst,
                         int dst_itemsize, int threads) {
  return brgemm_cpu_to_blocks_sums(src, R, S, ld, transpose, swap_grid, src_itemsize, br, bs,
                                   dst, dst_itemsize, NULL, threads);
}

int brgemm_cpu_to_blocks_sums(const void* src, int64_t R, int64_t S, int64_t ld, int transpose,
                              int swap_grid, int src_itemsize, int64_t br, int64_t bs, void* dst,
                              int dst_itemsize, float* sums, int threads) {
  const int si = src_itemsize, di = dst_itemsize;
  if (!args_ok(src, dst, R, S, ld, transpose, si, di, br, bs)) return BRGEMM_EINVAL;
  const int64_t Rb = (R + br - 1) / br, Sb = (S + bs - 1) / bs;
  const int nt = brgemm_cpu_plan_threads(threads);
  if (sums) {
    /* one task per block of src's columns (M's rows with transpose), its
     * tiles in src's row order, each window summed while it is in L1 */
    const int64_t G = transpose ? Rb : Sb, H = transpose ? Sb : Rb, bg = transpose ? br : bs;
    const int64_t cols_src = transpose ? R : S;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t gi = 0; gi < G; ++gi) {
      const int64_t c0 = gi * bg, n = brgemm_min64(bg, cols_src - c0);
      for (int64_t j = 0; j < n; ++j) sums[c0 + j] = 0.0f;
      for (int64_t h = 0; h < H; ++h) {
        const int64_t rb = transpose ? gi : h, sb = transpose ? h : gi;
        copy_tile((const char*)src, R, S, ld, transpose, swap_grid, si, br, bs, (char*)dst, di,
                  rb, sb);
        const int64_t r0 = h * (transpose ? bs : br);
        const int64_t rows = brgemm_min64(transpose ? bs : br, (transpose ? S : R) - r0);
        add_rows((const char*)src + (r0 * ld + c0) * si, ld, si, rows, n, sums + c0);
      }
    }
    return BRGEMM_OK;
  }
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t t = 0; t < Rb * Sb; ++t) {
    int64_t rb, sb;
    tile_order(t, Rb, Sb, transpose, &rb, &sb);
    copy_tile((const char*)src, R, S, ld, transpose, swap_grid, si, br, bs, (char*)dst, di, rb,
              sb);
  }
  return BRGEMM_OK;
}

int brgemm_cpu_to_blocks_vnni(const void* src, int64_t R, int64_t S, int64_t ld, int transpose,
                              int swap_grid, int src_itemsize, int64_t br, int64_t bs, void* dst,
                              int threads) {
  const int si = src_itemsize;
  if (!args_ok(src, dst, R, S, ld, transpose, si, 2, br, bs) || br % 2) return BRGEMM_EINVAL;
  /* transposed from bf16: rows 2p and 2p + 1 of a tile are src's columns 2p
   * and 2p + 1, one 32-bit word of each src row, and a tile in pairs is the
   * transposed tile of src's words (R even: no word reads past a row) */
  if (transpose && si == 2 && R % 2 == 0 && ld % 2 == 0 && (uintptr_t)src % 4 == 0 &&
      (uintptr_t)dst % 4 == 0)
    return brgemm_cpu_to_blocks_sums(src, R / 2, S, ld / 2, 1, swap_grid, 4, br / 2, bs, dst, 4,
                                     NULL, threads);
  /* else each tile is copied (rounded) into a buffer of the thread's, still in
   * its cache when its row pairs are interleaved into dst */
  const int64_t Rb = (R + br - 1) / br, Sb = (S + bs - 1) / bs;
  int err = BRGEMM_OK;
#pragma omp parallel num_threads(brgemm_cpu_plan_threads(threads))
  {
    uint16_t* tmp = malloc((size_t)(br * bs) * sizeof(uint16_t));
    if (!tmp) {
#pragma omp atomic write
      err = BRGEMM_ENOMEM;
    }
#pragma omp for schedule(static)
    for (int64_t t = 0; t < Rb * Sb; ++t) {
      if (!tmp) continue;
      int64_t rb, sb;
      tile_order(t, Rb, Sb, transpose, &rb, &sb);
      copy_tile_to((const char*)src, R, S, ld, transpose, si, br, bs, (char*)tmp, 2, rb, sb);
      uint16_t* out = (uint16_t*)tile_at((char*)dst, R, S, swap_grid, br, bs, 2, rb, sb);
      for (int64_t p = 0; p < br / 2; ++p)
        brgemm_pair_rows(tmp + 2 * p * bs, tmp + (2 * p + 1) * bs, out + 2 * p * bs, bs);
    }
    free(tmp);
  }
  return err;
}

int brgemm_cpu_from_blocks(const void* src, int64_t R, int64_t S, int64_t br, int64_t bs,
                           int swap_grid, int transpose, int src_itemsize, void* dst, int64_t ld,
                           int dst_itemsize, int threads) {
  const int si = src_itemsize, di = dst_itemsize;
  if (!args_ok(src, dst, R, S, ld, transpose, si, di, br, bs)) return BRGEMM_EINVAL;
  const int64_t Rb = (R + br - 1) / br, Sb = (S + bs - 1) / bs;
  const int nt = brgemm_cpu_plan_threads(threads);
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t t = 0; t < Rb * Sb; ++t) {
    int64_t rb, sb;
    tile_order(t, Rb, Sb, transpose, &rb, &sb);
    const char* tile =
        (const char*)src + (swap_grid ? sb * Rb + rb : rb * Sb + sb) * br * bs * si;
    const int64_t rows = brgemm_min64(br, R - rb * br), cols = brgemm_min64(bs, S - sb * bs);
    if (transpose) /* dst[c * ld + r] = M[r][c] */
      brgemm_window(tile, 1, bs, si, (char*)dst + (sb * bs * ld + rb * br) * di, ld, di, cols,
                    rows);
    else
      brgemm_window(tile, bs, 1, si, (char*)dst + (rb * br * ld + sb * bs) * di, ld, di, rows,
                    cols);
  }
  return BRGEMM_OK;
}

int brgemm_cpu_swap_tiles(const void* src, int64_t Rb, int64_t Sb, int64_t br, int64_t bs,
                          int itemsize, int64_t pair, void* dst, float* sums, int threads) {
  if (!src || !dst || Rb < 1 || Sb < 1 || br < 1 || bs < 1 || (itemsize != 2 && itemsize != 4) ||
      pair < 1 || Sb % pair)
    return BRGEMM_EINVAL;
  const int nt = brgemm_cpu_plan_threads(threads);
  const int64_t tile = br * bs * itemsize;
  /* tile (rb, sb) of M, transposed, is part sb % pair of tile (sb / pair, rb) of the result */
#define BRGEMM_SWAPPED(rb, sb) \
  ((char*)dst + (((sb) / pair * Rb + (rb)) * pair + (sb) % pair) * tile)
  if (!sums) {
#pragma omp parallel for collapse(2) schedule(static) num_threads(nt)
    for (int64_t rb = 0; rb < Rb; ++rb)
      for (int64_t sb = 0; sb < Sb; ++sb)
        brgemm_window((const char*)src + (rb * Sb + sb) * tile, 1, bs, itemsize,
                      BRGEMM_SWAPPED(rb, sb), br, itemsize, bs, br);
    return BRGEMM_OK;
  }
  /* with sums: a column of tiles per task, its columns summed down the rows
   * in order (r = 0, 1, ...: column_sums' order, so the same bits) */
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t sb = 0; sb < Sb; ++sb) {
    float* out = sums + sb * bs;
    for (int64_t j = 0; j < bs; ++j) out[j] = 0.0f;
    for (int64_t rb = 0; rb < Rb; ++rb) {
      const char* in = (const char*)src + (rb * Sb + sb) * tile;
      brgemm_window(in, 1, bs, itemsize, BRGEMM_SWAPPED(rb, sb), br, itemsize, bs, br);
      add_rows(in, bs, itemsize, br, bs, out);
    }
  }
#undef BRGEMM_SWAPPED
  return BRGEMM_OK;
}

int brgemm_cpu_convert(const void* src, int64_t rows, int64_t cols, int64_t ld, int src_itemsize,
                       void* dst, int dst_itemsize, int threads) {
  const int si = src_itemsize, di = dst_itemsize;
  if (!src || !dst || rows < 0 || cols < 0 || ld < cols || !brgemm_sizes_ok(si, di)) return BRGEMM_EINVAL;
  /* chunks of about 16 KiB of output: rows split too, so one long row still spreads */
  const int64_t chunk = 4096, per_row = (cols + chunk - 1) / chunk;
  const int nt = brgemm_cpu_plan_threads(threads);
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t t = 0; t < rows * per_row; ++t) {
    const int64_t r = t / per_row, c0 = (t % per_row) * chunk, n = brgemm_min64(chunk, cols - c0);
    brgemm_window((const char*)src + (r * ld + c0) * si, 0, 1, si, (char*)dst + (r * cols + c0) * di,
                  0, di, 1, n);
  }
  return BRGEMM_OK;
}

/* a short run of bytes (a multiple of 2) in fixed-size moves the compiler
 * inlines: memcpy's call costs more than a 16-byte row */
static inline void copy_short(char* restrict d, const char* restrict s, int64_t bytes) {
  int64_t b = 0;
  for (; b + 16 <= bytes; b += 16) __builtin_memcpy(d + b, s + b, 16);
  for (; b + 4 <= bytes; b += 4) __builtin_memcpy(d + b, s + b, 4);
  for (; b < bytes; b += 2) __builtin_memcpy(d + b, s + b, 2);
}

int brgemm_cpu_copy_windows(const void* src, int64_t src_step, int64_t src_ld, void* dst,
                            int64_t dst_step, int64_t dst_ld, int64_t count, int64_t rows,
                            int64_t cols, int itemsize, int threads) {
  if (!src || !dst || count < 0 || rows < 0 || cols < 0 || src_step < 0 || dst_step < 0 ||
      src_ld < cols || dst_ld < cols || (itemsize != 2 && itemsize != 4))
    return BRGEMM_EINVAL;
  if (count == 0) return BRGEMM_OK; /* (the split below divides by it) */
  /* tasks never straddle two windows: with as many windows as threads or more,
   * the static schedule gives thread t windows t count / nt on, as a plan's
   * static schedule gives it those images (conv's tails are stored back by the
   * cores whose caches hold the rest of those rows); fewer, each window's rows
   * in as many runs as it takes to give every thread one */
  const int nt = brgemm_cpu_plan_threads(threads);
  const int64_t bytes = cols * itemsize, parts = count >= nt ? 1 : (nt + count - 1) / count;
  const int64_t per = (rows + parts - 1) / parts;
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t t = 0; t < count * parts; ++t) {
    const int64_t q = t / parts, r1 = brgemm_min64(rows, (t % parts + 1) * per);
    for (int64_t i = (t % parts) * per; i < r1; ++i) {
      char* d = (char*)dst + (q * dst_step + i * dst_ld) * itemsize;
      const char* s = (const char*)src + (q * src_step + i * src_ld) * itemsize;
      if (bytes <= 256)
        copy_short(d, s, bytes);
      else
        memcpy(d, s, (size_t)bytes);
    }
  }
  return BRGEMM_OK;
}

int brgemm_cpu_column_sums(const void* src, int64_t rows, int64_t cols, int64_t ld, int itemsize,
                           float* dst, int threads) {
  if (!src || !dst || rows < 0 || cols < 1 || ld < cols || (itemsize != 2 && itemsize != 4))
    return BRGEMM_EINVAL;
  const int nt = brgemm_cpu_plan_threads(threads);
  /* column strips, a few per thread, each summed down all rows in f32 */
  int64_t strip = (cols / (4 * nt) + 15) / 16 * 16;
  if (strip < 16) strip = 16;
  const int64_t strips = (cols + strip - 1) / strip;
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t s = 0; s < strips; ++s) {
    const int64_t c0 = s * strip, n = brgemm_min64(strip, cols - c0);
    float* out = dst + c0;
    for (int64_t j = 0; j < n; ++j) out[j] = 0.0f;
    for (int64_t r = 0; r < rows; ++r) {
      if (itemsize == 4) {
        const float* in = (const float*)src + r * ld + c0;
        for (int64_t j = 0; j < n; ++j) out[j] += in[j];
      } else {
        const uint16_t* in = (const uint16_t*)src + r * ld + c0;
        for (int64_t j = 0; j < n; ++j) out[j] += brgemm_bf16_to_f32(in[j]);
      }
    }
  }
  return BRGEMM_OK;
}
