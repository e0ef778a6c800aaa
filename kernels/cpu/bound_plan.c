/* A plan's run with its arrays checked in C (see bound_plan.h). Reads only
 * the NumPy array fields that NumPy's inline accessors read; no NumPy
 * function is called, so the module needs no import_array. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/ndarraytypes.h>
#include <stdlib.h>

#include "bound_builtin.h"
#include "bound_plan.h"

enum { MAX_TENSORS = 64 };  /* more: bind nothing (Plan.check and the cffi call serve) */

typedef struct {
  const brgemm_cpu_plan* plan;
  PyTypeObject* ndarray;
  Py_ssize_t n;
  PyObject* names[MAX_TENSORS];  /* owned */
  PyObject* dtypes[MAX_TENSORS]; /* owned */
  npy_intp extent[MAX_TENSORS];
  npy_intp itemsize[MAX_TENSORS];  /* of dtypes[i] (NumPy 2 reads it through import_array) */
  int written[MAX_TENSORS];
} bound_plan;

static void capsule_free(PyObject* capsule) {
  bound_plan* bound = (bound_plan*)PyCapsule_GetPointer(capsule, NULL);
  for (Py_ssize_t i = 0; i < bound->n; i++) {
    Py_XDECREF(bound->names[i]);
    Py_XDECREF(bound->dtypes[i]);
  }
  free(bound);
}

/* run(arrays, threads): see bound_plan.h. Tests with the GIL held; runs without. */
static PyObject* bound_run(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  const bound_plan* bound = (const bound_plan*)PyCapsule_GetPointer(self, NULL);
  if (nargs != 2 || !PyDict_CheckExact(args[0]) || !PyLong_CheckExact(args[1]) ||
      PyDict_GET_SIZE(args[0]) != bound->n)
    return PyLong_FromLong(BRGEMM_EGEOMETRY);
  int threads = (int)PyLong_AsLong(args[1]);
  if (threads == -1 && PyErr_Occurred()) return NULL;
  void* data[MAX_TENSORS];
  char* end[MAX_TENSORS];
  for (Py_ssize_t i = 0; i < bound->n; i++) {
    PyObject* obj = PyDict_GetItemWithError(args[0], bound->names[i]);  /* borrowed */
    if (!obj) {
      if (PyErr_Occurred()) return NULL;
      return PyLong_FromLong(BRGEMM_EGEOMETRY);
    }
    PyArrayObject* x = (PyArrayObject*)obj;
    /* the type first: only an ndarray has array fields */
    if (Py_TYPE(obj) != bound->ndarray || (PyObject*)PyArray_DESCR(x) != bound->dtypes[i] ||
        !(PyArray_FLAGS(x) & NPY_ARRAY_C_CONTIGUOUS) ||
        (bound->written[i] && !(PyArray_FLAGS(x) & NPY_ARRAY_WRITEABLE)))
      return PyLong_FromLong(BRGEMM_EGEOMETRY);
    npy_intp size = 1;
    for (int d = 0; d < PyArray_NDIM(x); d++) size *= PyArray_DIMS(x)[d];
    if (size < bound->extent[i]) return PyLong_FromLong(BRGEMM_EGEOMETRY);
    data[i] = PyArray_DATA(x);
    end[i] = (char*)data[i] + size * bound->itemsize[i];
  }
  /* a C-contiguous array's elements fill [data, end) exactly */
  for (Py_ssize_t i = 0; i < bound->n; i++) {
    if (!bound->written[i] || (char*)data[i] == end[i]) continue;
    for (Py_ssize_t j = 0; j < bound->n; j++)
      if (j != i && (char*)data[j] != end[j] && (char*)data[i] < end[j] &&
          (char*)data[j] < end[i])
        return PyLong_FromLong(BRGEMM_EGEOMETRY);
  }
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = brgemm_cpu_plan_run(bound->plan, data, threads);
  Py_END_ALLOW_THREADS
  return PyLong_FromLong(rc);
}

static PyMethodDef bound_run_def = {"bound_plan_run", (PyCFunction)(void (*)(void))bound_run,
                                    METH_FASTCALL, "run(arrays, threads) -> 0 or a BRGEMM_E* code"};

/* bound's fields from the plan's tensors (tuples of names and dtypes, in the
 * plan's order) and their sizes: 1, or 0 where they do not fit it (bound
 * partly filled; capsule_free releases what is in it) */
static int fill(bound_plan* bound, const brgemm_cpu_plan* plan, PyObject* n, PyObject* d,
                const int64_t* extent, const int64_t* itemsize, const int8_t* written,
                PyObject* ndarray) {
  if (!PyTuple_Check(n) || !PyTuple_Check(d) || PyTuple_GET_SIZE(n) != PyTuple_GET_SIZE(d) ||
      PyTuple_GET_SIZE(n) > MAX_TENSORS || PyTuple_GET_SIZE(n) != plan->n_tensors ||
      !PyType_Check(ndarray))
    return 0;
  bound->plan = plan;
  bound->ndarray = (PyTypeObject*)ndarray;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(n); i++) {
    PyObject *name = PyTuple_GET_ITEM(n, i), *dtype = PyTuple_GET_ITEM(d, i);
    if (!PyUnicode_CheckExact(name)) return 0;
    Py_INCREF(name);
    Py_INCREF(dtype);
    bound->names[i] = name, bound->dtypes[i] = dtype, bound->n = i + 1;
    bound->extent[i] = (npy_intp)extent[i], bound->itemsize[i] = (npy_intp)itemsize[i];
    bound->written[i] = written[i] != 0;
  }
  return 1;
}

int brgemm_cpu_bind_plan(const brgemm_cpu_plan* plan, intptr_t names, intptr_t dtypes,
                         const int64_t* extent, const int64_t* itemsize,
                         const int8_t* written, intptr_t ndarray, intptr_t list) {
  PyGILState_STATE gil = PyGILState_Ensure();  /* cffi calls this without the GIL */
  bound_plan* bound = NULL;
  PyObject* capsule = brgemm_bound_new(sizeof(*bound), capsule_free, (void**)&bound);
  int rc = BRGEMM_ENOMEM;
  if (capsule) {
    const int filled = fill(bound, plan, (PyObject*)names, (PyObject*)dtypes, extent, itemsize,
                            written, (PyObject*)ndarray);
    rc = brgemm_bound_publish(&bound_run_def, capsule, filled, (PyObject*)list);
  }
  PyGILState_Release(gil);
  return rc;
}
