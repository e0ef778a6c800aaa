/* Image layouts of the convolution: NCHW images to channel-blocked, padded
 * images and back, and conv weights to and from their tiles, each in one
 * parallel pass (padding, blocking, transposition and the f32 -> bf16
 * rounding fused). See primitives/conv.py for the layouts. */
#include <stdlib.h>

#include "layout_window.h"

/* pixels per task where an image without border is copied as one long row */
enum { PIXELS = 256 };
/* rows shorter than this are copied a whole image plane at a time, through a
 * per-thread buffer: one long transpose, then the rows placed in the border */
enum { SHORT_ROW = 12 };
/* channels whose NCHW rows a blocked copy reads (or writes) side by side: a
 * task takes GROUP channels down all its rows, then the next GROUP. A row of
 * all bc (64) channels at a time kept bc streams going at once, more than the
 * hardware prefetchers follow; 16 is one AVX-512 transpose's height. */
enum { GROUP = 16 };

/* chunks of rows each plane of a blocked copy is cut into: enough tasks for
 * every thread (about four each) where the planes alone are too few */
static int64_t plane_chunks(int64_t planes, int64_t rows, int nt) {
  const int64_t want = (4 * (int64_t)nt + planes - 1) / planes;
  return want < 1 ? 1 : want > rows ? rows : want;
}


int brgemm_cpu_image_to_blocks(const void* src, int64_t N, int64_t C, int64_t H, int64_t W,
                               const int64_t* strides, int src_itemsize, int64_t bc, int64_t Hp,
                               int64_t Wp, int64_t top, int64_t left, int64_t phases,
                               int pixels_last, void* dst, int dst_itemsize, int threads) {
  const int si = src_itemsize, di = dst_itemsize;
  if (!src || !dst || !strides || N < 1 || C < 1 || H < 1 || W < 1 || bc < 1 || top < 0 ||
      left < 0 || Hp < top + H || Wp < left + W || phases < 1 || Wp % phases ||
      (!pixels_last && phases != 1) || !brgemm_sizes_ok(si, di))
    return BRGEMM_EINVAL;
  for (int i = 0; i < 4; ++i)
    if (strides[i] < 0) return BRGEMM_EINVAL;
  const int64_t sn = strides[0], sc = strides[1], sh = strides[2], sw = strides[3];
  const int64_t Cb = (C + bc - 1) / bc, Wd = Wp / phases, row = Wp * bc;
  const int nt = brgemm_cpu_plan_threads(threads);
  if (!pixels_last && Hp == H && Wp == W && sw == 1 && sh == W) {
    /* no border and rows back to back: each channel block's pixels are one
     * long window, cut into chunks (short rows transposed poorly: 14 pixels
     * leave most of an 8 x 8 sub-block to the scalar edges) */
    const int64_t HW = H * W, chunks = (HW + PIXELS - 1) / PIXELS;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t t = 0; t < N * Cb * chunks; ++t) {
      const int64_t n = t / (Cb * chunks), cb = t / chunks % Cb, a0 = t % chunks * PIXELS;
      const int64_t nc = brgemm_min64(bc, C - cb * bc), na = brgemm_min64(PIXELS, HW - a0);
      char* out = (char*)dst + ((n * Cb + cb) * HW + a0) * bc * di;
      brgemm_window((const char*)src + (n * sn + cb * bc * sc + a0) * si, 1, sc, si, out, bc, di,
                    na, nc);
      if (nc < bc)
        for (int64_t a = 0; a < na; ++a) brgemm_zero(out + (a * bc + nc) * di, bc - nc, di);
    }
    return BRGEMM_OK;
  }
  if (!pixels_last && sw == 1 && sh == W && W < SHORT_ROW) {
    const int64_t HW = H * W;
    int err = BRGEMM_OK;
#pragma omp parallel num_threads(nt)
    {
      char* tmp = malloc((size_t)(HW * bc * di));
      if (!tmp) {
#pragma omp atomic write
        err = BRGEMM_ENOMEM;
      }
#pragma omp for schedule(static)
      for (int64_t t = 0; t < N * Cb; ++t) { /* one channel block's plane */
        if (!tmp) continue;
        const int64_t n = t / Cb, cb = t % Cb, nc = brgemm_min64(bc, C - cb * bc);
        brgemm_window((const char*)src + (n * sn + cb * bc * sc) * si, 1, sc, si, tmp, bc, di, HW,
                      nc);
        if (nc < bc)
          for (int64_t a = 0; a < HW; ++a) brgemm_zero(tmp + (a * bc + nc) * di, bc - nc, di);
        char* plane = (char*)dst + t * Hp * row * di;
        brgemm_zero(plane, top * row, di);
        for (int64_t h = 0; h < H; ++h) {
          char* out = plane + (top + h) * row * di;
          brgemm_zero(out, left * bc, di);
          memcpy(out + left * bc * di, tmp + h * W * bc * di, (size_t)(W * bc * di));
          brgemm_zero(out + (left + W) * bc * di, (Wp - left - W) * bc, di);
        }
        brgemm_zero(plane + (top + H) * row * di, (Hp - top - H) * row, di);
      }
      free(tmp);
    }
    return err;
  }
  if (!pixels_last) { /* [Hp][Wp][bc] planes */
    const int64_t planes = N * Cb, chunks = plane_chunks(planes, Hp, nt);
    const int64_t span = (Hp + chunks - 1) / chunks;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t t = 0; t < planes * chunks; ++t) { /* rows [h0, h1) of one plane */
      const int64_t n = t / (Cb * chunks), cb = t / chunks % Cb, nc = brgemm_min64(bc, C - cb * bc);
      const int64_t h0 = t % chunks * span, h1 = brgemm_min64(Hp, h0 + span);
      const int64_t r0 = h0 > top ? h0 : top, r1 = brgemm_min64(h1, top + H); /* rows of x */
      char* plane = (char*)dst + (n * Cb + cb) * Hp * row * di;
      for (int64_t h = h0; h < h1; ++h) { /* the border's zeros */
        char* out = plane + h * row * di;
        if (h < r0 || h >= r1) {
          brgemm_zero(out, row, di);
          continue;
        }
        brgemm_zero(out, left * bc, di);
        if (nc < bc)
          for (int64_t a = left; a < left + W; ++a) brgemm_zero(out + (a * bc + nc) * di, bc - nc, di);
        brgemm_zero(out + (left + W) * bc * di, (Wp - left - W) * bc, di);
      }
      for (int64_t c0 = 0; c0 < nc; c0 += GROUP)
        for (int64_t h = r0; h < r1; ++h)
          brgemm_window((const char*)src + (n * sn + (cb * bc + c0) * sc + (h - top) * sh) * si, sw,
                        sc, si, plane + ((h * Wp + left) * bc + c0) * di, bc, di, W,
                        brgemm_min64(GROUP, nc - c0));
    }
    return BRGEMM_OK;
  }
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t t = 0; t < N * Cb * Hp; ++t) { /* one padded row of one channel block */
    const int64_t n = t / (Cb * Hp), cb = t / Hp % Cb, h = t % Hp, hs = h - top;
    char* out = (char*)dst + t * row * di;
    if (hs < 0 || hs >= H) {
      brgemm_zero(out, row, di);
      continue;
    }
    const int64_t nc = brgemm_min64(bc, C - cb * bc);
    const char* in = (const char*)src + (n * sn + cb * bc * sc + hs * sh) * si;
    for (int64_t p = 0; p < phases; ++p) { /* [phases][bc][Wd]: padded column j * phases + p */
      char* sub = out + p * bc * Wd * di;
      const int64_t j0 = left > p ? (left - p + phases - 1) / phases : 0;
      const int64_t last = left + W - 1 - p;
      const int64_t j1 = last < 0 ? j0 : brgemm_min64(Wd, last / phases + 1);
      const int64_t nj = j1 > j0 ? j1 - j0 : 0;
      if (nj)
        brgemm_window(in + (j0 * phases + p - left) * sw * si, sc, phases * sw, si,
                      sub + j0 * di, Wd, di, nc, nj);
      for (int64_t c = 0; c < nc; ++c) {
        brgemm_zero(sub + c * Wd * di, nj ? j0 : Wd, di);
        if (nj) brgemm_zero(sub + (c * Wd + j1) * di, Wd - j1, di);
      }
      brgemm_zero(sub + nc * Wd * di, (bc - nc) * Wd, di);
    }
  }
  return BRGEMM_OK;
}

