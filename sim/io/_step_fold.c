/* The summary's step sums, folded row by row: an optional accelerator for sim/io/step_fold.py.
 *
 * State: acc float64[12] = w, wshare[5], share[5], saved; ic int64[2] = n, held_peak. Each row
 * (duration w; slots token, reserved, internal, external, free; blocks saved s) adds, in this
 * order, one IEEE operation at a time (the build turns off fused multiply-add):
 *
 *   pool = (double)(token + reserved + internal + external + free)
 *   acc[0] += w;  for each category c: share = (double)c / pool; acc[1+c] += share * w; acc[6+c] += share
 *   held = token + internal + reserved;  held_peak = max(held_peak, held)
 *   acc[11] += s / (s + max(held / B, 1))          (0 when s == 0)
 *   n += 1
 *
 * step_fold.fold_numpy does the same with np.add.accumulate (sequential sums), the reference.
 *
 *   fold_columns(w, token, reserved, internal, external, free, saved, acc, ic, B)
 *       rows from seven equally long 1-D columns (strided views of a record array will do)
 *   fold_tuples(rows, start, end, acc, ic, B)
 *       rows[start:end] of a list of StepRecord tuples (sim/io/records.py: duration at 2, the
 *       five categories at 9..13, blocks saved at 14)
 *   fold_run(ctx, cum, dts, a, b, lag, B, comp0, shared, usable, free0, nulls, acc, ic)
 *       rows a..b-1 of a run of quiet steps, from its arrays, as run_records.lay_out would lay
 *       them out (see that module), without laying them out
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    double *acc;
    int64_t *ic;
    double B;
} Sums;

/* one row from its five shares of the pool (each category / the pool's slots), its held slots
 * (token states + internal + reserved) and its blocks saved */
static inline void fold_shares(Sums *s, double w, const double share[5], int64_t held, double sv) {
    double *acc = s->acc;
    acc[0] = acc[0] + w;
    for (int c = 0; c < 5; c++) {
        double ws = share[c] * w;
        acc[1 + c] = acc[1 + c] + ws;
        acc[6 + c] = acc[6 + c] + share[c];
    }
    if (held > s->ic[1]) s->ic[1] = held;
    double hb = (double)held / s->B;
    if (hb < 1.0) hb = 1.0;
    acc[11] = acc[11] + sv / (sv + hb);
    s->ic[0] += 1;
}

static inline void fold_row(Sums *s, double w, int64_t tok, int64_t res, int64_t inl, int64_t ext,
                            int64_t fre, int64_t saved) {
    double pool = (double)(tok + res + inl + ext + fre);
    double share[5] = {(double)tok / pool, (double)res / pool, (double)inl / pool, (double)ext / pool,
                       (double)fre / pool};
    fold_shares(s, w, share, tok + inl + res, (double)saved);
}

/* a buffer of 8-byte items: 'f' float64, 'i' int64; 1-D, any stride */
static int get_col(PyObject *obj, Py_buffer *v, char kind, int writable) {
    int flags = PyBUF_FORMAT | PyBUF_STRIDES | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, v, flags) < 0) return -1;
    const char *f = v->format ? v->format : "B";
    if (f[0] == '<' || f[0] == '=' || f[0] == '@') f++;
    int ok = v->ndim == 1 && v->itemsize == 8 && f[1] == '\0' &&
             (kind == 'f' ? f[0] == 'd' : (f[0] == 'l' || f[0] == 'q'));
    if (!ok) {
        PyBuffer_Release(v);
        PyErr_Format(PyExc_ValueError, "step fold: a 1-D %s column expected", kind == 'f' ? "float64" : "int64");
        return -1;
    }
    return 0;
}

#define AT(v, T, i) (*(T *)((char *)(v).buf + (i) * (v).strides[0]))

static int get_state(PyObject *o_acc, PyObject *o_ic, Py_buffer *va, Py_buffer *vi, Sums *s, double B) {
    if (get_col(o_acc, va, 'f', 1) < 0) return -1;
    if (get_col(o_ic, vi, 'i', 1) < 0) {
        PyBuffer_Release(va);
        return -1;
    }
    if (va->shape[0] != 12 || vi->shape[0] != 2 || va->strides[0] != 8 || vi->strides[0] != 8) {
        PyBuffer_Release(va);
        PyBuffer_Release(vi);
        PyErr_SetString(PyExc_ValueError, "step fold: state is float64[12] and int64[2], contiguous");
        return -1;
    }
    s->acc = va->buf;
    s->ic = vi->buf;
    s->B = B;
    return 0;
}

static PyObject *fold_columns(PyObject *self, PyObject *args) {
    PyObject *o[7], *o_acc, *o_ic;
    long long B;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOL", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o_acc, &o_ic, &B))
        return NULL;
    Py_buffer v[7], va, vi;
    int got = 0;
    PyObject *result = NULL;
    for (; got < 7; got++)
        if (get_col(o[got], &v[got], got == 0 ? 'f' : 'i', 0) < 0) goto done;
    Py_ssize_t n = v[0].shape[0];
    for (int k = 1; k < 7; k++)
        if (v[k].shape[0] != n) {
            PyErr_SetString(PyExc_ValueError, "step fold: columns of different lengths");
            goto done;
        }
    Sums s;
    if (get_state(o_acc, o_ic, &va, &vi, &s, (double)B) < 0) goto done;
    for (Py_ssize_t i = 0; i < n; i++)
        fold_row(&s, AT(v[0], double, i), AT(v[1], int64_t, i), AT(v[2], int64_t, i), AT(v[3], int64_t, i),
                 AT(v[4], int64_t, i), AT(v[5], int64_t, i), AT(v[6], int64_t, i));
    PyBuffer_Release(&va);
    PyBuffer_Release(&vi);
    result = Py_NewRef(Py_None);
done:
    for (int k = 0; k < got; k++) PyBuffer_Release(&v[k]);
    return result;
}

