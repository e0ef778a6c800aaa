/* The stride form bound to the geometry of three NumPy arrays, for
 * brgemm.Kernel.__call__ (brgemm/backend/cpu.py): the Python checks accept
 * the arrays once, and C compares every later call's arrays with what they
 * accepted (type, dtype, shape, strides, C writeable), reading each array's
 * data pointer afresh. Arrays are passed as the addresses of live Python
 * objects (Python's id() of the call's arguments); C reads their type and,
 * where that is the bound ndarray type, their NumPy array fields. Part of the
 * cffi cdef, as brgemm_cpu.h (brgemm/_build_cpu.py drops lines starting '#'). */
#ifndef BRGEMM_BOUND_CALL_H
#define BRGEMM_BOUND_CALL_H
#include <stdint.h>

#include "brgemm_cpu.h"

typedef struct brgemm_cpu_bound brgemm_cpu_bound;

/* Bind kernel's stride form (count blocks, b_packed as brgemm_cpu_run_strd) to
 * the geometry of the arrays at a, b, c, which the checks accepted for it. The
 * caller keeps the arrays' types and dtypes alive while the binding lives (C
 * compares them by address). NULL when out of memory or an array has more
 * than three dimensions: then bind nothing. */
brgemm_cpu_bound* brgemm_cpu_bind_strd(const brgemm_cpu_kernel* kernel, intptr_t a, intptr_t b,
                                       intptr_t c, int64_t count, int b_packed);
void brgemm_cpu_bound_free(brgemm_cpu_bound* bound);

/* The bound call on the objects at a, b, c (alive during the call):
 * BRGEMM_EGEOMETRY, touching nothing, unless each is of its bound type, dtype,
 * shape and strides and c is writeable; else brgemm_cpu_run_strd on their
 * data with check_overlap. */
int brgemm_cpu_bound_run(const brgemm_cpu_bound* bound, intptr_t a, intptr_t b, intptr_t c);

/* The same call as a Python builtin function run(A, B, C) (the arrays
 * themselves, no id()s), appended to the list at `list` (a live Python list):
 * it owns bound from here on, and frees it when the function goes (also when
 * making it fails: BRGEMM_ENOMEM, the list unchanged). */
int brgemm_cpu_bound_function(brgemm_cpu_bound* bound, intptr_t list);

#endif
