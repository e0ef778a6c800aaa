/* A plan's run with Plan.check's tests in C, for brgemm.plan.Plan.run on the
 * CPU (brgemm/backend/cpu.py): checking a run's arrays in Python cost more
 * than a small plan's C work. The bound run is a Python builtin taking the
 * run's dict of arrays; it runs the plan only where every test passes and
 * otherwise touches nothing, leaving Plan.check to say what is wrong (or to
 * accept what C is stricter about, such as an ndarray subclass). Part of
 * the cffi cdef, as brgemm_cpu.h (brgemm/_build_cpu.py drops lines
 * starting '#'). */
#ifndef BRGEMM_BOUND_PLAN_H
#define BRGEMM_BOUND_PLAN_H
#include <stdint.h>

#include "brgemm_cpu.h"

/* Bind `plan`'s run to its tensors: the tuple at `names` (str, slot order),
 * the tuple at `dtypes` (the numpy.dtype object each slot takes), extent[i]
 * (elements slot i must hold), itemsize[i] (bytes of an element of
 * dtypes[i]) and written[i] (nonzero: the plan writes slot
 * i); ndarray: the address of numpy.ndarray. Appends to the Python list at
 * `list` a builtin run(arrays, threads) returning BRGEMM_EGEOMETRY, touching
 * nothing, unless `arrays` is a dict of exactly those names, each an
 * ndarray (not a subclass) whose dtype is that very object, C-contiguous,
 * of at least its extent, writeable where written, and no written array's
 * bytes meet another's (exact for C-contiguous arrays); else
 * brgemm_cpu_plan_run's code, run without the GIL. The caller keeps the
 * plan alive while run lives. Returns BRGEMM_OK, else binds nothing:
 * BRGEMM_ENOMEM, or BRGEMM_EINVAL for arguments of the wrong kinds. */
int brgemm_cpu_bind_plan(const brgemm_cpu_plan* plan, intptr_t names, intptr_t dtypes,
                         const int64_t* extent, const int64_t* itemsize,
                         const int8_t* written, intptr_t ndarray, intptr_t list);

#endif