int brgemm_cpu_blocks_to_image(const void* src, int64_t N, int64_t C, int64_t H, int64_t W,
                               int64_t bc, int64_t Hp, int64_t Wp, int64_t top, int64_t left,
                               int src_itemsize, void* dst, int dst_itemsize, int threads) {
  const int si = src_itemsize, di = dst_itemsize;
  if (!src || !dst || N < 1 || C < 1 || H < 1 || W < 1 || bc < 1 || top < 0 || left < 0 ||
      Hp < top + H || Wp < left + W || !brgemm_sizes_ok(si, di))
    return BRGEMM_EINVAL;
  const int64_t Cb = (C + bc - 1) / bc;
  const int nt = brgemm_cpu_plan_threads(threads);
  if (Hp == H && Wp == W) { /* no border: pixel chunks of one long window, as above */
    const int64_t HW = H * W, chunks = (HW + PIXELS - 1) / PIXELS;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t t = 0; t < N * Cb * chunks; ++t) {
      const int64_t n = t / (Cb * chunks), cb = t / chunks % Cb, a0 = t % chunks * PIXELS;
      const int64_t nc = brgemm_min64(bc, C - cb * bc), na = brgemm_min64(PIXELS, HW - a0);
      brgemm_window((const char*)src + ((n * Cb + cb) * HW + a0) * bc * si, 1, bc, si,
                    (char*)dst + ((n * C + cb * bc) * HW + a0) * di, HW, di, nc, na);
    }
    return BRGEMM_OK;
  }
  if (W < SHORT_ROW) { /* the rows gathered into one plane, then one long transpose */
    const int64_t HW = H * W;
    int err = BRGEMM_OK;
#pragma omp parallel num_threads(nt)
    {
      char* tmp = malloc((size_t)(HW * bc * si));
      if (!tmp) {
#pragma omp atomic write
        err = BRGEMM_ENOMEM;
      }
#pragma omp for schedule(static)
      for (int64_t t = 0; t < N * Cb; ++t) {
        if (!tmp) continue;
        const int64_t n = t / Cb, cb = t % Cb, nc = brgemm_min64(bc, C - cb * bc);
        const char* plane = (const char*)src + t * Hp * Wp * bc * si;
        for (int64_t h = 0; h < H; ++h)
          memcpy(tmp + h * W * bc * si, plane + ((h + top) * Wp + left) * bc * si,
                 (size_t)(W * bc * si));
        brgemm_window(tmp, 1, bc, si, (char*)dst + (n * C + cb * bc) * HW * di, HW, di, nc, HW);
      }
      free(tmp);
    }
    return err;
  }
  const int64_t chunks = plane_chunks(N * Cb, H, nt), span = (H + chunks - 1) / chunks;
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int64_t t = 0; t < N * Cb * chunks; ++t) { /* rows [h0, h1) of a channel block */
    const int64_t n = t / (Cb * chunks), cb = t / chunks % Cb, nc = brgemm_min64(bc, C - cb * bc);
    const int64_t h0 = t % chunks * span, h1 = brgemm_min64(H, h0 + span);
    for (int64_t c0 = 0; c0 < nc; c0 += GROUP) /* GROUP channels' rows written side by side */
      for (int64_t h = h0; h < h1; ++h)
        brgemm_window((const char*)src +
                          ((((n * Cb + cb) * Hp + h + top) * Wp + left) * bc + c0) * si,
                      1, bc, si, (char*)dst + (((n * C + cb * bc + c0) * H + h) * W) * di, H * W,
                      di, brgemm_min64(GROUP, nc - c0), W);
  }
  return BRGEMM_OK;
}

int brgemm_cpu_image_to_planes(const void* src, int64_t N, int64_t C, int64_t H, int64_t W,
                               const int64_t* strides, int src_itemsize, int64_t bc, int64_t top,
                               int64_t left, int64_t sh, int64_t sw, int64_t Hs, int64_t Ws,
                               int64_t L, void* dst, int dst_itemsize, int threads) {
  const int si = src_itemsize, di = dst_itemsize;
  if (!src || !dst || !strides || N < 1 || C < 1 || H < 1 || W < 1 || bc < 1 || top < 0 ||
      left < 0 || sh < 1 || sw < 1 || Hs < 1 || Ws < 1 || Hs * sh < top + H ||
      Ws * sw < left + W || L < Hs * Ws || !brgemm_sizes_ok(si, di))
    return BRGEMM_EINVAL;
  for (int i = 0; i < 4; ++i)
    if (strides[i] < 0) return BRGEMM_EINVAL;
  const int64_t sn = strides[0], sc = strides[1], srow = strides[2], scol = strides[3];
  const int64_t Cb = (C + bc - 1) / bc, planes = N * Cb * sh * sw * bc;
#pragma omp parallel for schedule(static) num_threads(brgemm_cpu_plan_threads(threads))
  for (int64_t t = 0; t < planes; ++t) { /* one channel's plane of one phase */
    const int64_t c = t % bc, b = t / bc % sw, a = t / (bc * sw) % sh, cb = t / (bc * sw * sh) % Cb;
    const int64_t n = t / (bc * sw * sh * Cb), ch = cb * bc + c;
    char* out = (char*)dst + t * L * di;
    if (ch >= C) {
      brgemm_zero(out, L, di);
      continue;
    }
    /* columns j whose padded column j * sw + b lies in the image */
    const int64_t j0 = left > b ? (left - b + sw - 1) / sw : 0;
    const int64_t j1 = left + W - 1 - b < 0 ? j0 : brgemm_min64(Ws, (left + W - 1 - b) / sw + 1);
    const int64_t nj = j1 > j0 ? j1 - j0 : 0;
    for (int64_t i = 0; i < Hs; ++i) {
      char* row = out + i * Ws * di;
      const int64_t h = i * sh + a - top;
      if (h < 0 || h >= H || !nj) {
        brgemm_zero(row, Ws, di);
        continue;
      }
      brgemm_zero(row, j0, di);
      brgemm_window((const char*)src + (n * sn + ch * sc + h * srow + (j0 * sw + b - left) * scol) * si,
                    0, sw * scol, si, row + j0 * di, Ws, di, 1, nj);
      brgemm_zero(row + j1 * di, Ws - j1, di);
    }
    brgemm_zero(out + Hs * Ws * di, L - Hs * Ws, di);
  }
  return BRGEMM_OK;
}

