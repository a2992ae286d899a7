/* Step records from StepRecord tuples, and request columns from requests, compiled: an optional
 * accelerator for sim/io/records.py and sim/io/results.py.
 *
 *   fill_records(rows, out[, start, end])
 *       Write the tuples rows[start:end] of list `rows` (all of them by default) into `out`, an
 *       int64 array of (end - start) x 17 values (a STEP_DTYPE array viewed as int64): fields 1
 *       and 2 (start_s, duration_s) as float64 bits, the others as int64. The same values
 *       np.fromiter(rows[start:end], STEP_DTYPE) writes (it converts field by field through
 *       numpy's generic setters, about 40 ns a field).
 *
 * A field that is not a number raises TypeError, as fromiter would; nothing is truncated.
 *
 *   gather_attrs(objs, names, out, floats)
 *       Write getattr(objs[i], names[k]) into out[i, k] for every object of list `objs` and every
 *       name of tuple `names`: `out` a C-contiguous len(objs) x len(names) array of float64
 *       (floats true: PyFloat_AsDouble) or int64 (PyLong_AsLongLong, so an int or an int enum).
 *       The values np.fromiter(chain(map(attrgetter(*names), objs)), dtype) writes; the
 *       attributes are read at their slots (sim/_slot_attr.h), one cache per name.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../_slot_attr.h"

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

#define MAX_NAMES 32

static PyObject *gather_attrs(PyObject *self, PyObject *args) {
    PyObject *objs, *names, *o_out;
    int floats;
    if (!PyArg_ParseTuple(args, "O!O!Op", &PyList_Type, &objs, &PyTuple_Type, &names, &o_out, &floats)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(objs), m = PyTuple_GET_SIZE(names);
    if (m < 1 || m > MAX_NAMES) {
        PyErr_Format(PyExc_ValueError, "gather_attrs: 1 to %d names, not %zd", MAX_NAMES, m);
        return NULL;
    }
    for (Py_ssize_t k = 0; k < m; k++)
        if (!PyUnicode_Check(PyTuple_GET_ITEM(names, k))) {
            PyErr_SetString(PyExc_TypeError, "gather_attrs: names are str");
            return NULL;
        }
    Py_buffer v;
    if (PyObject_GetBuffer(o_out, &v, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) return NULL;
    if (v.len != n * m * 8) {
        PyBuffer_Release(&v);
        PyErr_Format(PyExc_ValueError, "gather_attrs: need %zd bytes for %zd x %zd values", n * m * 8, n, m);
        return NULL;
    }
    SlotCache cache[MAX_NAMES] = {{0}};
    char *out = v.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PyList_GET_ITEM(objs, i);
        for (Py_ssize_t k = 0; k < m; k++) {
            PyObject *x = slot_get(o, PyTuple_GET_ITEM(names, k), &cache[k]);
            if (x == NULL) goto fail;
            char *at = out + (i * m + k) * 8;
            if (floats) {
                double d = PyFloat_AsDouble(x);
                Py_DECREF(x);
                if (d == -1.0 && PyErr_Occurred()) goto fail;
                memcpy(at, &d, 8);
            } else {
                long long y = PyLong_AsLongLong(x);
                Py_DECREF(x);
                if (y == -1 && PyErr_Occurred()) goto fail;
                int64_t z = y;
                memcpy(at, &z, 8);
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
    {"gather_attrs", gather_attrs, METH_VARARGS, "Write attributes of a list of objects into a 2-d array (see the source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_records",
                                    "Step records from StepRecord tuples and request columns from requests, compiled.", -1, methods};

PyMODINIT_FUNC PyInit__records(void) { return PyModule_Create(&module); }
