/* The AMX path of the bf16 kernel (brgemm_amx.c), as brgemm_cpu.c sees it.
 *
 * Two builds of one source: the real one (tile instructions) and a software
 * model of those instructions (brgemm_amx_model.c), so that tile configs,
 * packing and remainders run on machines without AMX, in the tests. Both
 * trust their arguments: brgemm_cpu.c checked them.
 *
 * B is read as VNNI pairs: a block packed per call is [kp/2][n][2] bf16, kp =
 * k rounded up so that the tile's k chunks divide it (zero rows below k); one
 * packed ahead (pack_b) is the same in strips of 16 columns, [n/16][kp/2][16][2]
 * (BRGEMM_AMX_BTILES=0: as per call). */
#ifndef BRGEMM_AMX_H
#define BRGEMM_AMX_H
#include <stddef.h>
#include <stdint.h>

#include "brgemm_cpu.h"

typedef struct brgemm_amx_kernel brgemm_amx_kernel;

typedef struct {
  const char* name;  /* "hardware" or "model" */
  /* NULL when out of memory */
  brgemm_amx_kernel* (*create)(const brgemm_cpu_desc* desc);
  void (*destroy)(brgemm_amx_kernel* kernel);
  /* whether a kernel of depth k reads B as VNNI pairs in place (desc.b_vnni) */
  int (*takes_vnni_b)(int64_t k);
  /* elements of one packed B block */
  int64_t (*packed_b_elems)(const brgemm_amx_kernel* kernel);
  void (*pack_b)(const brgemm_amx_kernel* kernel, const void* b, int64_t ldb, void* out);
  /* count >= 1 blocks by address; scratch from brgemm_cpu_scratch. Leaves the
   * tiles configured: callers end with release (cheap when nothing is loaded). */
  int (*run)(const brgemm_amx_kernel* kernel, const void* const* a, const void* const* b,
             void* c, int64_t count, int b_packed);
  /* forget this thread's tile state (tilerelease) */
  void (*release)(void);
  /* after a public run of this kernel: release, or keep the tiles (BRGEMM_AMX_KEEP) */
  void (*finish)(const brgemm_amx_kernel* kernel);
  /* model only: tile instructions the hardware would fault on (tests assert 0) */
  int64_t (*faults)(void);
} brgemm_amx_impl;

extern const brgemm_amx_impl brgemm_amx_hardware;
extern const brgemm_amx_impl brgemm_amx_model;

/* The implementation bf16 kernels use, decided once per process: the hardware
 * when CPUID reports AMX-BF16, the OS enables tile state and Linux grants this
 * process XTILEDATA; the model when BRGEMM_AMX=model; none when BRGEMM_AMX=0.
 * NULL means none; brgemm_amx_reason says why. */
const brgemm_amx_impl* brgemm_amx_selected(void);
const char* brgemm_amx_reason(void);

/* The hardware peak probe: `iters` rounds of six tdpbf16ps (16 x 16 x 32
 * each) on independent accumulators; only where brgemm_amx_selected() is
 * the hardware. Returns a value the caller keeps alive. */
float brgemm_amx_peak_run(long iters);
/* The same with four accumulators, the kernel's 2x2 C tiles: fed from
 * registers (4acc), and with the kernel's four tile loads per step from an
 * L1-resident buffer (2x2_l1). */
float brgemm_amx_probe_4acc(long iters);
float brgemm_amx_probe_2x2_l1(long iters);
/* The 2x2 step from L1 with a turn (C tiles stored to L1 and others loaded)
 * every 2, 8 or 32 steps; all stores then all loads, or tile by tile with
 * the next step's products between (by_tile). */
float brgemm_amx_probe_turns_2(long iters);
float brgemm_amx_probe_turns_2_by_tile(long iters);
float brgemm_amx_probe_turns_8(long iters);
float brgemm_amx_probe_turns_8_by_tile(long iters);
float brgemm_amx_probe_turns_32(long iters);
float brgemm_amx_probe_turns_32_by_tile(long iters);
/* `iters` tile config loads, each with a tile zeroed and stored, and with
 * (config_release) or without a tile release after each. */
float brgemm_amx_probe_config(long iters);
float brgemm_amx_probe_config_release(long iters);

/* Release this thread's tiles if the selected implementation loaded any. */
void brgemm_amx_release(void);
#endif