/* zero a rows x width tile's columns from cols on, and its rows from rows on */
static void zero_tile_edges(char* tile, int64_t height, int64_t width, int64_t rows, int64_t cols,
                            int di) {
  if (cols < width)
    for (int64_t i = 0; i < rows; ++i) brgemm_zero(tile + (i * width + cols) * di, width - cols, di);
  brgemm_zero(tile + rows * width * di, (height - rows) * width, di);
}

/* brgemm_taps_transposed for 16-bit elements (bf16 in and out): 8 x 8 blocks in SSE
 * registers, each result row placed in its tap's tile; where de-interleaving
 * the taps and transposing each tap after took two passes */
static void taps_transposed2(const uint16_t* in, int64_t lds, uint16_t* out, int64_t na,
                             int64_t nb, int64_t RS, int64_t bc, int64_t bk) {
  const int64_t na8 = na - na % 8, nb8 = nb - nb % 8;
  for (int64_t b0 = 0; b0 < nb8; b0 += 8) {
    int64_t rs = 0, c = 0; /* of column a: a = c * RS + rs, counted (no divisions) */
    for (int64_t a0 = 0; a0 < na8; a0 += 8) {
      __m128i o[8];
      if (b0 + 8 < nb8 && a0 % 32 == 0) /* the next eight rows' lines, a pass ahead */
        for (int k = 8; k < 16; ++k)
          _mm_prefetch((const char*)(in + (b0 + k) * lds + a0), _MM_HINT_T0);
      brgemm_transpose8x8_u16(in + b0 * lds + a0, lds, o);
      for (int k = 0; k < 8; ++k) {
        _mm_storeu_si128((__m128i*)(out + (rs * bc + c) * bk + b0), o[k]);
        if (++rs == RS) rs = 0, ++c;
      }
    }
  }
  for (int64_t a = 0; a < na; ++a) { /* the edges: scalar */
    uint16_t* row = out + ((a % RS) * bc + a / RS) * bk;
    for (int64_t b = a < na8 ? nb8 : 0; b < nb; ++b) row[b] = in[b * lds + a];
  }
}

/* Where a layer's (kb, cb) pairs are fewer than the threads (64-channel
 * layers have one), the weight copies split each pair's k and c ranges into
 * parts of kp and cp, multiples of 16 (whole lines of the tiles), k first,
 * so that every thread has a part; else kp = bk and cp = bc. */
static void tile_parts(int64_t pairs, int nt, int64_t bk, int64_t bc, int64_t* kp, int64_t* cp) {
  *kp = bk, *cp = bc;
  if (pairs >= nt) return;
  const int64_t need = (nt + pairs - 1) / pairs;
  const int64_t pk = brgemm_min64((bk + 15) / 16, need);
  *kp = brgemm_min64(bk, ((bk + pk - 1) / pk + 15) / 16 * 16);
  const int64_t got = (bk + *kp - 1) / *kp, pc = brgemm_min64((bc + 15) / 16, (need + got - 1) / got);
  *cp = brgemm_min64(bc, ((bc + pc - 1) / pc + 15) / 16 * 16);
}

