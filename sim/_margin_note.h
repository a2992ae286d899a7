/* Margin.note(slack) (sim/kv/margin.py), compiled: the extensions that take a capacity decision
 * themselves note its slack as the Python would, in the same margin.
 *
 *     slack >= 0: passed, pass_min = min(pass_min, slack)     slack < 0: failed, fail_max = max(...)
 *
 * On an instance of exactly `margin_type` (sim.kv.margin.Margin, handed over by the caller) the
 * two slots are read and written in place (sim/_slot_attr.h); on anything else its own note()
 * is called; on None (a pool that records nothing) only the comparison is made.
 */
#ifndef KVSIM_MARGIN_NOTE_H
#define KVSIM_MARGIN_NOTE_H

#include "_slot_attr.h"

static PyObject *mn_pass_min, *mn_fail_max;
static SlotCache mn_pmin, mn_fmax;

static int margin_note_init(void) {
    mn_pass_min = PyUnicode_InternFromString("pass_min");
    mn_fail_max = PyUnicode_InternFromString("fail_max");
    return (mn_pass_min && mn_fail_max) ? 0 : -1;
}

/* 1 passed, 0 failed, -1 error */
static int margin_note(PyObject *m, PyObject *margin_type, long long slack) {
    if (m == Py_None) return slack >= 0;
    if ((PyObject *)Py_TYPE(m) != margin_type) {
        PyObject *r = PyObject_CallMethod(m, "note", "L", slack);
        if (r == NULL) return -1;
        int ok = PyObject_IsTrue(r);
        Py_DECREF(r);
        return ok;
    }
    PyObject *name = slack >= 0 ? mn_pass_min : mn_fail_max;
    SlotCache *c = slack >= 0 ? &mn_pmin : &mn_fmax;
    PyObject *v = slot_get(m, name, c);
    if (v == NULL) return -1;
    long long old = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if (old == -1 && PyErr_Occurred()) return -1;
    if (slack >= 0 ? slack < old : slack > old) {
        PyObject *nv = PyLong_FromLongLong(slack);
        if (nv == NULL) return -1;
        int rc = slot_set(m, name, nv, c);
        Py_DECREF(nv);
        if (rc < 0) return -1;
    }
    return slack >= 0;
}

#endif
