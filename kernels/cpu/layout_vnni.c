/* VNNI pairs for B operands kept in tiles: what lets the AMX kernel read
 * blocked weights (and the update's dy) without packing them per call. */
#include "layout_window.h"

int brgemm_cpu_vnni_tiles(const void* src, int64_t tiles, int64_t rows, int64_t cols, void* dst,
                          int threads) {
  if (!src || !dst || src == dst || tiles < 0 || rows < 2 || rows % 2 || cols < 1)
    return BRGEMM_EINVAL;
  const uint16_t* s = (const uint16_t*)src;
  uint16_t* d = (uint16_t*)dst;
  const int64_t size = rows * cols;
#pragma omp parallel for schedule(static) num_threads(brgemm_cpu_plan_threads(threads))
  for (int64_t t = 0; t < tiles; ++t)
    for (int64_t p = 0; p < rows / 2; ++p) {
      const uint16_t* r0 = s + t * size + 2 * p * cols;
      brgemm_pair_rows(r0, r0 + cols, d + t * size + 2 * p * cols, cols);
    }
  return BRGEMM_OK;
}
