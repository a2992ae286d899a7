/* A fast-forward window's quiet steps, one after another in C: an optional accelerator for
 * window.py (bound in quiet_steps.py, which says when it applies); and a window step's landing
 * (land, bound in steps.py: see its comment below).
 *
 * steps(fixed, s, t, pages, c0_sum, decoders, dt, p_dt, p_start, busy, step, due, na, na_gate,
 *       run_gap, run_last, room, nrun, qnw, head, held, budget, terms, first)
 *     -> (n, t, pages, dt, p_dt, p_start, busy, due, qnw, head, held)
 *
 * runs window steps s + 1, s + 2, ... as the window's quiet branch does (window.py, from its
 * `boundary()` call to its `continue`), and returns after n of them with the window's locals as
 * they are then. The window has made the loop head's checks for step s + 1; before each later
 * step this makes them again and returns, leaving that step to the window, where one fails:
 *
 *   n == room                          the window's progress hook is due
 *   free blocks < the bucket's size    the step preempts (or the window ends)
 *   t >= na_gate                       a router may act first (window.py's `t >= na`)
 *   s1 in fin                          a decoder samples its last token: not quiet
 *   due <= plan_t, and then admission  an arrival is due: pulled (`pull(plan_t)`, `due = next_due()`)
 *     may admit one                    and the waiting head checked (`admits(head, budget)`), as the
 *                                      window does; returns `held` None where the check says an
 *                                      admission may run (the window checks again, to the same answer)
 *   due - plan_t >= run_gap * dt       (held True) a run of quiet steps may be ready (run_gap >= 0,
 *     and s1 <= run_last               s1 <= run_last: no decoder finishes within run_gap steps)
 *
 * and, for every step, the first included, before anything but the margin's note is changed:
 *
 *   pool.dups or pool.observed         (a crossing step) cross_boundary would take its Python path
 *   end >= na                          the router reads the step mid-flight: the window pauses
 *
 * A step: the margin's note (a crossing bucket's slack), then cross_boundary's compiled call on
 * the bucket (`cross` and its arguments from PagedAllocator.cross_call: the pops, appends and
 * registrations of _table_loops.cross), `free_queue.size` and `pool.evictions` updated as
 * cross_boundary updates them, sync registrations through `register`, the step time (the decode
 * terms, _decode_time.h), and the step's record appended (`log_append`) with the same values,
 * in the same order, as the window's inline record: ints as ints, times as floats. `busy` sums
 * the records' durations in order. `first` is the first record's fields from the step before
 * (lag 1: the step in flight; prefill tokens, decode seqs, preempted, swap out, swap in).
 * tests/test_quiet_steps.py compares a window with and without it, record for record.
 */
#include "_decode_time.h"
#include "../../_slot_attr.h"  /* slot_get, slot_set: the free queue's and the margin's slots */

static PyObject *s_size, *s_evictions, *s_shared_excess, *s_dups, *s_observed, *s_pass_min, *s_peek;
static SlotCache c_size, c_size_set, c_evictions, c_evictions_set, c_shared, c_dups, c_observed, c_pass_min,
    c_pass_min_set;  /* one per attribute and use */

enum { F_BUCKETS, F_LAG, F_REGISTER, F_FIN, F_MARGIN, F_LOG, F_USABLE, F_NULLS, F_PULL, F_NEXT_DUE, F_WAITING,
       F_ADMITS, F_CROSS_PY, F_CROSS, F_FQ, F_POOL,
       F_NXT, F_PRV, F_HEAD, F_REF, F_BH, F_CACHE, F_UNPUB, F_BSIZE, F_MARK, F_SLOW, F_N };

