/* A software model of the AMX tile instructions the kernel uses, after the
 * Intel SDM's pseudo-code: eight tiles of up to 16 rows x 64 bytes per thread,
 * configured by a 64-byte palette-1 config. Where the hardware would fault
 * (a bad config, an unconfigured tile, shapes that do not match in
 * tdpbf16ps) the model counts a fault and skips the instruction; the tests
 * assert that the count stays 0. Only brgemm_amx_model.c includes this. */
#ifndef BRGEMM_AMX_MODEL_H
#define BRGEMM_AMX_MODEL_H
#include <stdint.h>
#include <string.h>

#include "brgemm_cpu_internal.h"

typedef struct {
  int configured;
  uint8_t rows[8];
  uint16_t colsb[8];
  uint8_t data[8][16][64];
} model_tiles;

static __thread model_tiles model;
static int64_t model_fault_count;

static void model_fault(void) { __atomic_add_fetch(&model_fault_count, 1, __ATOMIC_RELAXED); }

static void model_config(const void* cfg) {
  const uint8_t* b = (const uint8_t*)cfg;
  memset(&model, 0, sizeof(model));
  if (b[0] != 1 || b[1] != 0) { model_fault(); return; }  /* palette 1, start_row 0 */
  for (int t = 0; t < 16; ++t) {
    uint16_t colsb;
    memcpy(&colsb, b + 16 + 2 * t, 2);
    const uint8_t rows = b[48 + t];
    if (rows > 16 || colsb > 64 || (rows == 0) != (colsb == 0) || (t >= 8 && rows)) {
      model_fault();
      return;
    }
    if (t < 8) model.rows[t] = rows, model.colsb[t] = colsb;
  }
  model.configured = 1;
}

static int model_usable(int t) {
  if (model.configured && model.rows[t]) return 1;
  model_fault();
  return 0;
}

static void model_load(int t, const void* p, int64_t stride) {
  if (!model_usable(t)) return;
  memset(model.data[t], 0, sizeof(model.data[t]));
  for (int r = 0; r < model.rows[t]; ++r)
    memcpy(model.data[t][r], (const char*)p + r * stride, model.colsb[t]);
}

static void model_store(int t, void* p, int64_t stride) {
  if (!model_usable(t)) return;
  for (int r = 0; r < model.rows[t]; ++r)
    memcpy((char*)p + r * stride, model.data[t][r], model.colsb[t]);
}

static void model_zero(int t) {
  if (model_usable(t)) memset(model.data[t], 0, sizeof(model.data[t]));
}

static float model_bf16(const uint8_t* p) {  /* denormal inputs count as zero, as in hardware */
  uint16_t h;
  memcpy(&h, p, 2);
  return (h & 0x7f80) ? brgemm_bf16_to_f32(h) : 0.0f * brgemm_bf16_to_f32(h);
}

static void model_dp(int c, int a, int b) {
  if (!model_usable(c) || !model_usable(a) || !model_usable(b)) return;
  if (c == a || c == b || a == b || model.rows[a] != model.rows[c] ||
      model.colsb[b] != model.colsb[c] || model.colsb[a] != 4 * model.rows[b]) {
    model_fault();
    return;
  }
  for (int m = 0; m < model.rows[c]; ++m) {
    float acc[16];
    memcpy(acc, model.data[c][m], sizeof(acc));
    for (int k = 0; k < model.colsb[a] / 4; ++k)
      for (int n = 0; n < model.colsb[c] / 4; ++n) {
        acc[n] += model_bf16(model.data[a][m] + 4 * k) * model_bf16(model.data[b][k] + 4 * n);
        acc[n] += model_bf16(model.data[a][m] + 4 * k + 2) * model_bf16(model.data[b][k] + 4 * n + 2);
      }
    memcpy(model.data[c][m], acc, sizeof(acc));
  }
}

#define TILE_CONFIG(cfg) model_config(cfg)
#define TILE_RELEASE() memset(&model, 0, sizeof(model))
#define TILE_ZERO(t) model_zero(t)
#define TILE_LOAD(t, p, stride) model_load(t, p, stride)
#define TILE_LOAD_T1(t, p, stride) model_load(t, p, stride)  /* a cache hint: the same load */
#define TILE_STORE(t, p, stride) model_store(t, p, stride)
#define TILE_DP(c, a, b) model_dp(c, a, b)
#define PREFETCH(p) ((void)(p))
#define TILE_FAULTS() __atomic_load_n(&model_fault_count, __ATOMIC_RELAXED)
#endif
