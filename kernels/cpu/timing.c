/* Timing from C alone, so benchmarks can say what the Python call path costs. */
#include "brgemm_cpu.h"

#include <time.h>

int brgemm_cpu_time_strd(const brgemm_cpu_kernel* kernel, const void* a, const void* b, void* c,
                         int64_t count, int b_packed, int64_t reps, double* seconds) {
  if (!seconds || reps < 1) return BRGEMM_EINVAL;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int64_t r = 0; r < reps; ++r) {
    int rc = brgemm_cpu_run_strd(kernel, a, b, c, count, b_packed, 0);
    if (rc != BRGEMM_OK) return rc;
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  *seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  return BRGEMM_OK;
}