static int get_ll(PyObject *o, long long *out) {
    *out = PyLong_AsLongLong(o);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int attr_ll(PyObject *o, PyObject *name, long long *out, SlotCache *c) {
    PyObject *v = slot_get(o, name, c);
    if (v == NULL) return -1;
    int rc = get_ll(v, out);
    Py_DECREF(v);
    return rc;
}

static int set_ll(PyObject *o, PyObject *name, long long v, SlotCache *c) {
    PyObject *x = PyLong_FromLongLong(v);
    if (x == NULL) return -1;
    int rc = slot_set(o, name, x, c);
    Py_DECREF(x);
    return rc;
}

static int attr_true(PyObject *o, PyObject *name, SlotCache *c) {  /* bool(o.name), or -1 */
    PyObject *v = slot_get(o, name, c);
    if (v == NULL) return -1;
    int rc = PyObject_IsTrue(v);
    Py_DECREF(v);
    return rc;
}

static int call_none(PyObject *fn, PyObject *const *args, size_t n, long long *out) {
    PyObject *r = PyObject_Vectorcall(fn, args, n, NULL);
    if (r == NULL) return -1;
    int rc = 0;
    if (out != NULL) rc = get_ll(r, out);
    Py_DECREF(r);
    return rc;
}

/* the record: 17 fields, ints but for start and duration; out of the cyclic collector's sight,
 * as the collector itself would put it at its first walk (the young records of a busy run were
 * most of what its collections walked) */
static int append_row(PyObject *log, long long step, double start, double dur, long long tail[14]) {
    PyObject *row = PyTuple_New(17);
    if (row == NULL) return -1;
    PyObject *v = PyLong_FromLongLong(step);
    if (v == NULL) goto fail;
    PyTuple_SET_ITEM(row, 0, v);
    if ((v = PyFloat_FromDouble(start)) == NULL) goto fail;
    PyTuple_SET_ITEM(row, 1, v);
    if ((v = PyFloat_FromDouble(dur)) == NULL) goto fail;
    PyTuple_SET_ITEM(row, 2, v);
    for (int i = 0; i < 14; i++) {
        if ((v = PyLong_FromLongLong(tail[i])) == NULL) goto fail;
        PyTuple_SET_ITEM(row, 3 + i, v);
    }
    PyObject_GC_UnTrack(row);  /* numbers only: never in a cycle (CPython untracks such tuples lazily) */
    PyObject *args[1] = {row};
    int rc = call_none(log, args, 1, NULL);
    Py_DECREF(row);
    return rc;
fail:
    Py_DECREF(row);
    return -1;
}

/* 1: cross_boundary would take its Python path (a key with a second block, an observed pool);
 * 0: its compiled call; -1: error */
static int python_path(PyObject *pool) {
    int no = attr_true(pool, s_dups, &c_dups);
    if (no == 0) no = attr_true(pool, s_observed, &c_observed);
    return no;
}

/* cross_boundary's `ahead` at window step s1 (decoders.boundary): async with caching, the step
 * whose token filled a block registers it a step late; else None. A new reference, or NULL */
static PyObject *ahead_at(PyObject *const *f, long long s1, long long lag) {
    return lag && f[F_REGISTER] != Py_None ? PyLong_FromLongLong(s1 - 1) : Py_NewRef(Py_None);
}

/* cross_boundary's compiled call on the nb > 0 requests of `bucket` at window step s1, and the
 * counters it updates (0, or -1 with an exception set) */
static int cross_compiled(PyObject *const *f, PyObject *bucket, long long nb, long long s1, long long lag) {
    PyObject *ahead = ahead_at(f, s1, lag);
    if (ahead == NULL) return -1;
    PyObject *cargs[12] = {bucket, f[F_NXT], f[F_PRV], f[F_HEAD], f[F_REF], f[F_BH], f[F_CACHE],
                           f[F_UNPUB], ahead, f[F_BSIZE], f[F_MARK], f[F_SLOW]};
    long long evicted, ev, size;
    int rc = call_none(f[F_CROSS], cargs, 12, &evicted);
    Py_DECREF(ahead);
    if (rc || attr_ll(f[F_FQ], s_size, &size, &c_size) || set_ll(f[F_FQ], s_size, size - nb, &c_size_set) ||
        attr_ll(f[F_POOL], s_evictions, &ev, &c_evictions) ||
        set_ll(f[F_POOL], s_evictions, ev + evicted, &c_evictions_set))
        return -1;
    return 0;
}

/* sync: the blocks window step s1 fills are registered (0, or -1 with an exception set) */
static int register_filling(PyObject *const *f, long long s1, long long B) {
    PyObject *filling = PyList_GET_ITEM(f[F_BUCKETS], (s1 + 1) % B);
    if (!PyList_Check(filling) || !PyList_GET_SIZE(filling)) return 0;
    PyObject *key = PyLong_FromLongLong(s1);
    if (key == NULL) return -1;
    PyObject *rargs[2] = {filling, key};
    int rc = call_none(f[F_REGISTER], rargs, 2, NULL);
    Py_DECREF(key);
    return rc;
}

/* boundary(fixed, s1) -> the blocks taken: decoders.boundary's work at window step s1 (the
 * crossing bucket's new blocks and marks, then, sync, the filling bucket's registrations), with
 * cross_boundary's compiled call made here, or cross_boundary itself where it would take its
 * Python path; for the window's steps that are not quiet */
static PyObject *boundary(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyTuple_Check(args[0]) || PyTuple_GET_SIZE(args[0]) != F_N) {
        PyErr_SetString(PyExc_TypeError, "boundary(fixed: tuple of 26, s1)");
        return NULL;
    }
    PyObject *const *f = &PyTuple_GET_ITEM(args[0], 0);
    long long lag, B, s1;
    if (get_ll(f[F_LAG], &lag) || get_ll(f[F_BSIZE], &B) || get_ll(args[1], &s1)) return NULL;
    if (!PyList_Check(f[F_BUCKETS]) || PyList_GET_SIZE(f[F_BUCKETS]) != B || B < 1 || s1 < 0) {
        PyErr_SetString(PyExc_ValueError, "boundary: buckets a list of block-size lists, s1 >= 0");
        return NULL;
    }
    PyObject *bucket = PyList_GET_ITEM(f[F_BUCKETS], s1 % B);
    if (!PyList_Check(bucket)) {
        PyErr_SetString(PyExc_TypeError, "boundary: a bucket is a list");
        return NULL;
    }
    long long nb = PyList_GET_SIZE(bucket);
    if (nb) {
        int py = python_path(f[F_POOL]);
        if (py < 0) return NULL;
        if (py) {
            PyObject *ahead = ahead_at(f, s1, lag);
            if (ahead == NULL) return NULL;
            PyObject *a[2] = {bucket, ahead};
            int rc = call_none(f[F_CROSS_PY], a, 2, NULL);
            Py_DECREF(ahead);
            if (rc) return NULL;
        } else if (cross_compiled(f, bucket, nb, s1, lag)) {
            return NULL;
        }
    }
    if (!lag && f[F_REGISTER] != Py_None && register_filling(f, s1, B)) return NULL;
    return PyLong_FromLongLong(nb);
}

/* an arrival due at step s1: pulled, the next one read, the waiting head checked (window.py's
 * quiet branch); 1: still nothing to admit (held updated), 0: admission may run, -1: error */
static int pull_due(PyObject *const *f, double plan_t, long long budget, double *due, long long *qnw,
                    PyObject **head, PyObject **held) {
    PyObject *x = PyFloat_FromDouble(plan_t);
    if (x == NULL) return -1;
    PyObject *r = PyObject_Vectorcall(f[F_PULL], &x, 1, NULL);
    Py_DECREF(x);
    if (r == NULL) return -1;
    Py_DECREF(r);
    if ((r = PyObject_CallNoArgs(f[F_NEXT_DUE])) == NULL) return -1;
    *due = PyFloat_AsDouble(r);
    Py_DECREF(r);
    if (*due == -1.0 && PyErr_Occurred()) return -1;
    Py_ssize_t w = PyObject_Length(f[F_WAITING]);
    if (w < 0) return -1;
    *qnw = w;
    PyObject *h = w ? PyObject_CallMethodNoArgs(f[F_WAITING], s_peek) : Py_NewRef(Py_None);
    if (h == NULL) return -1;
    Py_SETREF(*head, h);
    if ((x = PyLong_FromLongLong(budget)) == NULL) return -1;
    PyObject *a[2] = {*head, x};
    r = PyObject_Vectorcall(f[F_ADMITS], a, 2, NULL);
    Py_DECREF(x);
    if (r == NULL) return -1;
    int truth = PyObject_IsTrue(r);
    if (truth <= 0) {
        Py_DECREF(r);
        if (truth == 0) Py_SETREF(*held, Py_NewRef(Py_None));
        return truth;
    }
    Py_SETREF(*held, r);
    return 1;
}

