/* Measured FMA peak of one core: independent chains of vector FMAs, enough
 * of them to cover latency x throughput on current x86 cores (4 cycles x 2
 * ports = 8 in flight; 12 leaves headroom). The result is the yardstick for
 * "% of peak" in the benchmarks, measured in the same run as they are. */
#include "brgemm_amx.h"
#include "brgemm_cpu.h"

#include <immintrin.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

#define CHAINS 12

__attribute__((target("avx512f"))) static float fma_avx512(long iters) {
  __m512 acc[CHAINS];
  const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
  for (int c = 0; c < CHAINS; ++c) acc[c] = _mm512_set1_ps((float)c);
  for (long i = 0; i < iters; ++i)
    for (int c = 0; c < CHAINS; ++c) acc[c] = _mm512_fmadd_ps(acc[c], x, y);
  for (int c = 1; c < CHAINS; ++c) acc[0] = _mm512_add_ps(acc[0], acc[c]);
  return _mm512_reduce_add_ps(acc[0]);
}

__attribute__((target("avx2,fma"))) static float fma_avx2(long iters) {
  __m256 acc[CHAINS];
  const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
  for (int c = 0; c < CHAINS; ++c) acc[c] = _mm256_set1_ps((float)c);
  for (long i = 0; i < iters; ++i)
    for (int c = 0; c < CHAINS; ++c) acc[c] = _mm256_fmadd_ps(acc[c], x, y);
  for (int c = 1; c < CHAINS; ++c) acc[0] = _mm256_add_ps(acc[0], acc[c]);
  float out[8];
  _mm256_storeu_ps(out, acc[0]);
  return out[0] + out[7];
}

static float fma_scalar(long iters) {
  float acc[CHAINS];
  for (int c = 0; c < CHAINS; ++c) acc[c] = (float)c;
  for (long i = 0; i < iters; ++i)
    for (int c = 0; c < CHAINS; ++c) acc[c] = acc[c] * 0.999999f + 1e-7f;
  float s = 0;
  for (int c = 0; c < CHAINS; ++c) s += acc[c];
  return s;
}

const char* brgemm_cpu_fma_isa(void) {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return "avx512";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "avx2";
  return "scalar";
}

__attribute__((target("avx512f,avx512bf16"))) static float dot_bf16(long iters) {
  __m512 acc[CHAINS];
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80);  /* 1.0 */
  const __m512bh y = (__m512bh)_mm512_set1_epi16(0x33d6);  /* about 1e-7 */
  for (int c = 0; c < CHAINS; ++c) acc[c] = _mm512_set1_ps((float)c);
  for (long i = 0; i < iters; ++i)
    for (int c = 0; c < CHAINS; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], x, y);
  for (int c = 1; c < CHAINS; ++c) acc[0] = _mm512_add_ps(acc[0], acc[c]);
  return _mm512_reduce_add_ps(acc[0]);
}

volatile float brgemm_peak_sink;  /* keeps the chains from being optimised away */

/* best GFLOP/s of fn over about `seconds`; one call does flops_per_iter * iters */
static double best_rate(float (*fn)(long), double flops_per_iter, double seconds) {
  if (seconds <= 0) seconds = 0.2;
  long iters = 1 << 16;
  double best = 0;
  /* grow the trip count until one run takes a tenth of the budget, then keep the best of the rest */
  double start = now();
  while (now() - start < seconds) {
    double t0 = now();
    brgemm_peak_sink = fn(iters);
    double dt = now() - t0;
    if (dt < seconds / 10) iters *= 2;
    else if (flops_per_iter * iters / dt * 1e-9 > best) best = flops_per_iter * iters / dt * 1e-9;
  }
  if (best == 0) {  /* budget too small to settle: take one long run */
    double t0 = now();
    brgemm_peak_sink = fn(iters);
    best = flops_per_iter * iters / (now() - t0) * 1e-9;
  }
  return best;
}

double brgemm_cpu_fma_peak(double seconds) {
  const char* isa = brgemm_cpu_fma_isa();
  const int lanes = !strcmp(isa, "avx512") ? 16 : !strcmp(isa, "avx2") ? 8 : 1;
  float (*fn)(long) = lanes == 16 ? fma_avx512 : lanes == 8 ? fma_avx2 : fma_scalar;
  return best_rate(fn, 2.0 * lanes * CHAINS, seconds);
}

double brgemm_cpu_bf16_peak(double seconds) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512bf16")) return 0.0;
  return best_rate(dot_bf16, 64.0 * CHAINS, seconds);  /* 16 lanes x 2 pairs x 2 flops */
}

double brgemm_cpu_amx_peak(double seconds) {
  if (brgemm_amx_selected() != &brgemm_amx_hardware) return 0.0;
  return best_rate(brgemm_amx_peak_run, 6 * 16.0 * 16 * 32 * 2, seconds);
}

double brgemm_cpu_amx_config_ns(int release, double seconds) {
  if (brgemm_amx_selected() != &brgemm_amx_hardware) return 0.0;
  /* best_rate counts one "flop" per round: billions of rounds per second */
  return 1.0 / best_rate(release ? brgemm_amx_probe_config_release : brgemm_amx_probe_config, 1.0,
                         seconds);
}

double brgemm_cpu_amx_probe(int pattern, double seconds) {
  /* 0: from registers, 1: loads from L1; 2..7: with turns every 2, 8, 32 steps
   * (even: all at once, odd: tile by tile) */
  static float (*const fns[])(long) = {brgemm_amx_probe_4acc, brgemm_amx_probe_2x2_l1,
                                        brgemm_amx_probe_turns_2, brgemm_amx_probe_turns_2_by_tile,
                                        brgemm_amx_probe_turns_8, brgemm_amx_probe_turns_8_by_tile,
                                        brgemm_amx_probe_turns_32, brgemm_amx_probe_turns_32_by_tile};
  static const double steps[] = {1, 1, 2, 2, 8, 8, 32, 32};
  if (brgemm_amx_selected() != &brgemm_amx_hardware || pattern < 0 || pattern > 7) return 0.0;
  return best_rate(fns[pattern], steps[pattern] * 4 * 16.0 * 16 * 32 * 2, seconds);
}
