/* The bf16 batch-reduce kernel on AMX tiles (see brgemm_amx.h).
 *
 *   C[m][n] = beta C + alpha sum_i A_i[m][k] @ B_i[k][n]     (f32 accumulation)
 *
 * C is walked in macro blocks of 32 x 32, each held in four 16 x 16 f32 tiles
 * (tmm0..3) for the whole reduction over blocks and k; per k chunk two A tiles
 * (tmm4, 5: 16 rows x kc bf16, read straight from A's rows) and two B tiles
 * (tmm6, 7: kc/2 pair rows x 16 columns of the VNNI-packed B) feed four
 * tdpbf16ps. Edge macro blocks use fewer rows and column bytes, and skip the
 * tiles they do not need: one tile config per (edge in m, edge in n), built
 * when the kernel is created and loaded only when it differs from the loaded
 * one. k runs in chunks kc that divide kp (k rounded up to even, or to 32 when
 * k has no even divisor of at least 16 below 32), so no k remainder exists;
 * A is copied zero-padded only when kp != k.
 *
 * The tiles' loads stream A and B from L2 (an A tile and a B tile per two
 * tdpbf16ps); what L1 can save is the panel two neighbouring macro blocks
 * share. So the macro blocks go in a snake over C (the next one shares its A
 * rows or its B columns with the last), and every other one walks the blocks
 * backwards, starting on the lines its neighbour read last (no gain was
 * measurable on the shared host; cheap, so it stays: benchmarks/RESULTS.md).
 * With B packed ahead, B's tiles load with the T1 hint, which leaves A's
 * lines in L1 for the next macro block along a row of the snake where A's
 * panel fits there (RESULTS.md: 28x64x64 x9).
 *
 * Built twice: as is (AMX, with AVX-512 packing) and with BRGEMM_AMX_MODEL,
 * where the tile instructions are plain C (brgemm_amx_model.h). */
#ifndef BRGEMM_AMX_MODEL
#pragma GCC push_options
#pragma GCC target("amx-tile,amx-bf16,avx512f,avx512bw")
#include <immintrin.h>
#endif

#include <stdlib.h>
#include <string.h>

#include "brgemm_amx.h"
#include "brgemm_cpu_internal.h"

#ifdef BRGEMM_AMX_MODEL
#include "brgemm_amx_model.h"
#define IMPL brgemm_amx_model
#define IMPL_NAME "model"
#else
#define TILE_CONFIG(cfg) _tile_loadconfig(cfg)
#define TILE_RELEASE() _tile_release()
#define TILE_ZERO(t) _tile_zero(t)
#define TILE_LOAD(t, p, stride) _tile_loadd(t, p, stride)
#define TILE_LOAD_T1(t, p, stride) _tile_stream_loadd(t, p, stride)
#define TILE_STORE(t, p, stride) _tile_stored(t, p, stride)
#define TILE_DP(c, a, b) _tile_dpbf16ps(c, a, b)
#define TILE_FAULTS() 0
#define PREFETCH(p) _mm_prefetch((const char*)(p), _MM_HINT_T0)
#define IMPL brgemm_amx_hardware
#define IMPL_NAME "hardware"
#endif

/* GCC's tile intrinsics are asm statements that do not tell the compiler
 * which memory they read or write: order them against plain stores and loads */
#define MEMORY_BARRIER() __asm__ volatile("" ::: "memory")

enum { MB = 32, NB = 32, TILE = 16, KC_MAX = 32, L1_BUDGET = 0, PF_DIST = 0, PIPELINED = 0,
       T1_MODE = 0, B_TILES = 1, KEEP_TILES = 0, GROUP_BYTES = 0, B_MAJOR = 0 };
/* the same two for runs on B packed ahead (Kernel.pack_b): B's tiles load with
 * the T1 hint there (T1_B below), which kept A in L1 for the next macro block
 * on 28x64x64 x9 (62% of the AMX peak against 47%; benchmarks/RESULTS.md) */
enum { L1_BUDGET_PACKED = 0, T1_MODE_PACKED = 2 };
/* runs on B as VNNI pairs in place (the layers' weights, desc.b_vnni), which
 * BRGEMM_AMX_T1_INPLACE sets alone: no hint, since B's T1 hint made the FC
 * layers slower and conv no faster (benchmarks/RESULTS.md, ninth session) */
enum { T1_MODE_INPLACE = 0 };

typedef struct {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} __attribute__((aligned(64))) tile_config;

struct brgemm_amx_kernel {
  tile_config cfg[2][2];  /* [edge in m][edge in n] */
  int64_t m, n, k, kp, kc, lda, ldb, ldc;
  int dtype_c;
  float alpha, beta;
  int direct;  /* f32 C, alpha 1, beta 0 or 1: tiles load and store C itself */
  int b_vnni;  /* B blocks arrive as VNNI pairs in place (desc.b_vnni) */
  int64_t chunk[2];  /* blocks per pass over C's macro blocks [b_packed] */
  int reverse;  /* every other macro block walks the blocks backwards */
  int64_t pf;  /* prefetch the A and B lines this many blocks ahead into L1 (0: none) */
  int pipelined;  /* load the next step's tiles between this step's products */
  int b_major;  /* a step's products B tile by B tile (block_steps) */
  int t1[2];  /* which operand loads with the T1 hint (tileloaddt1) [b_packed]: T1_* below */
  int b_tiles;  /* B packed ahead (pack_b, b_packed runs): each 16-column strip apart */
  int keep;  /* public runs leave the tiles configured (brgemm_amx_finish) */
  int64_t group;  /* blocks per group (grouped below; INT64_MAX: one group) */
  int turn;  /* turns between whole macro blocks tile by tile (turn_by_tile) */
  int64_t pf_turn;  /* grouped: the next visit's first steps prefetched this many steps ahead */
  /* BRGEMM_AMX_SWAP=1 on a kernel whose C splits into two or more whole 16 x 32
   * macro blocks: the ping-pong passes below, pp_chunk blocks each */
  int pingpong;
  int64_t pp_chunk;
  tile_config pp_cfg;
};

/* BRGEMM_AMX_T1: 0 no hints; 1 the operand the next macro block does not share
 * (so the shared one stays in L1 for it); 2 always B; 3 always A; 4 both; 5 an
 * operand that neither the last nor the next macro block shares (the shared
 * one loads into L1 for the next, or from L1 after the last); 6 B, and A where
 * its panel cannot stay in L1 anyway (T1_PANEL). On the Xeon a
 * load with the hint streams from L2 faster than a plain one that misses L1,
 * but reads a line in L1 no faster than from L2 (benchmarks/RESULTS.md, tenth
 * session), so the hint belongs on an operand read once. */
enum { T1_NONE = 0, T1_UNSHARED = 1, T1_B = 2, T1_A = 3, T1_BOTH = 4, T1_REUSE = 5, T1_PANEL = 6 };
/* T1_PANEL hints A where a macro block's A panel (its rows of every block in
 * the pass) is larger than this: it cannot stay in L1 for the next macro block
 * along the snake's row, which is what loading A plainly is for */
enum { A_PANEL_L1 = 32768 };

static int t1_a_panel(const brgemm_amx_kernel* kr, int rows, int64_t blocks) {
  return (int64_t)rows * kr->kp * 2 * blocks > A_PANEL_L1;
}

/* Whether a macro block's A (t1_on_a) or B (t1_on_b) tiles load with the T1
 * hint under mode t1: unshared, whether the caller's order counts the operand
 * as one the next macro block does not share (T1_UNSHARED); next, last:
 * whether the next and the last macro block read it too (T1_REUSE); rows and
 * blocks: the macro block's A panel (T1_PANEL). */