static PyObject *steps(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 24 || !PyTuple_Check(args[0]) || PyTuple_GET_SIZE(args[0]) != F_N) {
        PyErr_SetString(PyExc_TypeError, "steps(fixed: tuple of 26, s, t, pages, c0_sum, decoders, dt, p_dt, "
                        "p_start, busy, step, due, na, na_gate, run_gap, run_last, room, nrun, qnw, head, held, "
                        "budget, terms, first)");
        return NULL;
    }
    PyObject *const *f = &PyTuple_GET_ITEM(args[0], 0);
    PyObject *buckets = f[F_BUCKETS], *reg = f[F_REGISTER], *fin = f[F_FIN], *margin = f[F_MARGIN];
    PyObject *log = f[F_LOG], *fq = f[F_FQ], *pool = f[F_POOL];
    long long lag, usable, nulls, B, s, pages, c0, dec, step, run_gap, run_last, room, nrun, qnw, budget, first[5];
    double t, dt, p_dt, p_start, busy, due, na, na_gate;
    Terms k;
    if (get_ll(f[F_LAG], &lag) || get_ll(f[F_USABLE], &usable) || get_ll(f[F_NULLS], &nulls) ||
        get_ll(f[F_BSIZE], &B) || get_ll(args[1], &s) || get_ll(args[3], &pages) || get_ll(args[4], &c0) ||
        get_ll(args[5], &dec) || get_ll(args[10], &step) || get_ll(args[14], &run_gap) ||
        get_ll(args[15], &run_last) || get_ll(args[16], &room) || get_ll(args[17], &nrun) ||
        get_ll(args[18], &qnw) || get_ll(args[21], &budget))
        return NULL;
    t = PyFloat_AsDouble(args[2]);
    dt = PyFloat_AsDouble(args[6]);
    p_dt = PyFloat_AsDouble(args[7]);
    p_start = PyFloat_AsDouble(args[8]);
    busy = PyFloat_AsDouble(args[9]);
    due = PyFloat_AsDouble(args[11]);
    na = PyFloat_AsDouble(args[12]);
    na_gate = PyFloat_AsDouble(args[13]);
    if (PyErr_Occurred()) return NULL;
    if (get_terms(args[22], &k) < 0) return NULL;
    if (!PyTuple_Check(args[23]) || PyTuple_GET_SIZE(args[23]) != 5) {
        PyErr_SetString(PyExc_TypeError, "steps: first is a tuple of 5 ints");
        return NULL;
    }
    for (int i = 0; i < 5; i++)
        if (get_ll(PyTuple_GET_ITEM(args[23], i), &first[i])) return NULL;
    if (!PyList_Check(buckets) || PyList_GET_SIZE(buckets) != B || B < 1 || !PyDict_Check(fin) ||
        (lag != 0 && lag != 1)) {
        PyErr_SetString(PyExc_ValueError, "steps: buckets a list of block-size lists, fin a dict, lag 0 or 1");
        return NULL;
    }
    PyObject *head = Py_NewRef(args[19]), *held = Py_NewRef(args[20]);
    long long n = 0;
    for (;; n++) {
        long long s1 = s + 1;
        PyObject *bucket = PyList_GET_ITEM(buckets, s1 % B);
        if (!PyList_Check(bucket)) {
            PyErr_SetString(PyExc_TypeError, "steps: a bucket is a list");
            goto error;
        }
        long long nb = PyList_GET_SIZE(bucket), size;
        if (attr_ll(fq, s_size, &size, &c_size)) goto error;
        double plan_t = lag ? p_start : t;
        if (n > 0) {  /* the window's loop head, for the steps after its own */
            if (n >= room || size - nb < 0 || t >= na_gate) break;
            PyObject *key = PyLong_FromLongLong(s1);
            if (key == NULL) goto error;
            int in = PyDict_Contains(fin, key);
            Py_DECREF(key);
            if (in < 0) goto error;
            if (in) break;
            if (nb && margin != Py_None) {  /* the decoders' block checks (Margin.note), as the window's */
                long long pm;
                if (attr_ll(margin, s_pass_min, &pm, &c_pass_min)) goto error;
                if (size - nb < pm && set_ll(margin, s_pass_min, size - nb, &c_pass_min_set)) goto error;
            }
            if (due <= plan_t) {
                int none = pull_due(f, plan_t, budget, &due, &qnw, &head, &held);
                if (none < 0) goto error;
                if (!none) break;
            }
            if (run_gap >= 0 && held == Py_True && s1 <= run_last && due - plan_t >= (double)run_gap * dt) break;
        }
        if (nb) {  /* cross_boundary would take its Python path */
            int no = python_path(pool);
            if (no < 0) goto error;
            if (no) break;
        }
        long long pg = pages + nb, ctx = c0 + dec * s1;
        double d = step_time(&k, ctx, pg);
        if ((lag ? t : t + d) >= na) break;
        if (nb && cross_compiled(f, bucket, nb, s1, lag)) goto error;
        if (!lag && reg != Py_None && register_filling(f, s1, B)) goto error;
        long long free_blocks, shared;
        if (attr_ll(fq, s_size, &free_blocks, &c_size) || attr_ll(pool, s_shared_excess, &shared, &c_shared)) goto error;
        long long comp = lag ? ctx - dec : ctx, used = usable - free_blocks;
        long long internal = (used + shared) * B - comp;
        long long tail[14] = {nrun, qnw, 0, dec, 0, free_blocks, used * B - internal, 0, internal,
                              nulls, free_blocks * B, shared, 0, 0};
        if (lag) {  /* step s lands, step s1 is launched */
            tail[2] = first[0], tail[3] = first[1], tail[4] = first[2], tail[12] = first[3], tail[13] = first[4];
            if (append_row(log, step, p_start, p_dt, tail)) goto error;
            busy = busy + p_dt;
            first[0] = 0, first[1] = dec, first[2] = first[3] = first[4] = 0;
            p_dt = d;
            p_start = t;
        } else {
            if (append_row(log, step, t, d, tail)) goto error;
            busy = busy + d;
        }
        step++;
        pages = pg;
        s = s1;
        t = t + d;
        dt = d;
    }
    PyObject *out = Py_BuildValue("(LdLdddddLOO)", n, t, pages, dt, p_dt, p_start, busy, due, qnw, head, held);
    Py_DECREF(head);
    Py_DECREF(held);
    return out;
