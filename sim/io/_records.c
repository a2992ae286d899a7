/* Step records from StepRecord tuples, compiled: an optional accelerator for sim/io/records.py.
 *
 *   fill_records(rows, out[, start, end])
 *       Write the tuples rows[start:end] of list `rows` (all of them by default) into `out`, an
 *       int64 array of (end - start) x 17 values (a STEP_DTYPE array viewed as int64): fields 1
 *       and 2 (start_s, duration_s) as float64 bits, the others as int64. The same values
 *       np.fromiter(rows[start:end], STEP_DTYPE) writes (it converts field by field through
 *       numpy's generic setters, about 40 ns a field).
 *
 * A field that is not a number raises TypeError, as fromiter would; nothing is truncated.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define NF 17

static PyObject *fill_records(PyObject *self, PyObject *args) {
    PyObject *rows, *o_out;
    Py_ssize_t start = 0, end = -1;
    if (!PyArg_ParseTuple(args, "O!O|nn", &PyList_Type, &rows, &o_out, &start, &end)) return NULL;
    if (end == -1) end = PyList_GET_SIZE(rows);
    if (start < 0 || end < start || end > PyList_GET_SIZE(rows)) {
        PyErr_Format(PyExc_IndexError, "fill_records: rows %zd:%zd of %zd", start, end, PyList_GET_SIZE(rows));
        return NULL;
    }
    Py_buffer v;
    if (PyObject_GetBuffer(o_out, &v, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) return NULL;
    Py_ssize_t n = end - start;
    if (v.len != n * NF * 8) {
        PyBuffer_Release(&v);
        PyErr_Format(PyExc_ValueError, "fill_records: need %zd bytes for %zd records", n * NF * 8, n);
        return NULL;
    }
    int64_t *out = v.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PyList_GET_ITEM(rows, start + i);
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != NF) {
            PyBuffer_Release(&v);
            PyErr_SetString(PyExc_TypeError, "fill_records: a step record is a tuple of 17 fields");
            return NULL;
        }
        int64_t *row = out + i * NF;
        for (int k = 0; k < NF; k++) {
            PyObject *x = PyTuple_GET_ITEM(t, k);
            if (k == 1 || k == 2) {
                double d = PyFloat_AsDouble(x);
                if (d == -1.0 && PyErr_Occurred()) goto fail;
                memcpy(&row[k], &d, 8);
            } else {
                long long y = PyLong_AsLongLong(x);
                if (y == -1 && PyErr_Occurred()) goto fail;
                row[k] = y;
            }
        }
    }
    PyBuffer_Release(&v);
    Py_RETURN_NONE;
fail:
    PyBuffer_Release(&v);
    return NULL;
}

static PyMethodDef methods[] = {
    {"fill_records", fill_records, METH_VARARGS, "Write StepRecord tuples into a record array (see the source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_records",
                                    "Step records from StepRecord tuples, compiled.", -1, methods};

PyMODINIT_FUNC PyInit__records(void) { return PyModule_Create(&module); }
