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

/* whether a, b, c are of the bound geometry, c writeable */
static int bound_matches(const brgemm_cpu_bound* bound, intptr_t a, intptr_t b, intptr_t c) {
  return matches(&bound->arrays[0], a) && matches(&bound->arrays[1], b) &&
         matches(&bound->arrays[2], c) &&
         (PyArray_FLAGS((PyArrayObject*)c) & NPY_ARRAY_WRITEABLE);
}

static int bound_kernel(const brgemm_cpu_bound* bound, intptr_t a, intptr_t b, intptr_t c) {
  return brgemm_cpu_run_strd(bound->kernel, PyArray_DATA((PyArrayObject*)a),
                             PyArray_DATA((PyArrayObject*)b), PyArray_DATA((PyArrayObject*)c),
                             bound->count, bound->b_packed, 1);
}

int brgemm_cpu_bound_run(const brgemm_cpu_bound* bound, intptr_t a, intptr_t b, intptr_t c) {
  if (!bound_matches(bound, a, b, c)) return BRGEMM_EGEOMETRY;
  return bound_kernel(bound, a, b, c);
}

/* ---- the bound call as a Python function: run(A, B, C) -> code ----
 * A builtin function object whose self is a capsule owning the binding: a
 * call costs Python's vectorcall of a builtin, where cffi's call of
 * brgemm_cpu_bound_run converts four arguments and the caller takes three
 * id()s. The arrays are compared with the GIL held; the kernel runs without
 * it, as cffi's calls do. */
static void capsule_free(PyObject* capsule) { free(PyCapsule_GetPointer(capsule, NULL)); }

static PyObject* bound_function_call(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  const brgemm_cpu_bound* bound = (const brgemm_cpu_bound*)PyCapsule_GetPointer(self, NULL);
  int rc = BRGEMM_EGEOMETRY;
  if (bound && nargs == 3 &&
      bound_matches(bound, (intptr_t)args[0], (intptr_t)args[1], (intptr_t)args[2])) {
    Py_BEGIN_ALLOW_THREADS
    rc = bound_kernel(bound, (intptr_t)args[0], (intptr_t)args[1], (intptr_t)args[2]);
    Py_END_ALLOW_THREADS
  }
  return PyLong_FromLong(rc);
}

static PyMethodDef bound_function_def = {"bound_run", (PyCFunction)(void (*)(void))bound_function_call,
                                         METH_FASTCALL, "run(A, B, C) -> 0 or a BRGEMM_E* code"};

int brgemm_cpu_bound_function(brgemm_cpu_bound* bound, intptr_t list) {
  PyGILState_STATE gil = PyGILState_Ensure();  /* cffi called this without the GIL */
  int rc = BRGEMM_ENOMEM;
  PyObject* capsule = PyCapsule_New(bound, NULL, capsule_free);
  if (!capsule) {
    free(bound);
  } else {
    PyObject* fn = PyCFunction_New(&bound_function_def, capsule);
    Py_DECREF(capsule);  /* fn holds it, or it goes now and frees bound */
    if (fn && PyList_Append((PyObject*)list, fn) == 0) rc = BRGEMM_OK;
    Py_XDECREF(fn);
  }
  if (rc != BRGEMM_OK) PyErr_Clear();
  PyGILState_Release(gil);
  return rc;
}