error:
    Py_DECREF(head);
    Py_DECREF(held);
    return NULL;
}

/* land(k, lag, plan, batch, dt, start, done, computed, nw) -> None: steps.land, compiled, for a
 * kernel whose pool's breakdown is linear (k.lin not None; the caller checks). The requests in
 * done: under async (lag) the token is seen (pending_output 0) and a block it filled registered
 * (kv.register_full_blocks, where k.caching), then k.finish(done, start + dt); then the step's
 * record appended (k.log.append: its fields as steps.land makes them, start and dt as given)
 * and k.busy_s, k.step, k.ff_steps advanced. */
static PyObject *s_kv, *s_block_size, *s_caching, *s_pending_output, *s_num_computed, *s_register_full_blocks,
    *s_finish, *s_sched, *s_running, *s_lin, *s_decode_blocks, *s_pool, *s_free_queue, *s_log, *s_append,
    *s_step, *s_busy_s, *s_ff_steps, *s_num_preempted, *s_swap_out, *s_swap_in, *ZERO;
static SlotCache c_k_kv, c_k_caching, c_pend, c_nct, c_k_sched, c_k_lin, c_k_db, c_k_log, c_log_append, c_k_step,
    c_k_step_set, c_k_busy, c_k_busy_set, c_k_ff, c_k_ff_set, c_pl_pre, c_pl_so, c_pl_si, c_fq_size, c_shared2;

/* k.finish(done, end) for its plain case (1; 0: not plain, nothing changed: the caller calls it;
 * -1: error): Scheduler.finish with every request of done RUNNING, no KV connector, an allocator
 * whose methods are the base class's (plain_methods, sim/kv/paged.py) and a scheduler whose
 * hooks are the base class's (plain_hooks); then StepKernel.finish's finished.extend(done).
 * Per request, in order: kv.free(r) (the allocator's own: a subclass's or a spy's too), then
 * status FINISHED, finish_s = end, finish_step = k.step; then out of running (the one request
 * by identity, several by status), in place. */
static PyObject *s_num_output, *s_blocks;  /* batch's and leave_all's, below */
static PyObject *s_plain_hooks, *s_plain_methods, *s_connector, *s_free, *s_status, *s_finish_s, *s_finish_step,
    *s_finished, *RUNNING, *FINISHED;
static SlotCache c_f_status, c_f_status_set, c_f_fs, c_f_fstep, c_f_sched, c_f_kkv, c_f_step, c_f_finished, c_f_status2,
    c_f_hooks;

