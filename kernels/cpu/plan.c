/* The plan executor: replays a recorded loop nest with OpenMP.
 *
 * One parallel region spans all phases; each phase is an `omp for` over its
 * tasks (static schedule, so a task lands on the same thread run after run and
 * its blocks stay in that core's caches) with the implicit barrier between
 * phases. Each task's calls run in recorded order on one thread, and a C block
 * belongs to one task per phase, so results do not depend on the thread count. */
#include <omp.h>

#include "brgemm_amx.h"
#include "brgemm_cpu.h"
#include "brgemm_cpu_internal.h"
#include "epilogue.h"

/* COPY_B, COPY_BT, COPY_TAPS and COPY_AT: the ops that fill a call's operands before it */
static int is_copy(int32_t code) {
  return code == BRGEMM_OP_COPY_B || code == BRGEMM_OP_COPY_BT || code == BRGEMM_OP_COPY_TAPS ||
         code == BRGEMM_OP_COPY_AT;
}

/* The plan's own indices must be consistent; array bounds are Python's job. */
static int plan_valid(const brgemm_cpu_plan* p) {
  if (!p || !p->kernels || !p->calls || !p->task_begin || !p->phase_begin) return 0;
  if (p->n_kernels < 0 || p->n_tensors < 0 || p->n_calls < 0 || p->n_tasks < 0 || p->n_phases < 0)
    return 0;
  for (int32_t i = 0; i < p->n_kernels; ++i)
    if (!p->kernels[i] || brgemm_cpu_form(p->kernels[i]) != BRGEMM_OFFS) return 0;
  if (p->phase_begin[0] != 0 || p->phase_begin[p->n_phases] != p->n_tasks) return 0;
  for (int64_t i = 0; i < p->n_phases; ++i)
    if (p->phase_begin[i] > p->phase_begin[i + 1]) return 0;
  if (p->task_begin[0] != 0 || p->task_begin[p->n_tasks] != p->n_calls) return 0;
  for (int64_t i = 0; i < p->n_tasks; ++i)
    if (p->task_begin[i] > p->task_begin[i + 1]) return 0;
  for (int64_t i = 0; i < p->n_calls; ++i) {
    const brgemm_plan_call* c = &p->calls[i];
    if (c->kernel < 0 || c->kernel >= p->n_kernels) return 0;
    if (c->a < 0 || c->a >= p->n_tensors || c->b < 0 || c->b >= p->n_tensors) return 0;
    if (c->c < 0 || c->c >= p->n_tensors || c->c_off < 0) return 0;
    if (c->count < 0 || c->offs < 0 || c->offs + c->count > p->n_offs) return 0;
    if (c->op_count < 0 || c->op_begin < 0 || c->op_begin + (int64_t)c->op_count > p->n_ops) return 0;
    if (c->op_count && brgemm_cpu_c_itemsize(p->kernels[c->kernel]) != 4) return 0;
    for (int32_t j = 0; j < c->op_count; ++j) {
      const brgemm_plan_op* op = &p->ops[c->op_begin + j];
      if (op->code < BRGEMM_OP_BIAS || op->code > BRGEMM_OP_COPY_AT) return 0;
      if ((op->code == BRGEMM_OP_COPY_ROWS || op->code == BRGEMM_OP_COPY_TAPS ||
           op->code == BRGEMM_OP_COPY_AT) && (op->stride < 1 || op->ld < 1))
        return 0;
      if (op->code == BRGEMM_OP_COPY_AT && brgemm_cpu_a_t(p->kernels[c->kernel])) return 0;
      if (is_copy(op->code) &&  /* f32 blocks in rows, the op's leading */
          (op->ld < 1 || brgemm_cpu_ab_itemsize(p->kernels[c->kernel]) != 4 ||
           brgemm_cpu_b_vnni(p->kernels[c->kernel]) ||
           (j > 0 && !is_copy(p->ops[c->op_begin + j - 1].code))))
        return 0;
      const int operands = op->code == BRGEMM_OP_LSTM_CELL_BWD ? 6
                           : op->code == BRGEMM_OP_LSTM_CELL ? 4
                           : op->code == BRGEMM_OP_COPY_ROWS || is_copy(op->code) ? 2
                           : (op->code == BRGEMM_OP_BIAS || op->code >= BRGEMM_OP_STORE_BF16);
      for (int q = 0; q < operands; ++q)
        if (op->tensor[q] < 0 || op->tensor[q] >= p->n_tensors || op->offset[q] < 0) return 0;
      if (op->code == BRGEMM_OP_LSTM_CELL && op->tensor[4] >= 0 &&
          (op->tensor[4] >= p->n_tensors || op->offset[4] < 0))
        return 0;
      if (op->code == BRGEMM_OP_LSTM_CELL_BWD && op->tensor[6] >= 0 &&
          (op->tensor[6] >= p->n_tensors || op->offset[6] < 0))
        return 0;
    }
  }
  return 1;
}

