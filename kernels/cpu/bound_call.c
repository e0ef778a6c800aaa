/* The stride form bound to a geometry of NumPy arrays (see bound_call.h).
 * Only the fields NumPy's C API reads through its inline accessors; no NumPy
 * function is called, so the module needs no import_array. cffi calls these
 * without the GIL: the objects stay alive (the caller's arguments), and a
 * thread that changes an array's geometry meanwhile at worst leaves the old
 * one checked, on the same memory, which stays valid for it. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/ndarraytypes.h>
#include <stdlib.h>
#include <string.h>

#include "bound_call.h"

enum { MAX_DIMS = 3 };

typedef struct {
  const PyTypeObject* type;
  const PyArray_Descr* descr;
  int nd;
  npy_intp dims[MAX_DIMS], strides[MAX_DIMS];
} geometry;

struct brgemm_cpu_bound {
  const brgemm_cpu_kernel* kernel;
  int64_t count;
  int b_packed;
  geometry arrays[3];  /* A, B, C */
};

static int record(geometry* g, intptr_t obj) {
  PyArrayObject* x = (PyArrayObject*)obj;
  g->nd = PyArray_NDIM(x);
  if (g->nd > MAX_DIMS) return 0;
  g->type = Py_TYPE((PyObject*)obj);
  g->descr = PyArray_DESCR(x);
  memcpy(g->dims, PyArray_DIMS(x), (size_t)g->nd * sizeof(npy_intp));
  memcpy(g->strides, PyArray_STRIDES(x), (size_t)g->nd * sizeof(npy_intp));
  return 1;
}

/* the type first: only an object of the bound ndarray type has array fields */
static int matches(const geometry* g, intptr_t obj) {
  if (Py_TYPE((PyObject*)obj) != g->type) return 0;
  PyArrayObject* x = (PyArrayObject*)obj;
  return PyArray_NDIM(x) == g->nd && PyArray_DESCR(x) == g->descr &&
         !memcmp(PyArray_DIMS(x), g->dims, (size_t)g->nd * sizeof(npy_intp)) &&
         !memcmp(PyArray_STRIDES(x), g->strides, (size_t)g->nd * sizeof(npy_intp));
}

brgemm_cpu_bound* brgemm_cpu_bind_strd(const brgemm_cpu_kernel* kernel, intptr_t a, intptr_t b,
                                       intptr_t c, int64_t count, int b_packed) {
  brgemm_cpu_bound* bound = (brgemm_cpu_bound*)calloc(1, sizeof(*bound));
  if (!bound) return NULL;
  bound->kernel = kernel, bound->count = count, bound->b_packed = b_packed;
  if (!record(&bound->arrays[0], a) || !record(&bound->arrays[1], b) ||
      !record(&bound->arrays[2], c)) {
    free(bound);
    return NULL;
  }
  return bound;
}

void brgemm_cpu_bound_free(brgemm_cpu_bound* bound) { free(bound); }

int brgemm_cpu_bound_run(const brgemm_cpu_bound* bound, intptr_t a, intptr_t b, intptr_t c) {
  if (!matches(&bound->arrays[0], a) || !matches(&bound->arrays[1], b) ||
      !matches(&bound->arrays[2], c) ||
      !(PyArray_FLAGS((PyArrayObject*)c) & NPY_ARRAY_WRITEABLE))
    return BRGEMM_EGEOMETRY;
  return brgemm_cpu_run_strd(bound->kernel, PyArray_DATA((PyArrayObject*)a),
                             PyArray_DATA((PyArrayObject*)b), PyArray_DATA((PyArrayObject*)c),
                             bound->count, bound->b_packed, 1);
}