static int finish_plain(PyObject *k, PyObject *done, PyObject *end) {
    if (RUNNING == NULL) {  /* the statuses, once (sim.request is imported by then) */
        PyObject *mod = PyImport_ImportModule("sim.request"), *st = mod == NULL ? NULL : PyObject_GetAttrString(mod, "Status");
        Py_XDECREF(mod);
        if (st == NULL) return -1;
        RUNNING = PyObject_GetAttrString(st, "RUNNING");
        FINISHED = PyObject_GetAttrString(st, "FINISHED");
        Py_DECREF(st);
        if (RUNNING == NULL || FINISHED == NULL) { Py_CLEAR(RUNNING); Py_CLEAR(FINISHED); return -1; }
    }
    int rc = -1, t;
    PyObject *sched = slot_get(k, s_sched, &c_f_sched), *kv = NULL, *x = NULL, *running = NULL;
    if (sched == NULL) return -1;
    if ((t = attr_true(sched, s_plain_hooks, &c_f_hooks)) <= 0) { rc = t; goto out; }
    if ((kv = slot_get(k, s_kv, &c_f_kkv)) == NULL) goto out;
    if ((x = PyObject_GetAttr(kv, s_plain_methods)) == NULL) {
        if (PyErr_ExceptionMatches(PyExc_AttributeError)) { PyErr_Clear(); rc = 0; }
        goto out;
    }
    t = PyObject_IsTrue(x);
    Py_CLEAR(x);
    if (t <= 0) { rc = t; goto out; }
    if ((x = PyObject_GetAttr(kv, s_connector)) == NULL) goto out;
    t = x != Py_None;
    Py_CLEAR(x);
    if (t) { rc = 0; goto out; }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(done); i++) {
        if ((x = slot_get(PyList_GET_ITEM(done, i), s_status, &c_f_status)) == NULL) goto out;
        t = x != RUNNING;
        Py_CLEAR(x);
        if (t) { rc = 0; goto out; }  /* one preempted with its last token in flight: Python's */
    }
    long long step;
    if (attr_ll(k, s_step, &step, &c_f_step) < 0) goto out;
    PyObject *ostep = PyLong_FromLongLong(step);
    if (ostep == NULL) goto out;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(done); i++) {
        PyObject *r = PyList_GET_ITEM(done, i);
        PyObject *res = PyObject_CallMethodOneArg(kv, s_free, r);  /* its own free: a spy's, a subclass's */
        if (res == NULL) { Py_DECREF(ostep); goto out; }
        Py_DECREF(res);
        if (slot_set(r, s_status, FINISHED, &c_f_status_set) < 0 || slot_set(r, s_finish_s, end, &c_f_fs) < 0
                || slot_set(r, s_finish_step, ostep, &c_f_fstep) < 0) {
            Py_DECREF(ostep);
            goto out;
        }
    }
    Py_DECREF(ostep);
    if ((running = PyObject_GetAttr(sched, s_running)) == NULL) goto out;
    if (!PyList_Check(running)) {
        PyErr_SetString(PyExc_TypeError, "finish: the running list must be a list");
        goto out;
    }
    Py_ssize_t n = PyList_GET_SIZE(running);
    if (PyList_GET_SIZE(done) == 1) {  /* list.remove: the first one that is it (a Request compares by identity) */
        PyObject *only = PyList_GET_ITEM(done, 0);
        for (Py_ssize_t j = 0; j < n; j++)
            if (PyList_GET_ITEM(running, j) == only) {
                if (PyList_SetSlice(running, j, j + 1, NULL) < 0) goto out;
                break;
            }
    } else {  /* running[:] = [r for r in running if r.status is not FINISHED] */
        PyObject *kept = PyList_New(0);
        if (kept == NULL) goto out;
        for (Py_ssize_t j = 0; j < n; j++) {
            PyObject *r = PyList_GET_ITEM(running, j), *st = slot_get(r, s_status, &c_f_status2);
            if (st == NULL) { Py_DECREF(kept); goto out; }
            Py_DECREF(st);
            if (st != FINISHED && PyList_Append(kept, r) < 0) { Py_DECREF(kept); goto out; }
        }
        t = PyList_SetSlice(running, 0, n, kept);
        Py_DECREF(kept);
        if (t < 0) goto out;
    }
    PyObject *fin = slot_get(k, s_finished, &c_f_finished);
    if (fin == NULL) goto out;
    Py_ssize_t have = PyList_Check(fin) ? PyList_GET_SIZE(fin) : -1;
    t = have < 0 ? -1 : PyList_SetSlice(fin, have, have, done);  /* finished.extend(done) */
    Py_DECREF(fin);
    if (t < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "finish: k.finished must be a list");
        goto out;
    }
    rc = 1;
out:
    Py_XDECREF(x); Py_XDECREF(kv); Py_XDECREF(running);
    Py_DECREF(sched);
    return rc;
}

