/* The stride form bound to the geometry of three NumPy arrays, for
 * brgemm.Kernel.__call__ (brgemm/backend/cpu.py): the Python checks accept
 * the arrays once, and C compares every later call's arrays with what they
 * accepted (type, dtype, shape, strides, C writeable), reading each array's
 * data pointer afresh. The bound call is a Python builtin taking the
 * arrays themselves; C reads their type and, where that is the bound ndarray
 * type, their NumPy array fields. Part of the
 * cffi cdef, as brgemm_cpu.h (brgemm/_build_cpu.py drops lines starting '#'). */
#ifndef BRGEMM_BOUND_CALL_H
#define BRGEMM_BOUND_CALL_H
#include <stdint.h>

#include "brgemm_cpu.h"

/* Bind kernel's stride form (count blocks, b_packed as brgemm_cpu_run_strd) to
 * the geometry of the arrays at a, b, c, which the checks accepted for it, and
 * append to the Python list at `list` a builtin function run(A, B, C) that
 * runs it: BRGEMM_EGEOMETRY, touching nothing, unless each argument is of its
 * bound type, dtype, shape and strides and C is writeable; else
 * brgemm_cpu_run_strd on their data with check_overlap. packed: the address
 * of the PackedB whose data b is (0 for an array B); then run takes that same
 * PackedB as B (another object: EGEOMETRY) and compares its data. The caller
 * keeps the arrays' types and dtypes and the kernel alive while run lives (C
 * compares them by address); run keeps no argument alive. Returns BRGEMM_OK,
 * else binds nothing: BRGEMM_ENOMEM, or BRGEMM_EINVAL where an array has more
 * than three dimensions. */
int brgemm_cpu_bind_strd(const brgemm_cpu_kernel* kernel, intptr_t a, intptr_t b, intptr_t c,
                         int64_t count, int b_packed, intptr_t packed, intptr_t list);

#endif