static int t1_on_a(const brgemm_amx_kernel* kr, int t1, int unshared, int next, int last,
                   int rows, int64_t blocks) {
  return t1 == T1_A || t1 == T1_BOTH || (t1 == T1_UNSHARED && unshared) ||
         (t1 == T1_REUSE && !next && !last) || (t1 == T1_PANEL && t1_a_panel(kr, rows, blocks));
}

static int t1_on_b(int t1, int unshared, int next, int last) {
  return t1 == T1_B || t1 == T1_BOTH || t1 == T1_PANEL || (t1 == T1_UNSHARED && unshared) ||
         (t1 == T1_REUSE && !next && !last);
}

/* Where a macro block's two B column tiles start in a B block (bytes) and the
 * bytes between their pair rows: in VNNI rows ([kp/2][ld][2], both tiles in
 * one row) or in our strips of 16 columns ([n/16][kp/2][16][2], each tile's
 * rows back to back: BRGEMM_AMX_BTILES=1) */
typedef struct { int64_t off[2], stride[2]; } b_cols;

/* the config of a macro block of `rows` x `cols` (each in 1..32) */
static void make_config(tile_config* t, int rows, int cols, int kc) {
  memset(t, 0, sizeof(*t));
  t->palette = 1;
  const int r0 = rows < TILE ? rows : TILE, r1 = rows - r0;
  const int c0 = cols < TILE ? cols : TILE, c1 = cols - c0;
  const int rr[4] = {r0, r0, r1, r1}, cc[4] = {c0, c1, c0, c1};
  for (int i = 0; i < 4; ++i)  /* C tiles; an unused one stays unconfigured (0 x 0) */
    if (rr[i] && cc[i]) t->rows[i] = (uint8_t)rr[i], t->colsb[i] = (uint16_t)(cc[i] * 4);
  t->rows[4] = (uint8_t)r0, t->colsb[4] = (uint16_t)(kc * 2);
  if (r1) t->rows[5] = (uint8_t)r1, t->colsb[5] = (uint16_t)(kc * 2);
  t->rows[6] = (uint8_t)(kc / 2), t->colsb[6] = (uint16_t)(c0 * 4);
  if (c1) t->rows[7] = (uint8_t)(kc / 2), t->colsb[7] = (uint16_t)(c1 * 4);
}

/* k chunks: kp itself when it fits a tile, else its largest even divisor up
 * to 32; one below 16 would waste most of each tdpbf16ps, so pad k instead */
static void k_chunks(int64_t k, int64_t* kp_out, int64_t* kc_out) {
  int64_t kp = k + (k & 1), kc = kp;
  if (kp > KC_MAX) {
    for (kc = KC_MAX; kp % kc; kc -= 2) {}
    if (kc < TILE) kp = (k + KC_MAX - 1) / KC_MAX * KC_MAX, kc = KC_MAX;
  }
  *kp_out = kp, *kc_out = kc;
}

static int takes_vnni_b(int64_t k) {
  int64_t kp, kc;
  k_chunks(k, &kp, &kc);
  return kp == k;
}

static brgemm_amx_kernel* create(const brgemm_cpu_desc* d) {
  brgemm_amx_kernel* kr = (brgemm_amx_kernel*)aligned_alloc(64, sizeof(brgemm_amx_kernel));
  if (!kr) return NULL;
  memset(kr, 0, sizeof(*kr));
  kr->m = d->m, kr->n = d->n, kr->k = d->k, kr->lda = d->lda, kr->ldb = d->ldb, kr->ldc = d->ldc;
  kr->dtype_c = d->dtype_c, kr->alpha = d->alpha, kr->beta = d->beta;
  kr->direct = d->dtype_c == BRGEMM_F32 && d->alpha == 1.0f && (d->beta == 0.0f || d->beta == 1.0f);
  int64_t kp, kc;
  k_chunks(d->k, &kp, &kc);
  kr->kp = kp, kr->kc = kc;
  kr->b_vnni = d->b_vnni;
  /* Blocks per pass over C's macro blocks. By default one pass: C stays in
   * its tiles for the whole reduction while the tile loads stream A and B
   * from L2, which the hardware prefetchers keep up with better than passes
   * that store and reload C between chunks of blocks (BRGEMM_AMX_L1: bytes of
   * A and B per pass) or software prefetches (BRGEMM_AMX_PF: blocks ahead)
   * did where we measured (benchmarks/RESULTS.md). Both stay as tunables,
   * as does BRGEMM_AMX_REVERSE=0 (every macro block walks forwards). */
  const char* budget = getenv("BRGEMM_AMX_L1");
  const int64_t per_block = (d->m * kp + kp * d->n) * 2;
  for (int packed = 0; packed < 2; ++packed) {
    const int64_t l1 = budget ? atol(budget) : packed ? L1_BUDGET_PACKED : L1_BUDGET;
    kr->chunk[packed] = l1 > 0 && per_block < l1 ? l1 / per_block : l1 > 0 ? 1 : INT64_MAX;
  }
  const char* pf = getenv("BRGEMM_AMX_PF");
  kr->pf = pf ? atol(pf) : PF_DIST;
  if (kr->pf < 0) kr->pf = 0;
  const char* rev = getenv("BRGEMM_AMX_REVERSE");
  kr->reverse = rev ? atoi(rev) != 0 : 1;
  /* BRGEMM_AMX_PIPE=1: each step's tiles loaded by the step before
   * (pipelined_steps; no prefetches there). Measured no faster than each
   * step loading its own (benchmarks/RESULTS.md), so off by default. */
  const char* pipe = getenv("BRGEMM_AMX_PIPE");
  kr->pipelined = (pipe ? atoi(pipe) != 0 : PIPELINED) && kr->pf == 0;
  /* BRGEMM_AMX_ORDER=1: each step's products B tile by B tile (block_steps) */
  const char* order = getenv("BRGEMM_AMX_ORDER");
  kr->b_major = order ? atoi(order) == 1 : B_MAJOR;
  /* BRGEMM_AMX_T1, BRGEMM_AMX_BTILES, BRGEMM_AMX_KEEP: load hints, B packed
   * ahead in strips (the default), tiles kept between calls (no faster:
   * benchmarks/RESULTS.md, benchmarks/amx_profile.py) */
  const char *t1 = getenv("BRGEMM_AMX_T1"), *t1_inplace = getenv("BRGEMM_AMX_T1_INPLACE");
  for (int packed = 0; packed < 2; ++packed) {
    const int inplace = !packed && d->b_vnni;
    kr->t1[packed] = inplace && t1_inplace ? atoi(t1_inplace)
                     : t1                  ? atoi(t1)
                     : packed              ? T1_MODE_PACKED
                     : inplace             ? T1_MODE_INPLACE
                                           : T1_MODE;
    if (kr->t1[packed] < T1_NONE || kr->t1[packed] > T1_PANEL) kr->t1[packed] = T1_NONE;
  }
  const char* bt = getenv("BRGEMM_AMX_BTILES");
  kr->b_tiles = bt ? atoi(bt) != 0 : B_TILES;
  const char* keep = getenv("BRGEMM_AMX_KEEP");
  kr->keep = keep ? atoi(keep) != 0 : KEEP_TILES;
  const int last_rows = (int)(d->m % MB ? d->m % MB : MB), last_cols = (int)(d->n % NB ? d->n % NB : NB);
  for (int em = 0; em < 2; ++em)
    for (int en = 0; en < 2; ++en)
      make_config(&kr->cfg[em][en], em ? last_rows : MB, en ? last_cols : NB, (int)kc);
  /* BRGEMM_AMX_GROUP: bytes of A and B per group of blocks (grouped; 0: one
   * group), BRGEMM_AMX_TURN=1: turns between macro blocks tile by tile,
   * BRGEMM_AMX_PFTURN: the next macro block's first steps prefetched. Groups
   * small enough for L1 and the prefetches lost on the Xeon, the turns tied
   * (benchmarks/RESULTS.md, tenth session): all off. */
  const char* group = getenv("BRGEMM_AMX_GROUP");
  const int64_t group_bytes = group ? atol(group) : GROUP_BYTES;
  kr->group = group_bytes <= 0 ? INT64_MAX : group_bytes > per_block ? group_bytes / per_block : 1;
  const char* turn = getenv("BRGEMM_AMX_TURN");
  kr->turn = turn && atoi(turn) != 0;
  const char* pf_turn = getenv("BRGEMM_AMX_PFTURN");
  kr->pf_turn = pf_turn && atol(pf_turn) > 0 ? atol(pf_turn) : 0;
  const char* swap = getenv("BRGEMM_AMX_SWAP");
  kr->pingpong = swap && atoi(swap) != 0 && d->m % TILE == 0 && d->n % NB == 0 &&
                 d->m / TILE * (d->n / NB) >= 2;
  /* its passes: BRGEMM_AMX_L1's bytes of A and B, else 64 KiB (B's share stays
   * in L1 while every row of macro blocks passes over it) */
  const int64_t pp_budget = budget ? atol(budget) : 65536;
  kr->pp_chunk = pp_budget > per_block ? pp_budget / per_block : 1;
  make_config(&kr->pp_cfg, TILE, NB, (int)kc);  /* tiles 0-3 whole, 4 A, 6-7 B */
  kr->pp_cfg.rows[2] = kr->pp_cfg.rows[3] = TILE, kr->pp_cfg.colsb[2] = kr->pp_cfg.colsb[3] = 64;
  return kr;
}