static PyObject *land(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9 || !PyList_Check(args[6]) || !PyTuple_Check(args[3]) || PyTuple_GET_SIZE(args[3]) < 5) {
        PyErr_SetString(PyExc_TypeError, "land(k, lag, plan, batch: StepBatch, dt, start, done: list, computed, nw)");
        return NULL;
    }
    PyObject *k = args[0], *plan = args[2], *batch = args[3], *dt = args[4], *start = args[5], *done = args[6];
    PyObject *o;
    long long v, step, ff;
    if (PyList_GET_SIZE(done)) {
        int lag = PyObject_IsTrue(args[1]);
        if (lag < 0) return NULL;
        if (lag) {
            PyObject *kv = slot_get(k, s_kv, &c_k_kv);
            if (kv == NULL) return NULL;
            long long B;
            int caching = attr_true(k, s_caching, &c_k_caching);
            PyObject *bs = caching < 0 ? NULL : PyObject_GetAttr(kv, s_block_size);
            int bad = bs == NULL || get_ll(bs, &B) < 0;
            Py_XDECREF(bs);
            if (bad) { Py_DECREF(kv); return NULL; }
            for (Py_ssize_t i = 0; i < PyList_GET_SIZE(done); i++) {
                PyObject *r = PyList_GET_ITEM(done, i);
                if (slot_set(r, s_pending_output, ZERO, &c_pend) < 0 || attr_ll(r, s_num_computed, &v, &c_nct) < 0) {
                    Py_DECREF(kv);
                    return NULL;
                }
                if (caching && B > 0 && v % B == 0) {
                    PyObject *nct = PyLong_FromLongLong(v);
                    PyObject *res = nct == NULL ? NULL : PyObject_CallMethodObjArgs(kv, s_register_full_blocks, r, nct, NULL);
                    Py_XDECREF(nct);
                    if (res == NULL) { Py_DECREF(kv); return NULL; }
                    Py_DECREF(res);
                }
            }
            Py_DECREF(kv);
        }
        PyObject *end = PyNumber_Add(start, dt);
        if (end == NULL) return NULL;
        int plain = finish_plain(k, done, end);
        PyObject *res = plain != 0 ? NULL : PyObject_CallMethodObjArgs(k, s_finish, done, end, NULL);
        Py_DECREF(end);
        if (plain < 0 || (plain == 0 && res == NULL)) return NULL;
        Py_XDECREF(res);
    }
    long long nrun, free_blocks, shared, B, usable, computed, nw, pt, ds, pre, so, si;
    PyObject *sched = slot_get(k, s_sched, &c_k_sched), *running = NULL, *lin = NULL, *db = NULL, *pool = NULL,
        *fq = NULL, *ext = NULL;
    if (sched == NULL) return NULL;
    running = PyObject_GetAttr(sched, s_running);
    Py_DECREF(sched);
    if (running == NULL || (nrun = PyObject_Size(running)) < 0) goto fail;
    if ((lin = slot_get(k, s_lin, &c_k_lin)) == NULL || (db = slot_get(k, s_decode_blocks, &c_k_db)) == NULL) goto fail;
    if (!PyTuple_Check(lin) || PyTuple_GET_SIZE(lin) != 3) {
        PyErr_SetString(PyExc_TypeError, "land: k.lin must be a LinearBreakdown");
        goto fail;
    }
    if ((pool = PyObject_GetAttr(db, s_pool)) == NULL || (fq = PyObject_GetAttr(pool, s_free_queue)) == NULL) goto fail;
    if (attr_ll(fq, s_size, &free_blocks, &c_fq_size) < 0 || attr_ll(pool, s_shared_excess, &shared, &c_shared2) < 0
            || get_ll(PyTuple_GET_ITEM(lin, 0), &B) < 0 || get_ll(PyTuple_GET_ITEM(lin, 1), &usable) < 0
            || get_ll(args[7], &computed) < 0 || get_ll(args[8], &nw) < 0
            || get_ll(PyTuple_GET_ITEM(batch, 0), &pt) < 0 || get_ll(PyTuple_GET_ITEM(batch, 4), &ds) < 0
            || attr_ll(plan, s_num_preempted, &pre, &c_pl_pre) < 0 || attr_ll(plan, s_swap_out, &so, &c_pl_so) < 0
            || attr_ll(plan, s_swap_in, &si, &c_pl_si) < 0 || attr_ll(k, s_step, &step, &c_k_step) < 0)
        goto fail;
    ext = Py_NewRef(PyTuple_GET_ITEM(lin, 2));
    long long used = usable - free_blocks, internal = (used + shared) * B - computed;
    long long f[17] = {step, 0, 0, nrun, nw, pt, ds, pre, free_blocks, used * B - internal, 0, internal, 0,
                       free_blocks * B, shared, so, si};
    PyObject *row = PyTuple_New(17);
    if (row == NULL) goto fail;
    for (int i = 0; i < 17; i++) {
        if (i == 1 || i == 2 || i == 12) {
            o = Py_NewRef(i == 1 ? start : i == 2 ? dt : ext);
        } else if ((o = PyLong_FromLongLong(f[i])) == NULL) {
            Py_DECREF(row);
            goto fail;
        }
        PyTuple_SET_ITEM(row, i, o);
    }
    PyObject_GC_UnTrack(row);  /* numbers only (as append_row's) */
    PyObject *log = slot_get(k, s_log, &c_k_log), *append = log == NULL ? NULL : slot_get(log, s_append, &c_log_append);
    Py_XDECREF(log);
    if (append == NULL) { Py_DECREF(row); goto fail; }
    PyObject *a[1] = {row};
    int rc = call_none(append, a, 1, NULL);
    Py_DECREF(append);
    Py_DECREF(row);
    if (rc < 0) goto fail;
    PyObject *busy = slot_get(k, s_busy_s, &c_k_busy), *nb = busy == NULL ? NULL : PyNumber_Add(busy, dt);
    Py_XDECREF(busy);
    if (nb == NULL) goto fail;
    rc = slot_set(k, s_busy_s, nb, &c_k_busy_set);
    Py_DECREF(nb);
    if (rc < 0 || set_ll(k, s_step, step + 1, &c_k_step_set) < 0 || attr_ll(k, s_ff_steps, &ff, &c_k_ff) < 0
            || set_ll(k, s_ff_steps, ff + 1, &c_k_ff_set) < 0)
        goto fail;
    Py_DECREF(running); Py_DECREF(lin); Py_DECREF(db); Py_DECREF(pool); Py_DECREF(fq); Py_DECREF(ext);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(running); Py_XDECREF(lin); Py_XDECREF(db); Py_XDECREF(pool); Py_XDECREF(fq); Py_XDECREF(ext);
    return NULL;
}

/* batch(plan, B, block_bytes, StepBatch) -> StepBatch: StepKernel.batch, compiled. For each
 * (r, n) of plan.scheduled, in order, but a free rider (r.uid in plan.free_riders): a decode
 * (n == 1, r.num_output, c == r.num_tokens - 1, c = r.num_computed_tokens) or a prefill chunk
 * (its tokens, its context c + n, its pairs n * (2c + n + 1) / 2 added to a float in order:
 * Python's true division of two ints, the correctly rounded quotient: (double)prod / 2 is that
 * double for any prod, halving being exact; past long long, Python's own ints), and
 * cdiv(c + n, B) pages where B. */
static PyObject *s_scheduled, *s_free_riders, *s_uid, *s_num_tokens;
static SlotCache c_b_sched, c_b_riders, c_b_so, c_b_si, c_b_uid, c_b_nct, c_b_nout, c_b_ntok;

static double py_pairs(long long n, long long c) {  /* n * (2 * c + n + 1) / 2 on Python's ints */
    PyObject *pn = PyLong_FromLongLong(n), *pc = PyLong_FromLongLong(c), *two = PyLong_FromLong(2), *one = PyLong_FromLong(1);
    PyObject *a = NULL, *b = NULL, *m = NULL, *prod = NULL, *q = NULL;
    double x = -1.0;
    if (pn && pc && two && one && (a = PyNumber_Multiply(two, pc)) && (b = PyNumber_Add(a, pn))
            && (m = PyNumber_Add(b, one)) && (prod = PyNumber_Multiply(pn, m)) && (q = PyNumber_TrueDivide(prod, two)))
        x = PyFloat_AsDouble(q);
    Py_XDECREF(pn); Py_XDECREF(pc); Py_XDECREF(two); Py_XDECREF(one); Py_XDECREF(a); Py_XDECREF(b);
    Py_XDECREF(m); Py_XDECREF(prod); Py_XDECREF(q);
    return x;
}