int brgemm_cpu_conv_weights_to_blocks(const void* src, int64_t K, int64_t C, int64_t RS,
                                      int src_itemsize, int64_t bk, int64_t bc, int transposed,
                                      int vnni, void* dst, int dst_itemsize, int threads) {
  const int si = src_itemsize, di = dst_itemsize;
  /* the tiles' rows: bc (w) or bk (wt), paired with vnni */
  const int64_t height = transposed ? bk : bc, width = transposed ? bc : bk;
  if (!src || !dst || K < 1 || C < 1 || RS < 1 || bk < 1 || bc < 1 || !brgemm_sizes_ok(si, di) ||
      (vnni && (di != 2 || height % 2)))
    return BRGEMM_EINVAL;
  const int64_t Kb = (K + bk - 1) / bk, Cb = (C + bc - 1) / bc, tile = bk * bc;
  const int nt = brgemm_cpu_plan_threads(threads);
  /* brgemm_taps_transposed (f32, AVX2) or taps_transposed2 (bf16) */
  const int one_pass = si == di && (si == 2 || brgemm_layout_avx2());
  const int staged = !transposed && RS > 1 && !one_pass;
  int64_t kp = bk, cp = bc; /* with vnni, whole (kb, cb) pairs: their tiles are paired after */
  if (!staged && !vnni) tile_parts(Kb * Cb, nt, bk, bc, &kp, &cp);
  const int64_t parts_k = (bk + kp - 1) / kp, parts = parts_k * ((bc + cp - 1) / cp);
  int err = BRGEMM_OK;
#pragma omp parallel num_threads(nt)
  {
    /* [bk][RS][bc]: one (kb, cb)'s rows with taps outermost, for w's transposes */
    char* tmp = staged ? malloc((size_t)(bk * RS * bc * si)) : NULL;
    /* vnni: the pair's RS tiles, plain, before their rows are paired into dst */
    uint16_t* plain = vnni ? malloc((size_t)(RS * tile) * sizeof(uint16_t)) : NULL;
    if ((staged && !tmp) || (vnni && !plain)) {
#pragma omp atomic write
      err = BRGEMM_ENOMEM;
    }
#pragma omp for schedule(static)
    for (int64_t t = 0; t < Kb * Cb * parts; ++t) {
      /* rows k0..k1 and columns c0..c1 of the RS tiles of one (kb, cb):
       * w [Kb][Cb][RS][bc][bk], wt [Cb][Kb][RS][bk][bc] */
      const int64_t o = t / parts, k0 = t % parts % parts_k * kp, c0 = t % parts / parts_k * cp;
      const int64_t kb = transposed ? o % Kb : o / Cb, cb = transposed ? o / Kb : o % Cb;
      const int64_t nk = brgemm_min64(bk, K - kb * bk), nc = brgemm_min64(bc, C - cb * bc);
      const int64_t k1 = brgemm_min64(nk, k0 + kp), c1 = brgemm_min64(nc, c0 + cp);
      const char* in = (const char*)src + (kb * bk * C + cb * bc) * RS * si; /* w[k][c][rs] rows */
      if ((staged && !tmp) || (vnni && !plain)) continue;
      char* out = vnni ? (char*)plain : (char*)dst + o * RS * tile * di;
      if (k0 < k1 && c0 < c1) {
        if (transposed) { /* out[rs][k][c] = w[k][c][rs]: each row's taps de-interleaved */
          for (int64_t k = k0; k < k1; ++k)
            brgemm_window(in + (k * C * RS + c0 * RS) * si, 1, RS, si, out + (k * bc + c0) * di,
                          tile, di, RS, c1 - c0);
        } else if (RS == 1) { /* out[c][k] = w[k][c] */
          brgemm_window(in + (k0 * C + c0) * si, 1, C, si, out + (c0 * bk + k0) * di, bk, di,
                        c1 - c0, k1 - k0);
        } else if (one_pass && si == 4) { /* out[rs][c][k] = w[k][c * RS + rs] */
          brgemm_taps_transposed((const float*)in + k0 * C * RS + c0 * RS, C * RS,
                                 (float*)out + c0 * bk + k0, (c1 - c0) * RS, k1 - k0, RS, tile,
                                 bk);
        } else if (one_pass) {
          taps_transposed2((const uint16_t*)in + k0 * C * RS + c0 * RS, C * RS,
                           (uint16_t*)out + c0 * bk + k0, (c1 - c0) * RS, k1 - k0, RS, bc, bk);
        } else if (tmp) { /* out[rs][c][k]: taps de-interleaved, then each tap transposed */
          for (int64_t k = 0; k < nk; ++k)
            brgemm_window(in + k * C * RS * si, 1, RS, si, tmp + k * RS * bc * si, bc, si, RS,
                          nc);
          for (int64_t rs = 0; rs < RS; ++rs)
            brgemm_window(tmp + rs * bc * si, 1, RS * bc, si, out + rs * tile * di, bk, di, nc,
                          nk);
        }
      }
      if (k0 == 0 && c0 == 0)
        for (int64_t rs = 0; rs < RS; ++rs)
          zero_tile_edges(out + rs * tile * di, height, width, transposed ? nk : nc,
                          transposed ? nc : nk, di);
      if (vnni) /* each tile's rows 2p and 2p + 1 side by side, from the cache */
        for (int64_t rs = 0; rs < RS; ++rs)
          for (int64_t p = 0; p < height / 2; ++p) {
            const uint16_t* r0 = plain + rs * tile + 2 * p * width;
            brgemm_pair_rows(r0, r0 + width, (uint16_t*)dst + (o * RS + rs) * tile + 2 * p * width,
                             width);
          }
    }
    free(tmp);
    free(plain);
  }
  return err;
}

/* conv_weights_from_blocks' store of one part of c_rows tiles ([RS][bc][bk],
 * RS <= 16 taps): out[k][c][rs] = in[rs tile + c bk + k], 16 k at a time: a
 * tap row of each of the RS tiles (16 k of one c) loaded, the RS x 16 block
 * transposed, each k's RS taps stored as one run, f32 or (bf16) rounded.
 * Element by element, each element came from a new line (the tiles' c rows
 * lie bk apart). f32 walks each k block's c; bf16 each c's k blocks, which
 * reads the tiles front to back (res5a_branch2b's dW from memory, two EPYC
 * threads: 0.65-0.68 against 1.48-1.57 ms; f32 in that order ran 0.82-0.86
 * against 0.28 ms from cache: benchmarks/RESULTS.md, issue 17, nineteenth
 * session). */
/* row c's nk (<= 16) elements from k on of each of the RS tiles, transposed:
 * o[j] holds element k + j of every tap (lanes past RS zero) */
__attribute__((target("avx512f"))) static inline void taps_of_c_row(
    const float* in, int64_t tile, int64_t RS, int64_t bk, int64_t c, int64_t k, int64_t nk,
    __m512 o[16]) {
  const __mmask16 ks = (__mmask16)((1u << nk) - 1u);
  __m512 r[16];
  for (int rs = 0; rs < 16; ++rs)
    r[rs] = rs < RS ? _mm512_maskz_loadu_ps(ks, in + rs * tile + c * bk + k) : _mm512_setzero_ps();
  brgemm_transpose16x16_avx512(r, o);
}

__attribute__((target("avx512f"))) static void taps_from_c_rows_avx512(
    const float* in, int64_t tile, int64_t RS, int64_t bk, int64_t C, int64_t k0, int64_t k1,
    int64_t c0, int64_t c1, void* out, int bf16) {
  const __mmask16 taps = (__mmask16)((1u << RS) - 1u);
  __m512 o[16];
  if (bf16) {
    for (int64_t c = c0; c < c1; ++c)
      for (int64_t k = k0; k < k1; k += 16) {
        const int64_t nk = brgemm_min64(16, k1 - k);
        taps_of_c_row(in, tile, RS, bk, c, k, nk, o);
        for (int64_t j = 0; j < nk; ++j)
          _mm512_mask_cvtepi32_storeu_epi16((uint16_t*)out + ((k + j) * C + c) * RS, taps,
                                            brgemm_round16_avx512(o[j]));
      }
    return;
  }
  for (int64_t k = k0; k < k1; k += 16) {
    const int64_t nk = brgemm_min64(16, k1 - k);
    for (int64_t c = c0; c < c1; ++c) {
      taps_of_c_row(in, tile, RS, bk, c, k, nk, o);
      for (int64_t j = 0; j < nk; ++j)
        _mm512_mask_storeu_ps((float*)out + ((k + j) * C + c) * RS, taps, o[j]);
    }
  }
}