static void destroy(brgemm_amx_kernel* kr) { free(kr); }

static int64_t packed_b_elems(const brgemm_amx_kernel* kr) { return kr->kp * kr->n; }

/* ---- packing ---- */

/* two rows (either may be NULL = zeros) of n bf16 -> n pairs */
#ifdef BRGEMM_AMX_MODEL
static void interleave(const uint16_t* r0, const uint16_t* r1, int64_t n, uint16_t* dst) {
  for (int64_t j = 0; j < n; ++j) {
    dst[2 * j] = r0 ? r0[j] : 0;
    dst[2 * j + 1] = r1 ? r1[j] : 0;
  }
}
#else
static void interleave(const uint16_t* r0, const uint16_t* r1, int64_t n, uint16_t* dst) {
  /* 32 columns per step: lo takes pairs 0..15, hi pairs 16..31 */
  static const uint16_t lo_idx[32] = {0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39,
                                      8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  static const uint16_t hi_idx[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
                                      24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
  const __m512i lo = _mm512_loadu_si512(lo_idx), hi = _mm512_loadu_si512(hi_idx);
  for (int64_t j = 0; j < n; j += 32) {
    const int64_t left = n - j < 32 ? n - j : 32;
    const __mmask32 in = (__mmask32)(left == 32 ? ~0u : (1u << left) - 1);
    const __m512i x0 = r0 ? _mm512_maskz_loadu_epi16(in, r0 + j) : _mm512_setzero_si512();
    const __m512i x1 = r1 ? _mm512_maskz_loadu_epi16(in, r1 + j) : _mm512_setzero_si512();
    const int64_t out = 2 * left;  /* elements written: 32 from lo, the rest from hi */
    const __mmask32 m_lo = (__mmask32)(out >= 32 ? ~0u : (1u << out) - 1);
    const __mmask32 m_hi = (__mmask32)(out >= 64 ? ~0u : out <= 32 ? 0u : (1u << (out - 32)) - 1);
    _mm512_mask_storeu_epi16(dst + 2 * j, m_lo, _mm512_permutex2var_epi16(x0, lo, x1));
    if (m_hi) _mm512_mask_storeu_epi16(dst + 2 * j + 32, m_hi, _mm512_permutex2var_epi16(x0, hi, x1));
  }
}
#endif

/* k x n bf16 block (row stride ldb) -> [kp/2][n][2], zero rows from k on; in
 * strips, the same per strip of 16 columns (the last one narrower), strips
 * back to back: [n/16][kp/2][16][2], so that each B tile is 1 KiB in a row */
static void pack_b_as(const brgemm_amx_kernel* kr, const void* b, int64_t ldb, void* out,
                      int strips) {
  const uint16_t* src = (const uint16_t*)b;
  uint16_t* dst = (uint16_t*)out;
  const int64_t strip = strips ? TILE : kr->n;
  for (int64_t j = 0; j < kr->n; j += strip) {
    const int64_t w = kr->n - j < strip ? kr->n - j : strip;
    for (int64_t p = 0; p < kr->kp / 2; ++p) {
      const int64_t r = 2 * p;
      interleave(r < kr->k ? src + r * ldb + j : NULL,
                 r + 1 < kr->k ? src + (r + 1) * ldb + j : NULL, w, dst + j * kr->kp + p * w * 2);
    }
  }
}

/* B packed ahead of runs that say b_packed: in strips with b_tiles (packing per
 * call keeps VNNI rows, whose packing is faster) */
static void pack_b(const brgemm_amx_kernel* kr, const void* b, int64_t ldb, void* out) {
  pack_b_as(kr, b, ldb, out, kr->b_tiles);
}

/* the B tiles of the macro block at column j0: in VNNI rows sb bytes apart, or
 * in our strips */
static b_cols b_columns(const brgemm_amx_kernel* kr, int64_t j0, int64_t sb, int strips) {
  b_cols bc;
  for (int t = 0; t < 2; ++t) {
    const int64_t j = j0 + t * TILE, w = kr->n - j < TILE ? kr->n - j : TILE;
    bc.off[t] = strips ? j * kr->kp * 2 : j * 4;
    bc.stride[t] = strips ? w * 4 : sb;
  }
  return bc;
}

/* m x k block (row stride lda) -> m x kp, zero columns from k on */
static void pad_a(const brgemm_amx_kernel* kr, const uint16_t* a, uint16_t* dst) {
  for (int64_t i = 0; i < kr->m; ++i) {
    memcpy(dst + i * kr->kp, a + i * kr->lda, (size_t)kr->k * 2);
    memset(dst + i * kr->kp + kr->k, 0, (size_t)(kr->kp - kr->k) * 2);
  }
}

/* ---- tiles ---- */

/* this thread's loaded config (a copy: kernels come and go), valid while loaded */
static __thread tile_config loaded;
static __thread int tiles_loaded;

static void use_config(const tile_config* cfg) {
  if (tiles_loaded && !memcmp(&loaded, cfg, sizeof(loaded))) return;
  TILE_CONFIG(cfg);
  loaded = *cfg;
  tiles_loaded = 1;
}

static void release(void) {
  if (!tiles_loaded) return;
  TILE_RELEASE();
  tiles_loaded = 0;
}

/* After a public run: release the tiles, or with keep (BRGEMM_AMX_KEEP=1)
 * leave them configured but load the config again on the next run, since
 * other code (oneDNN in PyTorch, say) may load its own in between. */
static void finish(const brgemm_amx_kernel* kr) {
  if (kr->keep)
    tiles_loaded = 0;
  else
    release();
}

static int64_t faults(void) { return TILE_FAULTS(); }

/* a tile load, with the T1 hint when t1 (tile numbers must be constants) */
#define LOAD(t1, t, p, stride)                 \
  do {                                         \
    if (t1)                                    \
      TILE_LOAD_T1(t, p, stride);              \
    else                                       \
      TILE_LOAD(t, p, stride);                 \
  } while (0)

/* What one macro block reads: A rows (stride sa bytes) from row i0, B tiles
 * where bc says, and which operand loads with the T1 hint. */
typedef struct {
  const uint16_t* const* a;
  const uint16_t* const* b;
  int64_t sa, count, nk, i0;
  b_cols bc;
  int two_rows, two_cols, back, t1a, t1b;
} operands;

/* A macro block's steps (block i, k chunk kk: four products), with each tile
 * loaded for the next step right after this step's last product that reads
 * it, so that each load has one or two products ahead of it (BRGEMM_AMX_PIPE=1).
 * If the tile unit waited for a step's own loads before its first product,
 * this would hide them; on the Xeon it ran no faster (benchmarks/RESULTS.md). */
static void pipelined_steps(const brgemm_amx_kernel* kr, const operands* o) {
  int64_t ii = 0, q = 0;
  const int64_t count = o->count, nk = o->nk, sa = o->sa, sb0 = o->bc.stride[0], sb1 = o->bc.stride[1];
  const int two_rows = o->two_rows, two_cols = o->two_cols, ta = o->t1a, tb = o->t1b;
#define STEP_AT(ai, b0, b1)                                                    \
  do {                                                                         \
    const int64_t i_ = o->back ? count - 1 - ii : ii;                          \
    const int64_t kk_ = (o->back ? nk - 1 - q : q) * kr->kc;                   \
    ai = (const char*)o->a[i_] + o->i0 * sa + kk_ * 2;                         \
    b0 = (const char*)o->b[i_] + o->bc.off[0] + kk_ / 2 * sb0;                 \
    b1 = (const char*)o->b[i_] + o->bc.off[1] + kk_ / 2 * sb1;                 \
  } while (0)
  const char *ai, *b0, *b1;
  STEP_AT(ai, b0, b1);
  LOAD(ta, 4, ai, sa);
  LOAD(tb, 6, b0, sb0);
  if (two_cols) LOAD(tb, 7, b1, sb1);
  if (two_rows) LOAD(ta, 5, ai + TILE * sa, sa);
  for (int64_t left = count * nk - 1; left >= 0; --left) {
    if (left) {
      if (++q == nk) q = 0, ++ii;
      STEP_AT(ai, b0, b1);
    }
    TILE_DP(0, 4, 6);
    if (two_cols) TILE_DP(1, 4, 7);
    if (left) LOAD(ta, 4, ai, sa);
    if (two_rows) TILE_DP(2, 5, 6);
    if (left) LOAD(tb, 6, b0, sb0);
    if (two_rows && two_cols) TILE_DP(3, 5, 7);
    if (left && two_cols) LOAD(tb, 7, b1, sb1);
    if (left && two_rows) LOAD(ta, 5, ai + TILE * sa, sa);
  }
#undef STEP_AT
}

/* A macro block's C tiles from acc (row stride sacc bytes) at cb, or zeros */
static void c_begin(const operands* o, const char* cb, int64_t sacc, int load) {
  const int two_rows = o->two_rows, two_cols = o->two_cols;
  if (load) {
    TILE_LOAD(0, cb, sacc);
    if (two_cols) TILE_LOAD(1, cb + TILE * 4, sacc);
    if (two_rows) TILE_LOAD(2, cb + TILE * sacc, sacc);
    if (two_rows && two_cols) TILE_LOAD(3, cb + TILE * sacc + TILE * 4, sacc);
  } else {
    TILE_ZERO(0);
    if (two_cols) TILE_ZERO(1);
    if (two_rows) TILE_ZERO(2);
    if (two_rows && two_cols) TILE_ZERO(3);
  }
}

/* ... and back to acc */
static void c_end(const operands* o, char* cb, int64_t sacc) {
  const int two_rows = o->two_rows, two_cols = o->two_cols;
  TILE_STORE(0, cb, sacc);
  if (two_cols) TILE_STORE(1, cb + TILE * 4, sacc);
  if (two_rows) TILE_STORE(2, cb + TILE * sacc, sacc);
  if (two_rows && two_cols) TILE_STORE(3, cb + TILE * sacc + TILE * 4, sacc);
}

/* The lines that o's step on block i, k chunk kk reads (its A rows and B's
 * pair rows: one line each, a k chunk being at most 64 bytes) into L1 */
static void prefetch_step(const brgemm_amx_kernel* kr, const operands* o, int64_t i, int64_t kk) {
  const char* an = (const char*)o->a[i] + o->i0 * o->sa + kk * 2;
  for (int r = 0; r < (o->two_rows ? 2 : 1) * TILE; ++r) PREFETCH(an + r * o->sa);
  for (int t = 0; t < (o->two_cols ? 2 : 1); ++t) {
    const char* bn = (const char*)o->b[i] + o->bc.off[t] + kk / 2 * o->bc.stride[t];
    for (int64_t p = 0; p < kr->kc / 2; ++p) PREFETCH(bn + p * o->bc.stride[t]);
  }
}

/* A macro block's steps `first` (0, or 1 after turn_by_tile ran its first
 * step) to `end` (at most count * nk): block by block, k chunk by k chunk,
 * four products each */
static void block_steps(const brgemm_amx_kernel* kr, const operands* o, int64_t first,
                        int64_t end) {
  const int two_rows = o->two_rows, two_cols = o->two_cols, ta = o->t1a, tb = o->t1b;
  /* back: blocks and k chunks in reverse, so that this macro block starts on
   * the lines the last one read last, which L1 still holds */
  const int64_t pf = o->back ? -kr->pf : kr->pf, nk = o->nk, count = o->count, sa = o->sa;
  const int64_t sb0 = o->bc.stride[0], sb1 = o->bc.stride[1];
  if (kr->pipelined && first == 0 && end == count * nk) {
    pipelined_steps(kr, o);
    return;
  }
  for (int64_t ii = first / nk; ii * nk < end; ++ii) {
    const int64_t i = o->back ? count - 1 - ii : ii;
    const char* ai = (const char*)o->a[i] + o->i0 * sa;
    const char* b0 = (const char*)o->b[i] + o->bc.off[0];
    const char* b1 = (const char*)o->b[i] + o->bc.off[1];
    /* software prefetches (off by default): a later block's lines of this
     * macro block, one k chunk's share at each step */
    const int ahead = pf && i + pf >= 0 && i + pf < count;
    const int64_t q_end = end - ii * nk < nk ? end - ii * nk : nk;
    for (int64_t q = ii == first / nk ? first % nk : 0; q < q_end; ++q) {
      const int64_t kk = (o->back ? nk - 1 - q : q) * kr->kc;
      if (ahead) prefetch_step(kr, o, i + pf, kk);
      LOAD(ta, 4, ai + kk * 2, sa);
      LOAD(tb, 6, b0 + kk / 2 * sb0, sb0);
      TILE_DP(0, 4, 6);
      if (kr->b_major) {
        /* B tile by B tile: a B tile's last product comes two products before
         * the next step's first one on its register, an A tile's one product
         * before (A by A, below: the other way round), so that the operand
         * whose loads take longer (B from L2 with the T1 hint, while A's come
         * from L1) has the longer time between */
        if (two_rows) {
          LOAD(ta, 5, ai + TILE * sa + kk * 2, sa);
          TILE_DP(2, 5, 6);
        }
        if (two_cols) {
          LOAD(tb, 7, b1 + kk / 2 * sb1, sb1);
          TILE_DP(1, 4, 7);
          if (two_rows) TILE_DP(3, 5, 7);
        }
        continue;
      }
      if (two_cols) {
        LOAD(tb, 7, b1 + kk / 2 * sb1, sb1);
        TILE_DP(1, 4, 7);
      }
      if (two_rows) {
        LOAD(ta, 5, ai + TILE * sa + kk * 2, sa);
        TILE_DP(2, 5, 6);
        if (two_cols) TILE_DP(3, 5, 7);
      }
    }
  }
}

/* One macro block: rows x cols of the f32 accumulator acc (row stride sacc
 * bytes) at (i0, j0) += the blocks' products; `load` reads acc first, else
 * starts from zero. */
static void macro_block(const brgemm_amx_kernel* kr, const operands* o, float* acc, int64_t sacc,
                        int load, int64_t j0) {
  char* cb = (char*)acc + o->i0 * sacc + j0 * 4;
  c_begin(o, cb, sacc, load);
  block_steps(kr, o, 0, o->count * o->nk);
  c_end(o, cb, sacc);
}

/* The turn from one whole 2x2 macro block to the next (o, same config) tile by
 * tile (BRGEMM_AMX_TURN=1): each old C tile stored, the new one loaded (or
 * zeroed) and the new macro block's first product on it issued before the next
 * old tile is stored, so that the stores and loads can overlap products */
static void turn_by_tile(const brgemm_amx_kernel* kr, const operands* o, char* cb_old, char* cb_new,
                         int64_t sacc, int load) {
  const int64_t i = o->back ? o->count - 1 : 0, kk = (o->back ? o->nk - 1 : 0) * kr->kc;
  const int ta = o->t1a, tb = o->t1b;
  const int64_t sa = o->sa, sb0 = o->bc.stride[0], sb1 = o->bc.stride[1];
  const char* ai = (const char*)o->a[i] + o->i0 * sa + kk * 2;
  const char* b0 = (const char*)o->b[i] + o->bc.off[0] + kk / 2 * sb0;
  const char* b1 = (const char*)o->b[i] + o->bc.off[1] + kk / 2 * sb1;
#define C_IN(t, p)              \
  do {                          \
    if (load)                   \
      TILE_LOAD(t, p, sacc);    \
    else                        \
      TILE_ZERO(t);             \
  } while (0)
  TILE_STORE(0, cb_old, sacc);
  C_IN(0, cb_new);
  LOAD(ta, 4, ai, sa);
  LOAD(tb, 6, b0, sb0);
  TILE_DP(0, 4, 6);
  TILE_STORE(1, cb_old + TILE * 4, sacc);
  C_IN(1, cb_new + TILE * 4);
  LOAD(tb, 7, b1, sb1);
  TILE_DP(1, 4, 7);
  TILE_STORE(2, cb_old + TILE * sacc, sacc);
  C_IN(2, cb_new + TILE * sacc);
  LOAD(ta, 5, ai + TILE * sa, sa);
  TILE_DP(2, 5, 6);
  TILE_STORE(3, cb_old + TILE * sacc + TILE * 4, sacc);
  C_IN(3, cb_new + TILE * sacc + TILE * 4);
  TILE_DP(3, 5, 7);
#undef C_IN
}

/* acc (m x n f32, contiguous) into C with alpha, beta and C's dtype */
static void combine(const brgemm_amx_kernel* kr, const float* acc, void* c) {
  const float alpha = kr->alpha, beta = kr->beta;
  for (int64_t i = 0; i < kr->m; ++i) {
    const float* ti = acc + i * kr->n;
    if (kr->dtype_c == BRGEMM_F32) {
      float* ci = (float*)c + i * kr->ldc;
      if (beta == 0.0f)
        for (int64_t j = 0; j < kr->n; ++j) ci[j] = alpha * ti[j];
      else
        for (int64_t j = 0; j < kr->n; ++j) ci[j] = alpha * ti[j] + beta * ci[j];
    } else {
      uint16_t* ci = (uint16_t*)c + i * kr->ldc;
      for (int64_t j = 0; j < kr->n; ++j)
        ci[j] = brgemm_f32_to_bf16(beta == 0.0f ? alpha * ti[j]
                                                : alpha * ti[j] + beta * brgemm_bf16_to_f32(ci[j]));
    }
  }
}

/* ---- ping-pong passes (BRGEMM_AMX_SWAP=1) ----
 * Macro blocks of 16 x 32 (two C tiles), visited chunk by chunk of blocks (a
 * snake over C in each), with two sets of C tiles in turn (tmm0-1, tmm2-3):
 * while one set accumulates a visit, the other stores the last visit's C and
 * loads (or zeroes) the next one's, so that C goes back to acc between passes
 * without the tile unit waiting on it. A chunk's B is read by every row of
 * macro blocks, from L1 after the first; a row's A by both its column pairs.
 * One A tile (tmm4) and two B tiles (tmm6, 7) per step of two products.
 * Needs whole macro blocks and two of them at least (consecutive visits never
 * meet on one macro block). Slower than the default on the Xeon (1.5 tile
 * loads per product; benchmarks/RESULTS.md), so off. */

typedef struct { int64_t b0, nb, i0, j0; } pp_visit;

static pp_visit pp_at(const brgemm_amx_kernel* kr, int64_t v, int64_t count) {
  const int64_t pairs = kr->n / NB, per = kr->m / TILE * pairs;
  const int64_t c = v / per, r = v % per / pairs, jp = v % per % pairs;
  const pp_visit x = {c * kr->pp_chunk,
                      count - c * kr->pp_chunk < kr->pp_chunk ? count - c * kr->pp_chunk : kr->pp_chunk,
                      r * TILE, ((r & 1) ? pairs - 1 - jp : jp) * NB};
  return x;
}

/* step s of visit x (block b0 + s / nk, k chunk s % nk) into C tiles c0, c1 */
#define PP_STEP(c0, c1, s)                                                                \
  do {                                                                                    \
    const int64_t i_ = x.b0 + (s) / nk, kk_ = (s) % nk * kr->kc;                          \
    TILE_LOAD(4, (const char*)a[i_] + x.i0 * sa + kk_ * 2, sa);                           \
    TILE_LOAD(6, (const char*)b[i_] + bc.off[0] + kk_ / 2 * bc.stride[0], bc.stride[0]);  \
    TILE_DP(c0, 4, 6);                                                                    \
    TILE_LOAD(7, (const char*)b[i_] + bc.off[1] + kk_ / 2 * bc.stride[1], bc.stride[1]);  \
    TILE_DP(c1, 4, 7);                                                                    \
  } while (0)

/* visit x on tiles c0, c1; after its first step, tiles o0, o1 store the last
 * visit's C and take the next visit's */
#define PP_VISIT(c0, c1, o0, o1)                                                          \
  do {                                                                                    \
    PP_STEP(c0, c1, 0);                                                                   \
    if (v > 0) {                                                                          \
      char* cb_ = (char*)acc + prev.i0 * sacc + prev.j0 * 4;                              \
      TILE_STORE(o0, cb_, sacc);                                                          \
      TILE_STORE(o1, cb_ + TILE * 4, sacc);                                               \
    }                                                                                     \
    if (v + 1 < nv) {                                                                     \
      char* cn_ = (char*)acc + next.i0 * sacc + next.j0 * 4;                              \
      if (next.b0 > 0 || load_first) {                                                    \
        TILE_LOAD(o0, cn_, sacc);                                                         \
        TILE_LOAD(o1, cn_ + TILE * 4, sacc);                                              \
      } else {                                                                            \
        TILE_ZERO(o0);                                                                    \
        TILE_ZERO(o1);                                                                    \
      }                                                                                   \
    }                                                                                     \
    for (int64_t s = 1; s < x.nb * nk; ++s) PP_STEP(c0, c1, s);                          \
  } while (0)

static void pingpong(const brgemm_amx_kernel* kr, const uint16_t* const* a, int64_t sa,
                     const uint16_t* const* b, int64_t sb, int strips, int64_t count, float* acc,
                     int64_t sacc, int load_first) {
  const int64_t nk = kr->kp / kr->kc, chunks = (count + kr->pp_chunk - 1) / kr->pp_chunk;
  const int64_t nv = chunks * (kr->m / TILE) * (kr->n / NB);
  use_config(&kr->pp_cfg);
  pp_visit prev = {0, 0, 0, 0}, x = pp_at(kr, 0, count);
  char* c0 = (char*)acc + x.i0 * sacc + x.j0 * 4;
  if (load_first) {
    TILE_LOAD(0, c0, sacc);
    TILE_LOAD(1, c0 + TILE * 4, sacc);
  } else {
    TILE_ZERO(0);
    TILE_ZERO(1);
  }
  for (int64_t v = 0; v < nv; ++v) {
    const b_cols bc = b_columns(kr, x.j0, sb, strips);
    const pp_visit next = v + 1 < nv ? pp_at(kr, v + 1, count) : x;
    if (v & 1)
      PP_VISIT(2, 3, 0, 1);
    else
      PP_VISIT(0, 1, 2, 3);
    prev = x, x = next;
  }
  char* cl = (char*)acc + prev.i0 * sacc + prev.j0 * 4;
  if (nv & 1) {
    TILE_STORE(0, cl, sacc);
    TILE_STORE(1, cl + TILE * 4, sacc);
  } else {
    TILE_STORE(2, cl, sacc);
    TILE_STORE(3, cl + TILE * 4, sacc);
  }
}
#undef PP_VISIT
#undef PP_STEP

/* ---- groups of blocks (BRGEMM_AMX_GROUP: bytes of A and B per group) ----
 * The macro blocks in a snake over C for one group of blocks, then the next
 * group's snake backwards from where the last one ended: the macro block at
 * the turn between groups keeps its C in the tiles, and within a group each
 * macro block shares the last one's A rows or B columns, which stay in L1 when
 * the group's share fits there. Every other macro block walks its blocks
 * backwards, as in the one pass. C goes back to acc at each turn within a
 * group. With one group this is the one pass's order (BRGEMM_AMX_TURN=1 alone
 * runs that order with the turns tile by tile). */

/* visit v's group and macro block (row ib, column jb) */
static void group_visit(int64_t v, int64_t row_blocks, int64_t col_blocks, int64_t* grp,
                        int64_t* ib, int64_t* jb) {
  const int64_t nmb = row_blocks * col_blocks, c = v / nmb;
  const int64_t idx = c & 1 ? nmb - 1 - v % nmb : v % nmb, jr = idx % col_blocks;
  *grp = c, *ib = idx / col_blocks, *jb = *ib & 1 ? col_blocks - 1 - jr : jr;
}

typedef struct {
  operands o;
  const tile_config* cfg;
  char* cb;
  int64_t c, ib, jb;
} visit;

/* visit v of `visits` (g blocks per group) */
static visit visit_of(const brgemm_amx_kernel* kr, int64_t v, int64_t visits, int64_t g,
                      const uint16_t* const* ap, int64_t sa, const uint16_t* const* bp, int64_t sb,
                      int b_packed, int64_t count, float* acc, int64_t sacc) {
  const int64_t col_blocks = (kr->n + NB - 1) / NB, row_blocks = (kr->m + MB - 1) / MB;
  const int strips = b_packed && kr->b_tiles, t1 = kr->t1[b_packed != 0];
  visit x;
  group_visit(v, row_blocks, col_blocks, &x.c, &x.ib, &x.jb);
  const int64_t b0 = x.c * g, nb = count - b0 < g ? count - b0 : g;
  const int64_t i0 = x.ib * MB, j0 = x.jb * NB;
  const int rows = (int)(kr->m - i0 < MB ? kr->m - i0 : MB);
  const int cols = (int)(kr->n - j0 < NB ? kr->n - j0 : NB);
  int64_t nc = -1, nib = -1, njb = -1, pc = -1, pib = -1, pjb = -1;
  if (v + 1 < visits) group_visit(v + 1, row_blocks, col_blocks, &nc, &nib, &njb);
  if (v > 0) group_visit(v - 1, row_blocks, col_blocks, &pc, &pib, &pjb);
  /* T1_UNSHARED: the operand the next visit does not read again; T1_REUSE: also
   * not one the last visit read */
  const int next_a = nc == x.c && nib == x.ib, next_b = nc == x.c && njb == x.jb;
  const int last_a = pc == x.c && pib == x.ib, last_b = pc == x.c && pjb == x.jb;
  const operands o = {
      .a = ap + b0, .b = bp + b0, .sa = sa, .count = nb, .nk = kr->kp / kr->kc, .i0 = i0,
      .bc = b_columns(kr, j0, sb, strips), .two_rows = rows > TILE, .two_cols = cols > TILE,
      .back = kr->reverse && (int)(v & 1),
      .t1a = t1_on_a(kr, t1, !next_a, next_a, last_a, rows, nb),
      .t1b = t1_on_b(t1, !next_b, next_b, last_b)};
  x.o = o;
  x.cfg = &kr->cfg[rows < MB][cols < NB];
  x.cb = (char*)acc + i0 * sacc + j0 * 4;
  return x;
}

/* the lines of o's first `steps` steps into L1 (BRGEMM_AMX_PFTURN) */
static void prefetch_first(const brgemm_amx_kernel* kr, const operands* o, int64_t steps) {
  for (int64_t s = 0; s < steps && s < o->count * o->nk; ++s) {
    const int64_t i = o->back ? o->count - 1 - s / o->nk : s / o->nk;
    prefetch_step(kr, o, i, (o->back ? o->nk - 1 - s % o->nk : s % o->nk) * kr->kc);
  }
}

static void grouped(const brgemm_amx_kernel* kr, const uint16_t* const* ap, int64_t sa,
                    const uint16_t* const* bp, int64_t sb, int b_packed, int64_t count, float* acc,
                    int64_t sacc, int load_first) {
  const int64_t col_blocks = (kr->n + NB - 1) / NB, row_blocks = (kr->m + MB - 1) / MB;
  const int64_t g = kr->group < count ? kr->group : count;
  const int64_t visits = (count + g - 1) / g * row_blocks * col_blocks;
  visit last = {0}, x = visit_of(kr, 0, visits, g, ap, sa, bp, sb, b_packed, count, acc, sacc);
  for (int64_t v = 0; v < visits; ++v) {
    const operands* o = &x.o;
    const int64_t steps = o->count * o->nk;
    int64_t first = 0;
    if (v > 0 && x.ib == last.ib && x.jb == last.jb) {  /* the turn between groups: C stays */
    } else {
      const int load = x.c > 0 || load_first;
      if (v > 0 && kr->turn && x.cfg == last.cfg && o->two_rows && o->two_cols) {
        turn_by_tile(kr, o, last.cb, x.cb, sacc, load);
        first = 1;
      } else {
        if (v > 0) c_end(&last.o, last.cb, sacc);
        use_config(x.cfg);
        c_begin(o, x.cb, sacc, load);
      }
    }
    const visit next =
        v + 1 < visits ? visit_of(kr, v + 1, visits, g, ap, sa, bp, sb, b_packed, count, acc, sacc)
                       : x;
    const int64_t split = kr->pf_turn && v + 1 < visits && steps - kr->pf_turn > first
                              ? steps - kr->pf_turn
                              : steps;
    block_steps(kr, o, first, split);
    if (split < steps) {
      prefetch_first(kr, &next.o, kr->pf_turn);
      block_steps(kr, o, split, steps);
    }
    last = x, x = next;
  }
  c_end(&last.o, last.cb, sacc);
}

static size_t round64(size_t x) { return (x + 63) & ~(size_t)63; }

/* The default schedule: blocks in chunks (passes) whose A and B stay in L1
 * while every macro block of C passes over them, the macro blocks in a snake,
 * the accumulators back to acc between chunks; c_in: acc holds C to add to
 * (else the first pass starts from zero). */
static void snake(const brgemm_amx_kernel* kr, const uint16_t* const* ap, int64_t sa,
                  const uint16_t* const* bp, int64_t sb, int b_packed, int64_t count, float* acc,
                  int64_t sacc, int c_in, int64_t chunk) {
  const int64_t col_blocks = (kr->n + NB - 1) / NB, row_blocks = (kr->m + MB - 1) / MB;
  for (int64_t b0 = 0; b0 < count; b0 += chunk) {
    const int64_t nb = count - b0 < chunk ? count - b0 : chunk;
    const int load = b0 > 0 || c_in;
    for (int64_t ib = 0; ib < row_blocks; ++ib) {
      const int64_t i0 = ib * MB;
      const int rows = (int)(kr->m - i0 < MB ? kr->m - i0 : MB);
      /* a snake over C: the next macro block shares its A rows or its B
       * columns with the last one, which are still in L1 */
      const int back = ib & 1;
      for (int64_t jb = 0; jb < col_blocks; ++jb) {
        const int64_t j0 = (back ? col_blocks - 1 - jb : jb) * NB;
        const int cols = (int)(kr->n - j0 < NB ? kr->n - j0 : NB);
        use_config(&kr->cfg[rows < MB][cols < NB]);
        /* T1_UNSHARED: the next macro block shares A along a row of the
         * snake, B where it turns; the last one shares nothing */
        const int next_a = jb + 1 < col_blocks, next_b = !next_a && ib + 1 < row_blocks;
        const int last_a = jb > 0, last_b = jb == 0 && ib > 0;
        const int t1 = kr->t1[b_packed != 0];
        const operands o = {
            .a = ap + b0, .b = bp + b0, .sa = sa, .count = nb, .nk = kr->kp / kr->kc, .i0 = i0,
            .bc = b_columns(kr, j0, sb, b_packed && kr->b_tiles),
            .two_rows = rows > TILE, .two_cols = cols > TILE,
            .back = kr->reverse && (int)((ib * col_blocks + jb) & 1),
            .t1a = t1_on_a(kr, t1, next_b, next_a, last_a, rows, nb),
            .t1b = t1_on_b(t1, next_a, next_b, last_b)};
        macro_block(kr, &o, acc, sacc, load, j0);
      }
    }
  }
}

static int run(const brgemm_amx_kernel* kr, const void* const* a, const void* const* b, void* c,
               int64_t count, int b_packed) {
  const int pad = kr->kp != kr->k, pack = !b_packed && !kr->b_vnni;
  const size_t ptrs = round64((size_t)count * sizeof(void*));
  const size_t a_blk = pad ? round64((size_t)kr->m * kr->kp * 2) : 0;
  const size_t b_blk = pack ? round64((size_t)kr->kp * kr->n * 2) : 0;
  const size_t acc_size = kr->direct ? 0 : round64((size_t)kr->m * kr->n * 4);
  char* s = (char*)brgemm_cpu_scratch_work(2 * ptrs + acc_size + (size_t)count * (a_blk + b_blk));
  if (!s) return BRGEMM_ENOMEM;
  const uint16_t** ap = (const uint16_t**)s;
  const uint16_t** bp = (const uint16_t**)(s + ptrs);
  float* acc = kr->direct ? (float*)c : (float*)(s + 2 * ptrs);
  char* blocks = s + 2 * ptrs + acc_size;
  for (int64_t i = 0; i < count; ++i) {
    char* mine = blocks + (size_t)i * (a_blk + b_blk);
    ap[i] = (const uint16_t*)a[i];
    bp[i] = (const uint16_t*)b[i];
    if (pad) {
      pad_a(kr, (const uint16_t*)a[i], (uint16_t*)mine);
      ap[i] = (const uint16_t*)mine;
    }
    if (pack) {
      pack_b_as(kr, b[i], kr->ldb, mine + a_blk, 0);
      bp[i] = (const uint16_t*)(mine + a_blk);
    }
  }
  const int64_t sa = (pad ? kr->kp : kr->lda) * 2;
  const int ours = b_packed || pack;  /* B in pack_b's layout, else VNNI rows ldb apart */
  const int64_t sb = (ours ? kr->n : kr->ldb) * 4;
  const int64_t sacc = (kr->direct ? kr->ldc : kr->n) * 4;
  MEMORY_BARRIER();  /* packed blocks and C written before the tiles read them */
  const int64_t chunk = kr->chunk[b_packed != 0];
  const int c_in = kr->direct && kr->beta == 1.0f;
  if (kr->pingpong)
    pingpong(kr, ap, sa, bp, sb, b_packed && kr->b_tiles, count, acc, sacc, c_in);
  else if (chunk == INT64_MAX && (kr->group < count || kr->turn))
    grouped(kr, ap, sa, bp, sb, b_packed, count, acc, sacc, c_in);
  else
    snake(kr, ap, sa, bp, sb, b_packed, count, acc, sacc, c_in, chunk);
  MEMORY_BARRIER();  /* the tiles' stores before plain reads of acc and C */
  if (!kr->direct) combine(kr, acc, c);
  return BRGEMM_OK;
}

#ifndef BRGEMM_AMX_MODEL
/* The probes' config: all eight tiles whole (16 rows of 64 bytes). */
static void full_tiles_config(tile_config* cfg) {
  memset(cfg, 0, sizeof(*cfg));
  cfg->palette = 1;
  for (int t = 0; t < 8; ++t) cfg->rows[t] = 16, cfg->colsb[t] = 64;
}

/* The peak probe: six independent 16 x 16 accumulators (enough to cover the
 * instruction's latency at its throughput), A and B tiles from registers. */
float brgemm_amx_peak_run(long iters) {
  uint16_t ones[16 * 32] __attribute__((aligned(64)));
  float out[16 * 16] __attribute__((aligned(64)));
  for (int i = 0; i < 16 * 32; ++i) ones[i] = 0x3f80;  /* 1.0: no zeros a unit might skip */
  MEMORY_BARRIER();
  tile_config cfg;
  full_tiles_config(&cfg);
  _tile_loadconfig(&cfg);
  _tile_loadd(6, ones, 64);
  _tile_loadd(7, ones, 64);
  _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3); _tile_zero(4); _tile_zero(5);
  for (long i = 0; i < iters; ++i) {
    _tile_dpbf16ps(0, 6, 7); _tile_dpbf16ps(1, 6, 7); _tile_dpbf16ps(2, 6, 7);
    _tile_dpbf16ps(3, 6, 7); _tile_dpbf16ps(4, 6, 7); _tile_dpbf16ps(5, 6, 7);
  }
  _tile_stored(0, out, 64);
  _tile_release();
  tiles_loaded = 0;
  MEMORY_BARRIER();
  return out[0];
}

/* What the kernel's inner step can reach at all: four accumulators (the
 * 2x2 C tiles) fed from registers, and the same with its four tile loads per
 * step from an L1-resident buffer. */
static float probe_steps(long iters, int loads) {
  uint16_t ab[4][16 * 32] __attribute__((aligned(64)));
  float out[16 * 16] __attribute__((aligned(64)));
  for (int t = 0; t < 4; ++t)
    for (int i = 0; i < 16 * 32; ++i) ab[t][i] = 0x3f80;
  MEMORY_BARRIER();
  tile_config cfg;
  full_tiles_config(&cfg);
  _tile_loadconfig(&cfg);
  _tile_loadd(4, ab[0], 64); _tile_loadd(5, ab[1], 64);
  _tile_loadd(6, ab[2], 64); _tile_loadd(7, ab[3], 64);
  _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
  for (long i = 0; i < iters; ++i) {
    if (loads) { _tile_loadd(4, ab[0], 64); _tile_loadd(6, ab[2], 64); }
    _tile_dpbf16ps(0, 4, 6);
    if (loads) _tile_loadd(7, ab[3], 64);
    _tile_dpbf16ps(1, 4, 7);
    if (loads) _tile_loadd(5, ab[1], 64);
    _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, out, 64);
  _tile_release();
  tiles_loaded = 0;
  MEMORY_BARRIER();
  return out[0];
}

float brgemm_amx_probe_4acc(long iters) { return probe_steps(iters, 0); }

/* What a turn between macro blocks costs: the 2x2 step with its loads from L1,
 * and after every `steps` steps the four C tiles stored to one L1 buffer and
 * loaded from another, all stores then all loads (as c_end, c_begin) or tile
 * by tile with the next step's products between (as turn_by_tile). */
static float probe_turns(long iters, int steps, int by_tile) {
  uint16_t ab[4][16 * 32] __attribute__((aligned(64)));
  static __thread float cbuf[2][32 * 32] __attribute__((aligned(64)));
  for (int t = 0; t < 4; ++t)
    for (int i = 0; i < 16 * 32; ++i) ab[t][i] = 0x3f80;
  memset(cbuf, 0, sizeof(cbuf));
  MEMORY_BARRIER();
  tile_config cfg;
  full_tiles_config(&cfg);
  _tile_loadconfig(&cfg);
  _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
  const int64_t sc = 32 * 4;
  for (long i = 0; i < iters; ++i) {
    char *old = (char*)cbuf[i & 1], *nw = (char*)cbuf[(i + 1) & 1];
    int s0 = 0;
    if (by_tile) {
      _tile_stored(0, old, sc); _tile_loadd(0, nw, sc);
      _tile_loadd(4, ab[0], 64); _tile_loadd(6, ab[2], 64); _tile_dpbf16ps(0, 4, 6);
      _tile_stored(1, old + 64, sc); _tile_loadd(1, nw + 64, sc);
      _tile_loadd(7, ab[3], 64); _tile_dpbf16ps(1, 4, 7);
      _tile_stored(2, old + 16 * sc, sc); _tile_loadd(2, nw + 16 * sc, sc);
      _tile_loadd(5, ab[1], 64); _tile_dpbf16ps(2, 5, 6);
      _tile_stored(3, old + 16 * sc + 64, sc); _tile_loadd(3, nw + 16 * sc + 64, sc);
      _tile_dpbf16ps(3, 5, 7);
      s0 = 1;
    } else {
      _tile_stored(0, old, sc); _tile_stored(1, old + 64, sc);
      _tile_stored(2, old + 16 * sc, sc); _tile_stored(3, old + 16 * sc + 64, sc);
      _tile_loadd(0, nw, sc); _tile_loadd(1, nw + 64, sc);
      _tile_loadd(2, nw + 16 * sc, sc); _tile_loadd(3, nw + 16 * sc + 64, sc);
    }
    for (int s = s0; s < steps; ++s) {
      _tile_loadd(4, ab[0], 64); _tile_loadd(6, ab[2], 64);
      _tile_dpbf16ps(0, 4, 6);
      _tile_loadd(7, ab[3], 64);
      _tile_dpbf16ps(1, 4, 7);
      _tile_loadd(5, ab[1], 64);
      _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, cbuf[0], sc);
  _tile_release();
  tiles_loaded = 0;
  MEMORY_BARRIER();
  return cbuf[0][0];
}

float brgemm_amx_probe_turns_2(long iters) { return probe_turns(iters, 2, 0); }
float brgemm_amx_probe_turns_2_by_tile(long iters) { return probe_turns(iters, 2, 1); }
float brgemm_amx_probe_turns_8(long iters) { return probe_turns(iters, 8, 0); }
float brgemm_amx_probe_turns_8_by_tile(long iters) { return probe_turns(iters, 8, 1); }
float brgemm_amx_probe_turns_32(long iters) { return probe_turns(iters, 32, 0); }
float brgemm_amx_probe_turns_32_by_tile(long iters) { return probe_turns(iters, 32, 1); }
float brgemm_amx_probe_2x2_l1(long iters) { return probe_steps(iters, 1); }

/* What every call through the API pays around its tile work: a config load
 * (the last call released the tiles) and, with `release`, the release after
 * it; one tile zeroed and stored in between so that the tiles are in use. */
static float probe_config(long iters, int release) {
  float out[16 * 16] __attribute__((aligned(64)));
  tile_config cfg;
  full_tiles_config(&cfg);
  for (long i = 0; i < iters; ++i) {
    _tile_loadconfig(&cfg);
    _tile_zero(0);
    _tile_stored(0, out, 64);
    if (release) _tile_release();
  }
  _tile_release();
  tiles_loaded = 0;
  MEMORY_BARRIER();
  return out[0];
}

float brgemm_amx_probe_config(long iters) { return probe_config(iters, 0); }
float brgemm_amx_probe_config_release(long iters) { return probe_config(iters, 1); }
#endif

const brgemm_amx_impl IMPL = {IMPL_NAME, create, destroy, takes_vnni_b, packed_b_elems, pack_b,
                              run, release, finish, faults};

#ifndef BRGEMM_AMX_MODEL
#pragma GCC pop_options
#endif

#ifndef BRGEMM_AMX_MODEL
/* ---- choosing the implementation, once per process (plain x86-64 code) ---- */
#include <cpuid.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };

static const brgemm_amx_impl* selected;
static char reason[160];
static pthread_once_t select_once = PTHREAD_ONCE_INIT;

/* NULL if this CPU and OS can run tiles for this process, else why not */
static const char* hardware_missing(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 22)))
    return "the CPU reports no AMX-TILE/AMX-BF16 (CPUID.7.0:EDX bits 24, 22)";
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27)))
    return "the OS has not enabled XSAVE (CPUID.1:ECX.OSXSAVE)";
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & (3u << 17)) != (3u << 17)) return "the OS has not enabled tile state in XCR0 (bits 17, 18)";
  if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) {
    snprintf(reason, sizeof(reason), "Linux refused arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA): %s",
             strerror(errno));
    return reason;
  }
  return NULL;
}