static PyObject *batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    long long B, bb;
    if (nargs != 4 || !PyType_Check(args[3]) || !PyType_IsSubtype((PyTypeObject *)args[3], &PyTuple_Type)
            || get_ll(args[1], &B) < 0 || get_ll(args[2], &bb) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "batch(plan, block_size, block_bytes, StepBatch: a tuple type)");
        return NULL;
    }
    PyObject *plan = args[0];
    PyObject *sch = slot_get(plan, s_scheduled, &c_b_sched), *riders = NULL;
    if (sch == NULL) return NULL;
    if (!PyList_Check(sch)) {
        Py_DECREF(sch);
        PyErr_SetString(PyExc_TypeError, "batch: plan.scheduled must be a list");
        return NULL;
    }
    if ((riders = slot_get(plan, s_free_riders, &c_b_riders)) == NULL) { Py_DECREF(sch); return NULL; }
    int any_riders = PyObject_IsTrue(riders);
    long long pf_tok = 0, pf_seqs = 0, pf_ctx = 0, dec = 0, dec_ctx = 0, pages = 0, so, si;
    double pairs = 0.0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(sch); i++) {
        PyObject *item = PyList_GET_ITEM(sch, i);
        if (any_riders < 0 || !PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "batch: plan.scheduled holds (request, tokens)");
            goto fail;
        }
        PyObject *r = PyTuple_GET_ITEM(item, 0);
        long long n, c, nout, ntok;
        if (get_ll(PyTuple_GET_ITEM(item, 1), &n) < 0) goto fail;
        if (any_riders) {
            PyObject *uid = slot_get(r, s_uid, &c_b_uid);
            int in = uid == NULL ? -1 : PySequence_Contains(riders, uid);
            Py_XDECREF(uid);
            if (in < 0) goto fail;
            if (in) continue;  /* a forked group member: the leader's prefill computed its KV */
        }
        if (attr_ll(r, s_num_computed, &c, &c_b_nct) < 0) goto fail;
        long long ctx = c + n;
        int decode = 0;
        if (n == 1) {
            if (attr_ll(r, s_num_output, &nout, &c_b_nout) < 0) goto fail;
            if (nout) {
                if (attr_ll(r, s_num_tokens, &ntok, &c_b_ntok) < 0) goto fail;
                decode = c == ntok - 1;
            }
        }
        if (decode) {
            dec += 1;
            dec_ctx += ctx;
        } else {
            pf_tok += n;
            pf_seqs += 1;
            pf_ctx += ctx;
            long long prod, m;
            if (!__builtin_add_overflow(2 * c, n + 1, &m) && !__builtin_mul_overflow(n, m, &prod)) {
                pairs += (double)prod / 2.0;
            } else {  /* past long long: Python's ints */
                double x = py_pairs(n, c);
                if (x == -1.0 && PyErr_Occurred()) goto fail;
                pairs += x;
            }
        }
        if (B) pages += ctx >= 0 ? (ctx + B - 1) / B : -((-ctx) / B);
    }
    if (attr_ll(plan, s_swap_out, &so, &c_b_so) < 0 || attr_ll(plan, s_swap_in, &si, &c_b_si) < 0) goto fail;
    Py_DECREF(sch);
    Py_DECREF(riders);
    PyTypeObject *tp = (PyTypeObject *)args[3];
    PyObject *out = tp->tp_alloc(tp, 11);
    if (out == NULL) return NULL;
    long long f[11] = {pf_tok, pf_seqs, 0, pf_ctx, dec, dec_ctx, pages, B, so, si, bb};
    for (int i = 0; i < 11; i++) {
        PyObject *o = i == 2 ? PyFloat_FromDouble(pairs) : PyLong_FromLongLong(f[i]);
        if (o == NULL) { Py_DECREF(out); return NULL; }
        PyTuple_SET_ITEM(out, i, o);
    }
    return out;
fail:
    Py_DECREF(sch);
    Py_DECREF(riders);
    return NULL;
}

/* computed(scheduled) -> int: sum(r.num_computed_tokens for r, _ in scheduled), steps.computed_of */
static SlotCache c_sum_nct;

static PyObject *computed(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 1 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "computed(scheduled: list of (request, tokens))");
        return NULL;
    }
    long long total = 0, v;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(args[0]); i++) {
        PyObject *item = PyList_GET_ITEM(args[0], i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
            PyErr_SetString(PyExc_TypeError, "computed: scheduled holds (request, tokens)");
            return NULL;
        }
        if (attr_ll(PyTuple_GET_ITEM(item, 0), s_num_computed, &v, &c_sum_nct) < 0) return NULL;
        total += v;
    }
    return PyLong_FromLongLong(total);
}

/* leave_all(done, buckets, s1, paged) -> (computed, pages): decoders.leave_all, compiled. For each
 * request of done, in order: its computed tokens (at c0) counted, out of its block bucket
 * (buckets[(1 - c0) % len(buckets)], where paged: list.remove's first identical one) with its
 * pages (len(r.kv.blocks)) counted, then its counts moved by s1 to the real ones. */
static SlotCache c_la_nct, c_la_nct_set, c_la_nout, c_la_nout_set, c_la_ntok, c_la_ntok_set, c_la_kv, c_la_blocks;

static int shift_by(PyObject *r, PyObject *name, long long s1, SlotCache *g, SlotCache *st) {
    long long v;
    return attr_ll(r, name, &v, g) < 0 ? -1 : set_ll(r, name, v + s1, st);
}