/* A plan's seal: its table pointers and counts mixed with a key drawn once
 * per process (the address of a static, which ASLR moves; never 0), so that
 * a struct whose pointers or counts changed after sealing no longer matches. */
static uint64_t seal_of(const brgemm_cpu_plan* p) {
  static const char key;
  const uint64_t words[] = {(uint64_t)(uintptr_t)&key,        (uint64_t)(uintptr_t)p,
                            (uint64_t)(uintptr_t)p->kernels,  (uint64_t)p->n_kernels,
                            (uint64_t)p->n_tensors,           (uint64_t)(uintptr_t)p->calls,
                            (uint64_t)p->n_calls,             (uint64_t)(uintptr_t)p->a_offs,
                            (uint64_t)(uintptr_t)p->b_offs,   (uint64_t)p->n_offs,
                            (uint64_t)(uintptr_t)p->ops,      (uint64_t)p->n_ops,
                            (uint64_t)(uintptr_t)p->task_begin, (uint64_t)p->n_tasks,
                            (uint64_t)(uintptr_t)p->phase_begin, (uint64_t)p->n_phases};
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); ++i) {
    h ^= words[i];
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
  }
  return h ? h : 1;
}

int brgemm_cpu_plan_seal(brgemm_cpu_plan* p) {
  if (!p) return BRGEMM_EINVAL;
  p->seal = 0;
  if (!plan_valid(p)) return BRGEMM_EINVAL;
  p->seal = seal_of(p);
  return BRGEMM_OK;
}

/* A run's plan and tensors: sealed as the plan is now, every slot bound. */
static int run_ok(const brgemm_cpu_plan* p, void* const* tensors) {
  if (!p || !tensors || !p->seal || p->seal != seal_of(p)) return 0;
  for (int32_t i = 0; i < p->n_tensors; ++i)
    if (!tensors[i]) return 0;
  return 1;
}