static void select_impl(void) {
  const char* env = getenv("BRGEMM_AMX");
  if (env && (!strcmp(env, "0") || !strcmp(env, "off"))) {
    snprintf(reason, sizeof(reason), "disabled by BRGEMM_AMX=%s", env);
    return;
  }
  if (env && !strcmp(env, "model")) {  /* the tests' software tiles, on any CPU */
    selected = &brgemm_amx_model;
    return;
  }
  const char* missing = hardware_missing();
  if (missing) {
    if (missing != reason) snprintf(reason, sizeof(reason), "%s", missing);
    return;
  }
  selected = &brgemm_amx_hardware;
}

const brgemm_amx_impl* brgemm_amx_selected(void) {
  pthread_once(&select_once, select_impl);
  return selected;
}

const char* brgemm_amx_reason(void) {
  pthread_once(&select_once, select_impl);
  return selected ? "" : reason;
}

void brgemm_amx_release(void) {
  if (selected) selected->release();
}
#endif

#ifndef BRGEMM_AMX_MODEL
const char* brgemm_cpu_amx_reason(void) { return brgemm_amx_reason(); }
const char* brgemm_cpu_amx_impl(void) {
  const brgemm_amx_impl* impl = brgemm_amx_selected();
  return impl ? impl->name : "";
}
int64_t brgemm_cpu_amx_model_faults(void) { return brgemm_amx_model.faults(); }
int brgemm_cpu_takes_vnni_b(int64_t k) {
  const brgemm_amx_impl* impl = brgemm_amx_selected();
  return impl && k >= 1 && impl->takes_vnni_b(k);
}
#endif