int brgemm_cpu_conv_weights_from_blocks(const float* src, int64_t J, int64_t K, int64_t C,
                                        int64_t RS, int64_t bk, int64_t bc, int c_rows,
                                        void* dst, int dst_itemsize, int threads) {
  const int di = dst_itemsize;
  if (!src || !dst || J < 1 || K < 1 || C < 1 || RS < 1 || bk < 1 || bc < 1 ||
      (di != 2 && di != 4))
    return BRGEMM_EINVAL;
  const int64_t Kb = (K + bk - 1) / bk, Cb = (C + bc - 1) / bc, tile = bk * bc,
                group = RS * tile;
  const int nt = brgemm_cpu_plan_threads(threads);
  int64_t kp, cp;
  tile_parts(Kb * Cb, nt, bk, bc, &kp, &cp);
  const int64_t parts_k = (bk + kp - 1) / kp, parts = parts_k * ((bc + cp - 1) / cp);
  /* element (k, c) of a tap's tile: [bk][bc], or [bc][bk] with c_rows */
  const int64_t sk = c_rows ? 1 : bc, scc = c_rows ? bk : 1;
  int err = BRGEMM_OK;
#pragma omp parallel num_threads(nt)
  {
    float* acc = J > 1 ? malloc((size_t)group * sizeof(float)) : NULL;
    /* bf16 out: one k's (c, rs) run in f32 before it is rounded */
    float* row = di == 2 && RS > 1 ? malloc((size_t)(bc * RS) * sizeof(float)) : NULL;
    if ((J > 1 && !acc) || (di == 2 && RS > 1 && !row)) {
#pragma omp atomic write
      err = BRGEMM_ENOMEM;
    }
#pragma omp for schedule(static)
    for (int64_t t = 0; t < Kb * Cb * parts; ++t) {
      /* rows k0..k1 and columns c0..c1 of the RS tiles of one (kb, cb), shares summed */
      if ((J > 1 && !acc) || (di == 2 && RS > 1 && !row)) continue;
      const int64_t o = t / parts, k0 = t % parts % parts_k * kp, c0 = t % parts / parts_k * cp;
      const int64_t kb = o / Cb, cb = o % Cb, nk = brgemm_min64(bk, K - kb * bk),
                    nc = brgemm_min64(bc, C - cb * bc);
      const int64_t k1 = brgemm_min64(nk, k0 + kp), c1 = brgemm_min64(nc, c0 + cp);
      if (k0 >= k1 || c0 >= c1) continue;
      const float* in = src + o * group;
      if (J > 1) { /* the part's elements of each share, summed into acc at their places */
        int64_t na = c_rows ? c1 - c0 : k1 - k0, nb = c_rows ? k1 - k0 : c1 - c0, taps = RS;
        const int64_t first = k0 * sk + c0 * scc, line = c_rows ? bk : bc;
        if (nb == line) nb *= na, na = 1; /* whole lines: one run a tap */
        if (nb == tile) nb *= RS, taps = 1; /* whole tiles: one run */
        for (int64_t rs = 0; rs < taps; ++rs)
          for (int64_t a = 0; a < na; ++a) {
            const int64_t at = rs * tile + first + a * line;
            float* restrict sum = acc + at;
            memcpy(sum, in + at, (size_t)nb * sizeof(float));
            for (int64_t j = 1; j < J; ++j) {
              const float* restrict share = in + j * Kb * Cb * group + at;
              for (int64_t b = 0; b < nb; ++b) sum[b] += share[b];
            }
          }
        in = acc;
      }
      char* out = (char*)dst + (kb * bk * C + cb * bc) * RS * di;
      if (RS == 1) /* out[k][c] */
        brgemm_window((const char*)(in + k0 * sk + c0 * scc), sk, scc, 4,
                      out + (k0 * C + c0) * di, C, di, k1 - k0, c1 - c0);
      else if (c_rows && RS <= 16 && brgemm_layout_avx512())
        taps_from_c_rows_avx512(in, tile, RS, bk, C, k0, k1, c0, c1, out, di == 2);
      else if (di == 2 && row) /* a row's taps in f32, then rounded as one run (tap by tap,
                                  * the rounding went a few elements at a time) */
        for (int64_t k = k0; k < k1; ++k) {
          brgemm_window((const char*)(in + k * sk + c0 * scc), scc, tile, 4, (char*)row, RS, 4,
                        c1 - c0, RS);
          brgemm_round_row(row, (uint16_t*)(out + (k * C + c0) * RS * di), (c1 - c0) * RS);
        }
      else /* out[k][c][rs] = tile rs's (k, c) */
        for (int64_t k = k0; k < k1; ++k)
          brgemm_window((const char*)(in + k * sk + c0 * scc), scc, tile, 4,
                        out + (k * C + c0) * RS * di, RS, di, c1 - c0, RS);
    }
    free(row);
    free(acc);
  }
  return err;
}

/* image_to_columns' zeros: a run of a few elements (an image's edge column,
 * one per output row on small images) stored inline, not through memset */
static inline void zero_run(char* dst, int64_t n, int size) {
  if (n <= 0) return;
  if (size == 4 && n <= 8) {
    for (int64_t i = 0; i < n; ++i) ((volatile float*)dst)[i] = 0.0f;
    return;
  }
  memset(dst, 0, (size_t)(n * size));
}

/* (c, r, s) -> the next row of the im2col matrix: s fastest, then r, then c */
static inline void next_tap(int64_t* c, int64_t* r, int64_t* s, int64_t R, int64_t S) {
  if (++*s < S) return;
  *s = 0;
  if (++*r < R) return;
  *r = 0;
  ++*c;
}

/* One tile row of columns_avx512: each vector of 16 columns blended from
 * its segments' loads (`at`: the row's tap in xp). checked: a load whose
 * window leaves [0, limit] takes only its run's lanes (masked, so that
 * nothing past x's ends is touched); pairs: stride 2, two loads a segment,
 * their even elements permuted out. Both are constants at each call. */
__attribute__((target("avx512f"), always_inline)) static inline void columns_row(
    const float* xp, int64_t at, const int64_t* off, const uint16_t* lanes,
    const uint16_t* halves, const int64_t* used, int64_t nvec, int64_t NS, int64_t bp,
    int64_t limit, int checked, int pairs, float* row) {
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  for (int64_t v = 0; v < nvec; ++v) {
    __m512 x = _mm512_setzero_ps();
    for (int64_t e = v * NS; e < v * NS + used[v]; ++e) {
      const int64_t from = at + off[e];
      const __mmask16 m = (__mmask16)lanes[e];
      const int inside = !checked || (from >= 0 && from <= limit);
      if (pairs) {
        const __m512 lo = inside ? _mm512_loadu_ps(xp + from)
                                 : _mm512_maskz_loadu_ps(halves[2 * e], xp + from);
        const __m512 hi = inside ? _mm512_loadu_ps(xp + from + 16)
                                 : _mm512_maskz_loadu_ps(halves[2 * e + 1], xp + from + 16);
        x = _mm512_mask_blend_ps(m, x, _mm512_permutex2var_ps(lo, even, hi));
      } else {
        x = inside ? _mm512_mask_blend_ps(m, x, _mm512_loadu_ps(xp + from))
                   : _mm512_mask_loadu_ps(x, m, xp + from);
      }
    }
    if (v * 16 + 16 <= bp)
      _mm512_storeu_ps(row + v * 16, x);
    else
      _mm512_mask_storeu_ps(row + v * 16, (__mmask16)((1u << (bp - v * 16)) - 1u), x);
  }
}

/* image_to_columns' u-th tile in the threads' order, as its place in dst's
 * [Pb][Db] grid: the threads' static shares split the tiles' rows (the
 * reduction), each taking every column block, as conv.columns_shares' plan
 * reads them (by column blocks, one thread got 64 of 98 pixels and the other
 * 34) */
static inline int64_t columns_tile(int64_t u, int64_t Pb, int64_t Db) {
  return u % Pb * Db + u / Pb;
}

