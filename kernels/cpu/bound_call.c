/* The stride form bound to a geometry of NumPy arrays (see bound_call.h).
 * Only the fields NumPy's C API reads through its inline accessors; no NumPy
 * function is called, so the module needs no import_array. The bound call is
 * a builtin function whose self is a capsule owning the binding: a call costs
 * Python's vectorcall of a builtin, where a cffi function converts each
 * argument (the arrays as id()s) and the caller's Python would read a
 * PackedB's weak reference and data. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/ndarraytypes.h>
#include <structmember.h>
#include <stdlib.h>
#include <string.h>

#include "bound_builtin.h"
#include "bound_call.h"

enum { MAX_DIMS = 3 };

typedef struct {
  const PyTypeObject* type;
  const PyArray_Descr* descr;
  int nd;
  npy_intp dims[MAX_DIMS], strides[MAX_DIMS];
} geometry;

typedef struct {
  const brgemm_cpu_kernel* kernel;
  int64_t count;
  int b_packed;
  geometry arrays[3];  /* A, B (a PackedB's data), C */
  PyObject* packed;  /* a weak reference to the bound PackedB, or NULL for an array B */
  Py_ssize_t data_offset;  /* where a PackedB object holds its data array */
} brgemm_cpu_bound;

static int record(geometry* g, PyObject* obj) {
  PyArrayObject* x = (PyArrayObject*)obj;
  g->nd = PyArray_NDIM(x);
  if (g->nd > MAX_DIMS) return 0;
  g->type = Py_TYPE(obj);
  g->descr = PyArray_DESCR(x);
  memcpy(g->dims, PyArray_DIMS(x), (size_t)g->nd * sizeof(npy_intp));
  memcpy(g->strides, PyArray_STRIDES(x), (size_t)g->nd * sizeof(npy_intp));
  return 1;
}

/* the type first: only an object of the bound ndarray type has array fields */
static int matches(const geometry* g, PyObject* obj) {
  if (Py_TYPE(obj) != g->type) return 0;
  PyArrayObject* x = (PyArrayObject*)obj;
  return PyArray_NDIM(x) == g->nd && PyArray_DESCR(x) == g->descr &&
         !memcmp(PyArray_DIMS(x), g->dims, (size_t)g->nd * sizeof(npy_intp)) &&
         !memcmp(PyArray_STRIDES(x), g->strides, (size_t)g->nd * sizeof(npy_intp));
}

/* The array B stands for: B itself, or where bound to a PackedB, that same
 * PackedB's data (NULL for any other object) */
static PyObject* b_array(const brgemm_cpu_bound* bound, PyObject* b) {
  if (!bound->packed) return b;
  /* a dead reference reads None, and None has no data slot to read */
  PyObject* live = PyWeakref_GET_OBJECT(bound->packed);
  if (live == Py_None || live != b) return NULL;
  return *(PyObject**)((char*)b + bound->data_offset);  /* NULL if the slot is empty */
}

static void capsule_free(PyObject* capsule) {
  brgemm_cpu_bound* bound = (brgemm_cpu_bound*)PyCapsule_GetPointer(capsule, NULL);
  Py_XDECREF(bound->packed);
  free(bound);
}

/* run(A, B, C): 0, EGEOMETRY (touching nothing) unless A, B and C are of the
 * bound geometry and C writeable, else brgemm_cpu_run_strd's code. The
 * arrays are compared with the GIL held; the kernel runs without it. */
static PyObject* bound_run(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  const brgemm_cpu_bound* bound = (const brgemm_cpu_bound*)PyCapsule_GetPointer(self, NULL);
  if (nargs != 3) return PyLong_FromLong(BRGEMM_EGEOMETRY);
  int rc = BRGEMM_EGEOMETRY;
  PyObject *a = args[0], *b = b_array(bound, args[1]), *c = args[2];
  if (b && matches(&bound->arrays[0], a) && matches(&bound->arrays[1], b) &&
      matches(&bound->arrays[2], c) && (PyArray_FLAGS((PyArrayObject*)c) & NPY_ARRAY_WRITEABLE)) {
    void *pa = PyArray_DATA((PyArrayObject*)a), *pb = PyArray_DATA((PyArrayObject*)b),
         *pc = PyArray_DATA((PyArrayObject*)c);
    Py_BEGIN_ALLOW_THREADS
    rc = brgemm_cpu_run_strd(bound->kernel, pa, pb, pc, bound->count, bound->b_packed, 1);
    Py_END_ALLOW_THREADS
  }
  return PyLong_FromLong(rc);
}

static PyMethodDef bound_run_def = {"bound_run", (PyCFunction)(void (*)(void))bound_run,
                                    METH_FASTCALL, "run(A, B, C) -> 0 or a BRGEMM_E* code"};

/* where objects of the PackedB's type hold `data`: a slot (PackedB's
 * __slots__), else -1 */
static Py_ssize_t data_slot(PyObject* packed) {
  PyObject* descr = PyObject_GetAttrString((PyObject*)Py_TYPE(packed), "data");
  Py_ssize_t offset = -1;
  if (descr && Py_IS_TYPE(descr, &PyMemberDescr_Type) &&
      ((PyMemberDescrObject*)descr)->d_member->type == T_OBJECT_EX)
    offset = ((PyMemberDescrObject*)descr)->d_member->offset;
  Py_XDECREF(descr);
  return offset;
}

/* bound's fields: the kernel, the arrays' geometries and (packed, not 0) the
 * PackedB whose data B is; 1, or 0 where they cannot be bound (bound partly
 * filled; capsule_free releases what is in it) */
static int fill(brgemm_cpu_bound* bound, const brgemm_cpu_kernel* kernel, PyObject* a,
                PyObject* b, PyObject* c, int64_t count, int b_packed, PyObject* packed) {
  bound->kernel = kernel, bound->count = count, bound->b_packed = b_packed;
  if (!record(&bound->arrays[0], a) || !record(&bound->arrays[1], b) ||
      !record(&bound->arrays[2], c))
    return 0;
  if (packed) {
    bound->data_offset = data_slot(packed);
    if (bound->data_offset < 0 || *(PyObject**)((char*)packed + bound->data_offset) != b)
      return 0;
    bound->packed = PyWeakref_NewRef(packed, NULL);
    if (!bound->packed) return 0;
  }
  return 1;
}

int brgemm_cpu_bind_strd(const brgemm_cpu_kernel* kernel, intptr_t a, intptr_t b, intptr_t c,
                         int64_t count, int b_packed, intptr_t packed, intptr_t list) {
  PyGILState_STATE gil = PyGILState_Ensure();  /* cffi calls this without the GIL */
  brgemm_cpu_bound* bound = NULL;
  PyObject* capsule = brgemm_bound_new(sizeof(*bound), capsule_free, (void**)&bound);
  int rc = BRGEMM_ENOMEM;
  if (capsule) {
    const int filled = fill(bound, kernel, (PyObject*)a, (PyObject*)b, (PyObject*)c, count,
                            b_packed, (PyObject*)packed);
    rc = brgemm_bound_publish(&bound_run_def, capsule, filled, (PyObject*)list);
  }
  PyGILState_Release(gil);
  return rc;
}
