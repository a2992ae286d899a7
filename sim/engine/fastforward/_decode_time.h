/* A decode-only step's time from its folded terms (sim/cost/bulk.py's DecodeTerms), shared by
 * the compiled run layout (_run_layout.c) and the compiled quiet steps (_quiet_steps.c).
 *
 * step_time is the scalar expression of sim/cost/bulk.py's decode_step_time in its order of
 * operations, one IEEE operation at a time: both extensions are built without fused
 * multiply-add (-ffp-contract=off), so every float is the one numpy and Python compute.
 */
#ifndef KVSIM_DECODE_TIME_H
#define KVSIM_DECODE_TIME_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef struct {
    double dense, eta_attn, head, a_kv, a_fl, a_pg, roof, floor, tail, sched;
    int is_async;
} Terms;

static int get_terms(PyObject *obj, Terms *t) {
    PyObject *seq = PySequence_Fast(obj, "terms must be a DecodeTerms tuple");
    if (seq == NULL) return -1;
    if (PySequence_Fast_GET_SIZE(seq) != 11) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "DecodeTerms has 11 fields");
        return -1;
    }
    double v[10];
    for (int i = 0; i < 10; i++) {
        v[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, i));
        if (v[i] == -1.0 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
    }
    int a = PyObject_IsTrue(PySequence_Fast_GET_ITEM(seq, 10));
    Py_DECREF(seq);
    if (a < 0) return -1;
    *t = (Terms){v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], a};
    return 0;
}

static double step_time(const Terms *k, int64_t ctx, int64_t pages) {
    double c = (double)ctx;
    double t = c * k->a_kv;
    t = t + k->head;
    t = t + c * k->a_fl;
    t = t + (double)pages * k->a_pg;
    t = t * k->eta_attn;
    t = t + k->dense;
    if (t < k->roof) t = k->roof;
    if (t < k->floor) t = k->floor;
    t = t + k->tail;
    if (!k->is_async) return t + k->sched;
    return t > k->sched ? t : k->sched;
}

#endif
