/* A run of quiet steps laid out in one pass: an optional accelerator for run_layout.py.
 *
 * lay_out(cum, ctx, dts, ends, busy, firsts, B, decoders, ctx0, pages, terms, p_dt, p_start, t,
 *         busy0, lag)
 *
 * fills five arrays the caller allocated (int64 cum[H], ctx[H]; float64 dts[H+1], ends[H+2],
 * busy[H+1]) with what run_layout.lay_out_numpy computes with numpy, value for value:
 *
 *   cum[o-1]   blocks the run's steps 1..o take: pops[k % B] summed over k < o, where bucket
 *              (j0, n) of `firsts` puts n at pops[j0 - 1]
 *   ctx[o-1]   decoders * o + ctx0
 *   dts        p_dt, then time(ctx[o-1], pages + cum[o-1]) for o = 1..H (sim/cost/bulk.py)
 *   ends       p_start, t, then the sequential sums t + dt_1, ... (np.add.accumulate)
 *   busy       busy0, then the sequential sums of the records' durations (dts from 1 - lag)
 *
 * The step time is the scalar expression of sim/cost/bulk.py in its order of operations, one
 * IEEE operation at a time: the build turns off fused multiply-add (-ffp-contract=off), so every
 * float is the one numpy and Python compute. tests/test_run_layout.py compares both.
 */
#include "_decode_time.h"

/* a writable C-contiguous buffer of n 8-byte items of kind 'i' (int64) or 'f' (float64) */
static int get_buf(PyObject *obj, Py_buffer *view, Py_ssize_t n, char kind) {
    if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) return -1;
    const char *f = view->format ? view->format : "B";
    if (f[0] == '<' || f[0] == '=' || f[0] == '@') f++;
    int ok = view->itemsize == 8 && f[1] == '\0' &&
             (kind == 'f' ? f[0] == 'd' : (f[0] == 'l' || f[0] == 'q'));
    if (!ok || view->len / 8 < n) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "lay_out: need %zd %s values", n,
                     kind == 'f' ? "float64" : "int64");
        return -1;
    }
    return 0;
}

static PyObject *lay_out(PyObject *self, PyObject *args) {
    PyObject *o_cum, *o_ctx, *o_dts, *o_ends, *o_busy, *firsts, *o_terms;
    Py_ssize_t B;
    long long decoders, ctx0, pages;
    double p_dt, p_start, t0, busy0;
    int lag;
    if (!PyArg_ParseTuple(args, "OOOOOOnLLLOddddi", &o_cum, &o_ctx, &o_dts, &o_ends, &o_busy, &firsts,
                          &B, &decoders, &ctx0, &pages, &o_terms, &p_dt, &p_start, &t0, &busy0, &lag))
        return NULL;
    Terms k;
    if (B < 1 || (lag != 0 && lag != 1)) {
        PyErr_SetString(PyExc_ValueError, "lay_out: block size >= 1, lag 0 or 1");
        return NULL;
    }
    if (get_terms(o_terms, &k) < 0) return NULL;
    Py_buffer v_cum, v_ctx, v_dts, v_ends, v_busy;
    if (get_buf(o_cum, &v_cum, 0, 'i') < 0) return NULL;
    Py_ssize_t H = v_cum.len / 8;
    PyObject *result = NULL;
    int64_t *pops = NULL;
    if (get_buf(o_ctx, &v_ctx, H, 'i') < 0) goto release1;
    if (get_buf(o_dts, &v_dts, H + 1, 'f') < 0) goto release2;
    if (get_buf(o_ends, &v_ends, H + 2, 'f') < 0) goto release3;
    if (get_buf(o_busy, &v_busy, H + 1, 'f') < 0) goto release4;
    pops = PyMem_Calloc((size_t)B, sizeof(int64_t));
    if (pops == NULL) {
        PyErr_NoMemory();
        goto release5;
    }
    PyObject *fs = PySequence_Fast(firsts, "lay_out: firsts must be a sequence of (j0, n)");
    if (fs == NULL) goto release5;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fs); i++) {
        long long j0, n;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fs, i), "LL", &j0, &n)) {
            Py_DECREF(fs);
            goto release5;
        }
        if (j0 < 1 || j0 > B) {
            Py_DECREF(fs);
            PyErr_SetString(PyExc_ValueError, "lay_out: a bucket's first offset is in 1..B");
            goto release5;
        }
        pops[j0 - 1] = n;
    }
    Py_DECREF(fs);
    int64_t *cum = v_cum.buf, *ctx = v_ctx.buf;
    double *dts = v_dts.buf, *ends = v_ends.buf, *busy = v_busy.buf;
    int64_t c = 0;
    dts[0] = p_dt;
    ends[0] = p_start;
    ends[1] = t0;
    for (Py_ssize_t i = 0; i < H; i++) {
        c += pops[i % B];
        cum[i] = c;
        ctx[i] = decoders * (int64_t)(i + 1) + ctx0;
        double dt = step_time(&k, ctx[i], pages + c);
        dts[i + 1] = dt;
        ends[i + 2] = ends[i + 1] + dt;
    }
    busy[0] = busy0;
    for (Py_ssize_t i = 0; i < H; i++) busy[i + 1] = busy[i] + dts[i + 1 - lag];
    result = Py_NewRef(Py_None);
release5:
    PyMem_Free(pops);
    PyBuffer_Release(&v_busy);
release4:
    PyBuffer_Release(&v_ends);
release3:
    PyBuffer_Release(&v_dts);
release2:
    PyBuffer_Release(&v_ctx);
release1:
    PyBuffer_Release(&v_cum);
    return result;
}

static PyMethodDef methods[] = {
    {"lay_out", lay_out, METH_VARARGS, "Fill a run's arrays in one pass (see the module source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_run_layout",
                                    "A run of quiet steps laid out in one pass, compiled.", -1, methods};

PyMODINIT_FUNC PyInit__run_layout(void) { return PyModule_Create(&module); }