/* image_to_columns for f32 with stride 1 or 2 across, with AVX-512: each
 * vector of 16 columns of a tile row blended from one plain 16-float load
 * (stride 2: two, their even elements picked by one permute) per output row
 * (n, p) it crosses. The tile's columns are the same for all its rows,
 * so where each such run ("segment") starts and which lanes it fills are
 * worked out once per tile; a row then costs a few loads and blends and one
 * store per vector. Where the kernel reaches past the image (padding), x is
 * first copied into zero-bordered planes (xp: [N C][Hp][Wp], a margin of one
 * load's floats at each end) and the loads read those; without padding they read x
 * itself, its own strides standing for xp's, and a load whose 16 floats
 * would leave x's extent takes only its run's lanes (a masked load, which
 * does not touch the others: the copy cost 2 / 3 of the whole on 7 x 7
 * images of 1x1 layers). The plain loop made a memcpy and zero runs per
 * output row of 7 or 14 pixels; masked loads for every segment ran 10
 * times slower on some alignments of x (the EPYC). */
__attribute__((target("avx512f"))) static int columns_avx512(
    const float* src, int64_t N, int64_t C, int64_t sn, int64_t sc, int64_t srow, int64_t scol,
    int64_t H, int64_t W, int64_t R, int64_t S, int64_t sh, int64_t sw, int64_t ph, int64_t pw,
    int64_t P, int64_t Q, int64_t bd, int64_t bp, float* dst, int transposed, int threads) {
  const int direct = ph == 0 && pw == 0 && scol == 1;
  const int64_t Hp = (P - 1) * sh + R, Wp = (Q - 1) * sw + S, plane = Hp * Wp;
  const int64_t span = 16 * sw, margin = direct ? 0 : span; /* the floats one load takes */
  /* the strides the loads walk: xp's, or x's own */
  const int64_t ist = direct ? sn : C * plane, cst = direct ? sc : plane, rst = direct ? srow : Wp;
  /* the last element a plain load may start at */
  const int64_t limit = (direct ? (N - 1) * sn + (C - 1) * sc + (H - 1) * srow + W
                                : N * C * plane + 2 * margin) - span;
  const int64_t D = C * R * S, cols = N * P * Q, Db = (D + bd - 1) / bd, Pb = (cols + bp - 1) / bp;
  const int64_t nvec = (bp + 15) / 16, NS = brgemm_min64(16, 1 + (14 + Q) / Q), nseg = nvec * NS;
  float* planes = direct ? NULL : malloc((size_t)(N * C * plane + 2 * margin) * sizeof(float));
  if (!direct && !planes) return BRGEMM_ENOMEM;
  const float* xp = direct ? src : planes;
  const int nt = brgemm_cpu_plan_threads(threads);
  if (!direct) {
    memset(planes, 0, margin * sizeof(float));
    memset(planes + margin + N * C * plane, 0, margin * sizeof(float));
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t o = 0; o < N * C; ++o) { /* plane o = n C + c, its border zero */
      const float* in = src + o / C * sn + o % C * sc;
      float* out = planes + margin + o * plane;
      const int64_t w0 = brgemm_min64(pw, Wp), w1 = brgemm_min64(Wp, pw + W);
      memset(out, 0, (size_t)plane * sizeof(float)); /* one call: a call a row cost more */
      for (int64_t y = ph > 0 ? 0 : -ph; y < H && y + ph < Hp; ++y) {
        const float* from = in + y * srow - pw * scol;
        float* to = out + (y + ph) * Wp;
        if (scol != 1) {
          for (int64_t w = w0; w < w1; ++w) to[w] = from[w * scol];
          continue;
        }
        int64_t w = w0; /* 16 at a time: a scalar loop here cost a fifth of the whole */
        for (; w + 16 <= w1; w += 16) _mm512_storeu_ps(to + w, _mm512_loadu_ps(from + w));
        if (w < w1) { /* the rest */
          const __mmask16 m = (__mmask16)((1u << (w1 - w)) - 1u);
          _mm512_mask_storeu_ps(to + w, m, _mm512_maskz_loadu_ps(m, from + w));
        }
      }
    }
  }
  int err = BRGEMM_OK;
#pragma omp parallel num_threads(nt)
  {
    /* per segment: where lane 0's element lies in xp for tap (0, 0) of channel
     * 0, the lanes it fills and (stride 2) the elements of its two loads
     * those lanes take */
    int64_t* off = malloc((size_t)(nseg + nvec) * sizeof(int64_t) + 3 * nseg * sizeof(uint16_t));
    int64_t* used = off ? off + nseg : NULL; /* segments each vector fills */
    uint16_t* lanes = off ? (uint16_t*)(used + nvec) : NULL;
    uint16_t* halves = off ? lanes + nseg : NULL; /* [nseg][2] */
    float* mine = transposed ? malloc((size_t)(bd * bp) * sizeof(float)) : NULL;
    if (!off || (transposed && !mine)) {
      free(off);
      off = NULL;
#pragma omp atomic write
      err = BRGEMM_ENOMEM;
    }
#pragma omp for schedule(static)
    for (int64_t u = 0; u < Pb * Db; ++u) { /* one bd x bp tile */
      if (!off) continue;
      const int64_t t = columns_tile(u, Pb, Db);
      const int64_t d0 = t % Db * bd, j0 = t / Db * bp;
      const int64_t nd = brgemm_min64(bd, D - d0), nj = brgemm_min64(bp, cols - j0);
      int64_t n = j0 / (P * Q), p = j0 / Q % P, q = j0 % Q;
      for (int64_t v = 0; v < nvec; ++v) {
        used[v] = 0;
        for (int64_t k = 0, l = 0; k < NS; ++k) {
          const int64_t e = v * NS + k, left = brgemm_min64(16 - l, nj - v * 16 - l);
          const int64_t run = left > 0 ? brgemm_min64(Q - q, left) : 0;
          off[e] = run ? margin + n * ist + p * sh * rst + (q - l) * sw : margin; /* in xp */
          lanes[e] = (uint16_t)(((1u << run) - 1u) << l);
          halves[2 * e] = halves[2 * e + 1] = 0;
          for (int64_t j = l; sw == 2 && j < l + run; ++j) /* lane j: element 2 j of the loads */
            halves[2 * e + (j >= 8)] |= (uint16_t)(1u << (2 * j % 16));
          if (run) {
            used[v] = k + 1;
            l += run;
            if ((q += run) == Q) {
              q = 0;
              if (++p == P) p = 0, ++n;
            }
          }
        }
      }
      float* tile = transposed ? mine : dst + t * bd * bp;
      int64_t c = d0 / (R * S), r = d0 / S % R, s = d0 % S;
      /* the loads' kind fixed per call, so that each row's loop is straight code */
      for (int64_t i = 0; i < nd; ++i, next_tap(&c, &r, &s, R, S)) {
        const int64_t at = c * cst + r * rst + s;
        float* row = tile + i * bp;
        if (sw == 2)
          columns_row(xp, at, off, lanes, halves, used, nvec, NS, bp, limit, 1, 1, row);
        else if (direct)
          columns_row(xp, at, off, lanes, halves, used, nvec, NS, bp, limit, 1, 0, row);
        else /* bordered planes: every load inside them */
          columns_row(xp, at, off, lanes, halves, used, nvec, NS, bp, limit, 0, 0, row);
      }
      memset(tile + nd * bp, 0, (size_t)((bd - nd) * bp) * sizeof(float));
      if (transposed) /* tile (d0 / bd, j0 / bp) of the transpose */
        brgemm_transpose4((const uint32_t*)mine, bp,
                          (uint32_t*)(dst + (t % Db * Pb + t / Db) * bd * bp), bd, bp, bd);
    }
    free(off);
    free(mine);
  }
  free(planes);
  return err;
}