static int run_call(const brgemm_cpu_plan* p, const brgemm_plan_call* c, void* const* tensors,
                    int with_ops) {
  const brgemm_cpu_kernel* kr = p->kernels[c->kernel];
  char* cb = (char*)tensors[c->c] + c->c_off * brgemm_cpu_c_itemsize(kr);
  /* the plan stores offsets as uint64_t, libxsmm takes unsigned long long: same width */
  _Static_assert(sizeof(uint64_t) == sizeof(unsigned long long), "offset width");
  const brgemm_plan_op* ops = &p->ops[c->op_begin];
  int32_t count = c->op_count, before = 0;
  /* the call's copied operands made first, by this thread: they stay in its cache.
   * Even without the epilogue (the bare timing loop): the call reads them */
  for (; before < count && is_copy(ops[before].code); ++before)
    if (ops[before].code == BRGEMM_OP_COPY_AT)
      brgemm_cpu_copy_a(&ops[before], brgemm_cpu_dim(kr, 'k'), brgemm_cpu_dim(kr, 'a'), tensors);
    else
      brgemm_cpu_copy_b(&ops[before], brgemm_cpu_dim(kr, 'k'), brgemm_cpu_dim(kr, 'n'),
                        brgemm_cpu_dim(kr, 'b'), tensors);
  ops += before, count -= before;
  if (with_ops && count)
    brgemm_cpu_prefetch_ops(ops, count, brgemm_cpu_dim(kr, 'm'), brgemm_cpu_dim(kr, 'n'), tensors);
  int rc = brgemm_cpu_run_offs_bytes(kr, tensors[c->a], tensors[c->b],
                                     (const unsigned long long*)(p->a_offs + c->offs),
                                     (const unsigned long long*)(p->b_offs + c->offs), cb, c->count, 0);
  if (with_ops && rc == BRGEMM_OK && count)
    rc = brgemm_cpu_apply_ops(ops, count, (float*)cb,
                              brgemm_cpu_dim(kr, 'm'), brgemm_cpu_dim(kr, 'n'),
                              brgemm_cpu_dim(kr, 'c'), tensors);
  return rc;
}

/* Each OpenMP thread costs a stack; libgomp ends the process when it cannot
 * create one, and OMP_NUM_THREADS=100000 asks for that many. Past a few
 * threads per core nothing runs faster, so thread counts stop here. Counted
 * once: libgomp's omp_get_num_procs asks the kernel for the affinity mask
 * (a system call) each time, and every plan run and layout copy asks. */
int brgemm_cpu_max_threads(void) {
  static int cap;  /* 0 until counted; threads racing here store the same value */
  int c = __atomic_load_n(&cap, __ATOMIC_RELAXED);
  if (!c) {
    c = 4 * omp_get_num_procs();
    c = c < 8 ? 8 : c > 1024 ? 1024 : c;
    __atomic_store_n(&cap, c, __ATOMIC_RELAXED);
  }
  return c;
}

int brgemm_cpu_plan_threads(int threads) {
  const int want = threads > 0 ? threads : omp_get_max_threads(), cap = brgemm_cpu_max_threads();
  return want < 1 ? 1 : want > cap ? cap : want;
}

void brgemm_cpu_set_threads(int threads) {
  if (threads > 0) omp_set_num_threads(brgemm_cpu_plan_threads(threads));
}

int brgemm_cpu_plan_run(const brgemm_cpu_plan* p, void* const* tensors, int threads) {
  if (!run_ok(p, tensors)) return BRGEMM_EINVAL;
  int err = BRGEMM_OK;
#pragma omp parallel num_threads(brgemm_cpu_plan_threads(threads))
  {
    for (int64_t ph = 0; ph < p->n_phases; ++ph) {
#pragma omp for schedule(static)
      for (int64_t t = p->phase_begin[ph]; t < p->phase_begin[ph + 1]; ++t)
        for (int64_t i = p->task_begin[t]; i < p->task_begin[t + 1]; ++i) {
          int rc = run_call(p, &p->calls[i], tensors, 1);
          if (rc != BRGEMM_OK) {
#pragma omp atomic write
            err = rc;
          }
        }
    }
    brgemm_amx_release();  /* this thread's tiles, before OpenMP hands it to other code */
  }
  return err;
}

int brgemm_cpu_plan_time_bare(const brgemm_cpu_plan* p, void* const* tensors, int64_t reps,
                              double* seconds) {
  if (!seconds || reps < 1 || !run_ok(p, tensors)) return BRGEMM_EINVAL;
  double t0 = omp_get_wtime();
  for (int64_t r = 0; r < reps; ++r)
    for (int64_t i = 0; i < p->n_calls; ++i) {
      int rc = run_call(p, &p->calls[i], tensors, 0);
      if (rc != BRGEMM_OK) {
        brgemm_amx_release();
        return rc;
      }
    }
  brgemm_amx_release();
  *seconds = omp_get_wtime() - t0;
  return BRGEMM_OK;
}