static PyObject *leave_all(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    long long s1;
    int paged;
    if (nargs != 4 || !PyList_Check(args[0]) || !PyList_Check(args[1]) || get_ll(args[2], &s1) < 0
            || (paged = PyObject_IsTrue(args[3])) < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "leave_all(done: list, buckets: list, s1, paged)");
        return NULL;
    }
    PyObject *done = args[0], *buckets = args[1];
    Py_ssize_t nb = PyList_GET_SIZE(buckets);
    if (paged && nb == 0) {
        PyErr_SetString(PyExc_ZeroDivisionError, "leave_all: no buckets");
        return NULL;
    }
    long long computed = 0, pages = 0, c;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(done); i++) {
        PyObject *r = PyList_GET_ITEM(done, i);
        if (attr_ll(r, s_num_computed, &c, &c_la_nct) < 0) return NULL;
        computed += c;
        if (paged) {
            long long j = (1 - c) % nb;
            PyObject *bucket = PyList_GET_ITEM(buckets, j < 0 ? j + nb : j);
            if (!PyList_Check(bucket)) {
                PyErr_SetString(PyExc_TypeError, "leave_all: a bucket must be a list");
                return NULL;
            }
            Py_ssize_t k = 0, n = PyList_GET_SIZE(bucket);
            for (; k < n; k++) {
                PyObject *x = PyList_GET_ITEM(bucket, k);
                if (x == r) break;
                int eq = PyObject_RichCompareBool(x, r, Py_EQ);  /* list.remove's test (identity, for a Request) */
                if (eq < 0) return NULL;
                if (eq) break;
            }
            if (k == n) {
                PyErr_SetString(PyExc_ValueError, "list.remove(x): x not in list");
                return NULL;
            }
            if (PyList_SetSlice(bucket, k, k + 1, NULL) < 0) return NULL;
            PyObject *t = slot_get(r, s_kv, &c_la_kv), *b = t == NULL ? NULL : slot_get(t, s_blocks, &c_la_blocks);
            Py_XDECREF(t);
            if (b == NULL) return NULL;
            Py_ssize_t held = PyObject_Size(b);
            Py_DECREF(b);
            if (held < 0) return NULL;
            pages += held;
        }
        if (shift_by(r, s_num_computed, s1, &c_la_nct, &c_la_nct_set) < 0
                || shift_by(r, s_num_output, s1, &c_la_nout, &c_la_nout_set) < 0
                || shift_by(r, s_num_tokens, s1, &c_la_ntok, &c_la_ntok_set) < 0)
            return NULL;
    }
    return Py_BuildValue("(LL)", computed, pages);
}

static PyMethodDef methods[] = {
    {"leave_all", (PyCFunction)(void (*)(void))leave_all, METH_FASTCALL,
     "Finished decoders out of the window's indexes, their counts made real (see the module source)."},
    {"computed", (PyCFunction)(void (*)(void))computed, METH_FASTCALL,
     "The computed tokens of a plan's scheduled requests, summed (see the module source)."},
    {"batch", (PyCFunction)(void (*)(void))batch, METH_FASTCALL,
     "A step's StepBatch from its plan (see the module source)."},
    {"land", (PyCFunction)(void (*)(void))land, METH_FASTCALL,
     "A window step lands: its finished requests freed, its record (see the module source)."},
    {"steps", (PyCFunction)(void (*)(void))steps, METH_FASTCALL,
     "A window's quiet steps, one after another (see the module source)."},
    {"boundary", (PyCFunction)(void (*)(void))boundary, METH_FASTCALL,
     "A window step's block boundary (see the module source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_quiet_steps",
                                    "A fast-forward window's quiet steps, compiled.", -1, methods};

PyMODINIT_FUNC PyInit__quiet_steps(void) {
    if (!(s_size = PyUnicode_InternFromString("size")) ||
        !(s_evictions = PyUnicode_InternFromString("evictions")) ||
        !(s_shared_excess = PyUnicode_InternFromString("shared_excess")) ||
        !(s_dups = PyUnicode_InternFromString("dups")) ||
        !(s_observed = PyUnicode_InternFromString("observed")) ||
        !(s_pass_min = PyUnicode_InternFromString("pass_min")) ||
        !(s_peek = PyUnicode_InternFromString("peek")) ||
        !(s_kv = PyUnicode_InternFromString("kv")) || !(s_block_size = PyUnicode_InternFromString("block_size")) ||
        !(s_caching = PyUnicode_InternFromString("caching")) ||
        !(s_pending_output = PyUnicode_InternFromString("pending_output")) ||
        !(s_num_computed = PyUnicode_InternFromString("num_computed_tokens")) ||
        !(s_register_full_blocks = PyUnicode_InternFromString("register_full_blocks")) ||
        !(s_finish = PyUnicode_InternFromString("finish")) || !(s_sched = PyUnicode_InternFromString("sched")) ||
        !(s_running = PyUnicode_InternFromString("running")) || !(s_lin = PyUnicode_InternFromString("lin")) ||
        !(s_decode_blocks = PyUnicode_InternFromString("decode_blocks")) ||
        !(s_pool = PyUnicode_InternFromString("pool")) || !(s_free_queue = PyUnicode_InternFromString("free_queue")) ||
        !(s_log = PyUnicode_InternFromString("log")) || !(s_append = PyUnicode_InternFromString("append")) ||
        !(s_step = PyUnicode_InternFromString("step")) || !(s_busy_s = PyUnicode_InternFromString("busy_s")) ||
        !(s_ff_steps = PyUnicode_InternFromString("ff_steps")) ||
        !(s_num_preempted = PyUnicode_InternFromString("num_preempted")) ||
        !(s_swap_out = PyUnicode_InternFromString("swap_out_blocks")) ||
        !(s_swap_in = PyUnicode_InternFromString("swap_in_blocks")) || !(ZERO = PyLong_FromLong(0)) ||
        !(s_scheduled = PyUnicode_InternFromString("scheduled")) ||
        !(s_free_riders = PyUnicode_InternFromString("free_riders")) || !(s_uid = PyUnicode_InternFromString("uid")) ||
        !(s_num_output = PyUnicode_InternFromString("num_output")) ||
        !(s_num_tokens = PyUnicode_InternFromString("num_tokens")) ||
        !(s_blocks = PyUnicode_InternFromString("blocks")) ||
        !(s_plain_hooks = PyUnicode_InternFromString("plain_hooks")) ||
        !(s_plain_methods = PyUnicode_InternFromString("plain_methods")) ||
        !(s_connector = PyUnicode_InternFromString("connector")) ||
        !(s_free = PyUnicode_InternFromString("free")) || !(s_status = PyUnicode_InternFromString("status")) ||
        !(s_finish_s = PyUnicode_InternFromString("finish_s")) ||
        !(s_finish_step = PyUnicode_InternFromString("finish_step")) ||
        !(s_finished = PyUnicode_InternFromString("finished")))
        return NULL;
    return PyModule_Create(&module);
}