int brgemm_cpu_image_to_columns(const void* src, int64_t N, int64_t C, int64_t H, int64_t W,
                                const int64_t* strides, int src_itemsize, int64_t R, int64_t S,
                                int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t P,
                                int64_t Q, int64_t bd, int64_t bp, void* dst, int dst_itemsize,
                                int transposed, int threads) {
  const int si = src_itemsize, di = dst_itemsize;
  if (!src || !dst || !strides || N < 1 || C < 1 || H < 1 || W < 1 || R < 1 || S < 1 ||
      sh < 1 || sw < 1 || ph < 0 || pw < 0 || P < 1 || Q < 1 || bd < 1 || bp < 1 ||
      !brgemm_sizes_ok(si, di))
    return BRGEMM_EINVAL;
  for (int i = 0; i < 4; ++i)
    if (strides[i] < 0) return BRGEMM_EINVAL;
  const int64_t sn = strides[0], sc = strides[1], srow = strides[2], scol = strides[3];
  const int64_t D = C * R * S, cols = N * P * Q, Db = (D + bd - 1) / bd, Pb = (cols + bp - 1) / bp;
  /* stride 1, rows of the plane end to end, as wide as the output (a "same"
   * padded kernel or 1 x 1): an image's output rows read one span of x */
  if (si == 4 && di == 4 && sw <= 2 && brgemm_layout_avx512()) /* conv.columns' case */
    return columns_avx512((const float*)src, N, C, sn, sc, srow, scol, H, W, R, S, sh, sw, ph,
                          pw, P, Q, bd, bp, (float*)dst, transposed, threads);
  const int flat = si == di && sh == 1 && sw == 1 && scol == 1 && srow == W && Q == W;
  int err = BRGEMM_OK;
#pragma omp parallel num_threads(brgemm_cpu_plan_threads(threads))
  {
    char* mine = transposed ? malloc((size_t)(bd * bp * di)) : NULL; /* this thread's tile */
    if (transposed && !mine) {
#pragma omp atomic write
      err = BRGEMM_ENOMEM;
    }
#pragma omp for schedule(static)
    for (int64_t u = 0; u < Pb * Db; ++u) { /* one bd x bp tile */
      if (transposed && !mine) continue;
      const int64_t t = columns_tile(u, Pb, Db);
      const int64_t d0 = t % Db * bd, j0 = t / Db * bp;
      char* tile = transposed ? mine : (char*)dst + t * bd * bp * di;
      const int64_t nd = brgemm_min64(bd, D - d0), nj = brgemm_min64(bp, cols - j0);
      const int64_t n0 = j0 / (P * Q), p0 = j0 / Q % P, q0 = j0 % Q;
      /* row d0's tap (c, r, s), then counted along: a division per row cost as
       * much as copying it */
      int64_t c = d0 / (R * S), r = d0 / S % R, s = d0 % S;
      for (int64_t i = 0; i < nd; ++i, next_tap(&c, &r, &s, R, S)) {
        /* the columns q with q * sw + s - pw inside the image: [lo, hi) */
        const int64_t lo = pw > s ? (pw - s + sw - 1) / sw : 0;
        const int64_t hi = brgemm_min64(Q, W - 1 + pw - s < 0 ? 0 : (W - 1 + pw - s) / sw + 1);
        char* row = tile + i * bp * di;
        /* the tile's columns in runs along one output row (n, p), counted along */
        int64_t n = n0, p = p0, q = q0;
        for (int64_t j = 0; j < nj;) {
          const int64_t run = brgemm_min64(Q - q, nj - j), h = p * sh + r - ph;
          char* out = row + j * di;
          if (flat && h >= 0 && h < H) {
            /* output rows of one image are consecutive source rows: one copy of
             * the span over every following row inside the image, then zeros
             * where a column falls off the image's left or right edge */
            int64_t len = run, pe = p;
            while (j + len < nj && pe + 1 < P && pe + 1 + r - ph < H) {
              len += brgemm_min64(Q, nj - j - len);
              ++pe;
            }
            const int64_t start = h * W + q + s - pw, end = (pe + r - ph + 1) * W;
            /* [e0, e1): the span's elements inside rows h to pe's, the rest zeros */
            const int64_t e0 = brgemm_min64(start < h * W ? h * W - start : 0, len);
            const int64_t e1 = end - start < e0 ? e0 : brgemm_min64(len, end - start);
            zero_run(out, e0, di);
            memcpy(out + e0 * di, (const char*)src + (n * sn + c * sc + start + e0) * si,
                   (size_t)((e1 - e0) * di));
            zero_run(out + e1 * di, len - e1, di);
            for (int64_t at = 0, qs = q; at < len; at += Q - qs, qs = 0) {
              const int64_t qe = brgemm_min64(Q, qs + len - at);
              if (lo > qs) zero_run(out + at * di, brgemm_min64(lo, qe) - qs, di);
              if (hi < qe) zero_run(out + (at + (hi > qs ? hi : qs) - qs) * di,
                                       qe - (hi > qs ? hi : qs), di);
            }
            j += len;
            q = 0;
            p = pe + 1;
            if (p == P) p = 0, ++n;
            continue;
          }
          const int64_t a = brgemm_min64(lo > q ? lo - q : 0, run);
          const int64_t b = h < 0 || h >= H ? a : brgemm_min64(hi > q ? hi - q : 0, run);
          zero_run(out, a, di);
          if (b > a) {
            const char* in = (const char*)src + (n * sn + c * sc + h * srow +
                                                 ((q + a) * sw + s - pw) * scol) * si;
            if (si == di && sw * scol == 1) {
              memcpy(out + a * di, in, (size_t)((b - a) * di));
            } else if (si == 4 && di == 4) {
              const float* f = (const float*)in;
              float* o = (float*)out + a;
              const int64_t step = sw * scol;
              for (int64_t e = 0; e < b - a; ++e) o[e] = f[e * step];
            } else {
              brgemm_window(in, 0, sw * scol, si, out + a * di, run, di, 1, b - a);
            }
          }
          zero_run(out + (b > a ? b : a) * di, run - (b > a ? b : a), di);
          j += run;
          q = 0;
          if (++p == P) p = 0, ++n;
        }
        zero_run(row + nj * di, bp - nj, di);
      }
      zero_run(tile + nd * bp * di, (bd - nd) * bp, di);
      if (transposed) /* tile (d0 / bd, j0 / bp) of the transpose */
        brgemm_window(mine, 1, bp, di, (char*)dst + (t % Db * Pb + t / Db) * bd * bp * di, bd, di,
                      bp, bd);
    }
    free(mine);
  }
  return err;
}

