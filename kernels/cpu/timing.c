/* Timing from C alone, so benchmarks can say what the Python call path costs. */
#include "brgemm_cpu.h"

#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* What the Python call path does to the core between two calls, imitated:
 * `touch` bytes written (a line each 64 bytes), then a spin on the clock
 * until `gap` seconds have passed since `from`. */
static void between(volatile char* buf, int64_t touch, double gap, double from) {
  for (int64_t i = 0; i < touch; i += 64) buf[i] = (char)i;
  if (gap > 0)
    while (now() - from < gap) {}
}

int brgemm_cpu_time_strd(const brgemm_cpu_kernel* kernel, const void* a, const void* b, void* c,
                         int64_t count, int b_packed, int64_t reps, double gap, int64_t touch,
                         double* seconds) {
  if (!seconds || reps < 1 || gap < 0 || touch < 0) return BRGEMM_EINVAL;
  if (gap == 0 && touch == 0) {  /* back to back */
    const double t0 = now();
    for (int64_t r = 0; r < reps; ++r) {
      int rc = brgemm_cpu_run_strd(kernel, a, b, c, count, b_packed, 0);
      if (rc != BRGEMM_OK) return rc;
    }
    *seconds = now() - t0;
    return BRGEMM_OK;
  }
  char* buf = touch ? (char*)malloc((size_t)touch) : NULL;
  if (touch && !buf) return BRGEMM_ENOMEM;
  double sum = 0;  /* the calls alone, the gaps left out */
  int rc = BRGEMM_OK;
  for (int64_t r = 0; r < reps && rc == BRGEMM_OK; ++r) {
    const double t0 = now();
    rc = brgemm_cpu_run_strd(kernel, a, b, c, count, b_packed, 0);
    const double t1 = now();
    sum += t1 - t0;
    between(buf, touch, gap, t1);
  }
  free(buf);
  *seconds = sum;
  return rc;
}
