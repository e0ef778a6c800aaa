/* What the bound call (bound_call.c) and the bound plan run (bound_plan.c)
 * share: a binding, a struct of the caller's, owned by a capsule that is the
 * self of a builtin function, handed to Python by appending the builtin to a
 * list the cffi caller reads it back from. Internal: needs Python.h first,
 * and the GIL held (cffi calls the bind functions without it). */
#ifndef BRGEMM_BOUND_BUILTIN_H
#define BRGEMM_BOUND_BUILTIN_H
#include <stdlib.h>

#include "brgemm_cpu.h"

/* A zeroed binding of `size` bytes in *binding and the capsule that owns it
 * (destructor frees it, with whatever was put in it); NULL where memory ran
 * out (nothing is left, no Python error set). */
static inline PyObject* brgemm_bound_new(size_t size, PyCapsule_Destructor destructor,
                                         void** binding) {
  void* b = calloc(1, size);
  PyObject* capsule = b ? PyCapsule_New(b, NULL, destructor) : NULL;
  if (!capsule) {
    free(b);
    PyErr_Clear();
    return NULL;
  }
  *binding = b;
  return capsule;
}

/* Where `filled` (the binding is complete): def made a builtin over capsule
 * and appended to list. This reference to capsule goes either way (the
 * builtin holds its own, else the binding goes with it). BRGEMM_OK, or
 * BRGEMM_EINVAL with any Python error cleared. */
static inline int brgemm_bound_publish(PyMethodDef* def, PyObject* capsule, int filled,
                                       PyObject* list) {
  int rc = BRGEMM_EINVAL;
  if (filled) {
    PyObject* fn = PyCFunction_New(def, capsule);
    if (fn && PyList_Append(list, fn) == 0) rc = BRGEMM_OK;
    Py_XDECREF(fn);
  }
  Py_DECREF(capsule);
  if (rc != BRGEMM_OK) PyErr_Clear();
  return rc;
}
#endif