static int tuple_int(PyObject *t, int i, int64_t *out) {
    long long x = PyLong_AsLongLong(PyTuple_GET_ITEM(t, i));
    if (x == -1 && PyErr_Occurred()) return -1;
    *out = x;
    return 0;
}

static PyObject *fold_tuples(PyObject *self, PyObject *args) {
    PyObject *rows, *o_acc, *o_ic;
    Py_ssize_t start, end;
    long long B;
    if (!PyArg_ParseTuple(args, "O!nnOOL", &PyList_Type, &rows, &start, &end, &o_acc, &o_ic, &B)) return NULL;
    if (start < 0 || end < start || end > PyList_GET_SIZE(rows)) {
        PyErr_SetString(PyExc_ValueError, "step fold: rows out of the list");
        return NULL;
    }
    Py_buffer va, vi;
    Sums s;
    if (get_state(o_acc, o_ic, &va, &vi, &s, (double)B) < 0) return NULL;
    PyObject *result = NULL;
    for (Py_ssize_t i = start; i < end; i++) {
        PyObject *t = PyList_GET_ITEM(rows, i);
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) < 15) {
            PyErr_SetString(PyExc_TypeError, "step fold: a step record is a tuple of 17 fields");
            goto done;
        }
        double w = PyFloat_AsDouble(PyTuple_GET_ITEM(t, 2));
        if (w == -1.0 && PyErr_Occurred()) goto done;
        int64_t v[6];
        for (int k = 0; k < 6; k++)
            if (tuple_int(t, 9 + k, &v[k]) < 0) goto done;
        fold_row(&s, w, v[0], v[1], v[2], v[3], v[4], v[5]);
    }
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&va);
    PyBuffer_Release(&vi);
    return result;
}

static PyObject *fold_run(PyObject *self, PyObject *args) {
    PyObject *o_ctx, *o_cum, *o_dts, *o_acc, *o_ic;
    Py_ssize_t a, b;
    int lag;
    long long B, comp0, shared, usable, free0, nulls;
    if (!PyArg_ParseTuple(args, "OOOnniLLLLLLOO", &o_ctx, &o_cum, &o_dts, &a, &b, &lag, &B, &comp0, &shared,
                          &usable, &free0, &nulls, &o_acc, &o_ic))
        return NULL;
    Py_buffer vc, vu, vd, va, vi;
    PyObject *result = NULL;
    if (get_col(o_ctx, &vc, 'i', 0) < 0) return NULL;
    if (get_col(o_cum, &vu, 'i', 0) < 0) goto r1;
    if (get_col(o_dts, &vd, 'f', 0) < 0) goto r2;
    if (a < 0 || b < a || b > vc.shape[0] || b > vu.shape[0] || b + 1 - lag > vd.shape[0] || (lag != 0 && lag != 1)) {
        PyErr_SetString(PyExc_ValueError, "step fold: rows out of the run");
        goto r3;
    }
    Sums s;
    if (get_state(o_acc, o_ic, &va, &vi, &s, (double)B) < 0) goto r3;
    int64_t tok0 = -(comp0 + shared * B), int0 = (usable - free0 + shared) * B + comp0, free_slots = free0 * B;
    /* A run's pool (the five categories' sum), reserved slots (0) and external ones (nulls) are
     * the same on every row: their shares are divided once, the values fold_row divides on each
     * row; fold_shares adds them up as for any row, so the sums are the same floats. */
    double pool = (double)(tok0 + int0 + nulls + free_slots);
    double share_res = (double)0 / pool, share_ext = (double)nulls / pool, sv = (double)shared;
    for (Py_ssize_t r = a; r < b; r++) {
        int64_t ctx = AT(vc, int64_t, r), cumB = AT(vu, int64_t, r) * B;
        int64_t tok = tok0 + ctx, inl = int0 + cumB - ctx, fre = free_slots - cumB;
        double share[5] = {(double)tok / pool, share_res, (double)inl / pool, share_ext, (double)fre / pool};
        fold_shares(&s, AT(vd, double, r + 1 - lag), share, tok + inl, sv);
    }
    PyBuffer_Release(&va);
    PyBuffer_Release(&vi);
    result = Py_NewRef(Py_None);
r3:
    PyBuffer_Release(&vd);
r2:
    PyBuffer_Release(&vu);
r1:
    PyBuffer_Release(&vc);
    return result;
}

static PyMethodDef methods[] = {
    {"fold_columns", fold_columns, METH_VARARGS, "Fold rows given as columns (see the module source)."},
    {"fold_tuples", fold_tuples, METH_VARARGS, "Fold a slice of a list of step records (see the module source)."},
    {"fold_run", fold_run, METH_VARARGS, "Fold rows a..b-1 of a run of quiet steps (see the module source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_step_fold",
                                    "The summary's step sums, folded row by row, compiled.", -1, methods};

PyMODINIT_FUNC PyInit__step_fold(void) { return PyModule_Create(&module); }