/* pixels ahead whose im2col row columns_to_image_avx512 prefetches */
enum { COL2IM_AHEAD = 4 };

/* columns_to_image with AVX-512: a task's 16 channels of one image summed in
 * a per-thread plane of 16-channel vectors ([Hp][Wp][16], the padded image:
 * taps that land in the padding add there and are dropped), each pixel's
 * taps gathered from its row 16 channels at a time (a gather per tap, then
 * one vector add), the plane's interior transposed into dx after. The plain
 * loop added one element at a time, with a test per tap: res5a_branch2b's
 * whole backward 4.98 -> 4.81 ms (one thread), 2.62 -> 2.50 (two). */
__attribute__((target("avx512f"))) static int columns_to_image_avx512(
    const float* src, int64_t ld, int64_t N, int64_t C, int64_t H, int64_t W, int64_t R,
    int64_t S, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t P, int64_t Q, float* dst,
    int threads) {
  const int64_t RS = R * S, Cg = (C + 15) / 16;
  /* the padded plane: every tap's pixel and every pixel of dx inside it */
  const int64_t Hp = (P - 1) * sh + R > H + ph ? (P - 1) * sh + R : H + ph;
  const int64_t Wp = (Q - 1) * sw + S > W + pw ? (Q - 1) * sw + S : W + pw;
  const __m512i lanes = _mm512_mullo_epi32(
      _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
      _mm512_set1_epi32((int)RS)); /* channel c's tap at c R S */
  int err = BRGEMM_OK;
#pragma omp parallel num_threads(brgemm_cpu_plan_threads(threads))
  {
    float* acc = aligned_alloc(64, (size_t)(Hp * Wp * 16) * sizeof(float));
    if (!acc) {
#pragma omp atomic write
      err = BRGEMM_ENOMEM;
    }
#pragma omp for schedule(static)
    for (int64_t o = 0; o < N * Cg; ++o) {
      if (!acc) continue;
      const int64_t n = o % N, c0 = o / N * 16, nc = brgemm_min64(16, C - c0);
      const __mmask16 m = (__mmask16)((1u << nc) - 1u);
      memset(acc, 0, (size_t)(Hp * Wp * 16) * sizeof(float));
      const float* first = src + n * P * Q * ld + c0 * RS;
      const int64_t bytes = nc * RS * (int64_t)sizeof(float);
      for (int64_t i = 0; i < P * Q && i < COL2IM_AHEAD; ++i)
        brgemm_prefetch_span(first + i * ld, bytes, 0);
      for (int64_t p = 0; p < P; ++p)
        for (int64_t q = 0; q < Q; ++q) {
          const float* row = src + ((n * P + p) * Q + q) * ld + c0 * RS;
          /* the gathers below wait on each row's lines in turn, rows ld
           * apart (pages apart, past the hardware prefetchers): ask for a
           * later pixel's row now */
          if (p * Q + q + COL2IM_AHEAD < P * Q)
            brgemm_prefetch_span(row + COL2IM_AHEAD * ld, bytes, 0);
          float* at = acc + (p * sh * Wp + q * sw) * 16;
          for (int64_t r = 0; r < R; ++r)
            for (int64_t s = 0; s < S; ++s) {
              const __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, lanes,
                                                        row + r * S + s, 4);
              float* a = at + (r * Wp + s) * 16;
              _mm512_store_ps(a, _mm512_add_ps(_mm512_load_ps(a), v));
            }
        }
      for (int64_t h = 0; h < H; ++h) /* [W][16] rows of the interior -> nc planes' rows */
        brgemm_transpose4((const uint32_t*)(acc + ((h + ph) * Wp + pw) * 16), 16,
                          (uint32_t*)(dst + ((n * C + c0) * H + h) * W), H * W, nc, W);
    }
    free(acc);
  }
  return err;
}

int brgemm_cpu_columns_to_image(const float* src, int64_t ld, int64_t N, int64_t C, int64_t H,
                                int64_t W, int64_t R, int64_t S, int64_t sh, int64_t sw,
                                int64_t ph, int64_t pw, int64_t P, int64_t Q, float* dst,
                                int threads) {
  if (!src || !dst || N < 1 || C < 1 || H < 1 || W < 1 || R < 1 || S < 1 || sh < 1 || sw < 1 ||
      ph < 0 || pw < 0 || P < 1 || Q < 1 || ld < C * R * S)
    return BRGEMM_EINVAL;
  /* small images (conv.columns' case): the plane of 16-channel vectors stays
   * in L1/L2 (up to 64 KiB; on 56 x 56 images it ran 6% slower); the lanes'
   * offsets are int32 */
  if (brgemm_layout_avx512() && ((P - 1) * sh + R + ph) * ((Q - 1) * sw + S + pw) <= 1024 &&
      R * S < (1 << 26))
    return columns_to_image_avx512(src, ld, N, C, H, W, R, S, sh, sw, ph, pw, P, Q, dst, threads);
  /* a task: the planes of `group` channels of one image, zeroed, then each
   * pixel's row read once along (group R S contiguous floats) and its taps
   * added where they land in the image; channels outermost, so each thread
   * reads the columns of src a product split by columns left in its cache */
  const int64_t group = 16, Cg = (C + group - 1) / group, RS = R * S;
#pragma omp parallel for schedule(static) num_threads(brgemm_cpu_plan_threads(threads))
  for (int64_t o = 0; o < N * Cg; ++o) {
    const int64_t n = o % N, c0 = o / N * group, nc = brgemm_min64(group, C - c0);
    float* planes = dst + (n * C + c0) * H * W;
    memset(planes, 0, (size_t)(nc * H * W) * sizeof(float));
    for (int64_t p = 0; p < P; ++p)
      for (int64_t q = 0; q < Q; ++q) {
        const float* row = src + ((n * P + p) * Q + q) * ld + c0 * RS;
        for (int64_t r = 0; r < R; ++r) {
          const int64_t h = p * sh + r - ph;
          if (h < 0 || h >= H) continue;
          for (int64_t s = 0; s < S; ++s) {
            const int64_t w = q * sw + s - pw;
            if (w < 0 || w >= W) continue;
            for (int64_t c = 0; c < nc; ++c) planes[(c * H + h) * W + w] += row[c * RS + r * S + s];
          }
        }
      }
  }
  return BRGEMM_OK;
}
