/* The waiting pass of a scheduling step (waiting_pass.py: admit), compiled for its plain case:
 * an optional accelerator that waiting_pass.admit calls first, and whose Python stays the
 * reference.
 *
 * setup(FcfsQueue, Admission, Margin, RUNNING, PREEMPTED, REMOTE)
 *     once, at import: the types it handles and the statuses it sets and compares.
 *
 * admit(sched, plan, budget, now, step) -> None | int
 *     admits waiting requests as the Python pass does, candidate for candidate, and returns
 *     None where that pass ends, or the budget left where it meets a case it leaves to the
 *     Python pass, having changed nothing for that candidate:
 *
 *       the pass as a whole     the allocator does not say its arithmetic is plain
 *                               (plain_admission, sim/kv/base.py) or has a KV connector, the queue is not exactly an FcfsQueue, the rules not
 *                               exactly an Admission with the full-ISL reserve, or the scheduler
 *                               overrides a hook (plain_hooks false: paper-v0's sequence groups)
 *       one candidate           it has prompt content (its probe hashes), computed tokens (back
 *                               from a load), or waits for a remote load
 *
 *     A candidate it handles: the running slot (the seq margin's note), the no-hope check
 *     (Admission.hopeless: its blocks for num_tokens plus the watermark, noted in kv.headroom),
 *     the probe (get_computed_blocks where it holds a table: its own blocks from before a
 *     preemption), the long-prefill cap, the budget, the allocation (kv.allocate as
 *     admit_hopeful makes it, or for a request with no table yet the compiled call allocate
 *     would make, from kv.fresh_args; Admission.admit where it has hits), then popleft, the prefix
 *     counters (count_hit), status, computed tokens, first scheduled, seq, running and the plan.
 *     The allocator's calls are its Python methods: what they do is theirs.
 *
 * tests/test_admit_compiled.py runs configurations both ways and compares the outputs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../_margin_note.h"  /* margin_note; slot_get, slot_set */

static PyObject *FCFS, *ADMISSION, *MARGIN, *RUNNING, *PREEMPTED, *REMOTE;

/* interned names */
static PyObject *s_kv, *s_running, *s_waiting, *s_admission, *s_stats, *s_max_num_seqs, *s_seq_margin,
    *s_threshold, *s_chunked_prefill, *s_fresh_args, *s_lazy_unique, *s_plain_hooks, *s_plain_admission, *s_num_waiting, *s__seq, *s_connector, *s_pool,
    *s_free_queue, *s_size, *s_headroom, *s_block_size, *s_enable_caching, *s_reserve_full_isl,
    *s_watermark_blocks, *s_status, *s_content, *s_num_computed_tokens, *s_num_tokens, *s_blocks,
    *s_get_computed_blocks, *s_allocate, *s_admit, *s_popleft, *s_preempted_queries, *s_preempted_hits,
    *s_queries, *s_hits, *s_prefix_hit_tokens, *s_first_scheduled_s, *s_first_scheduled_step, *s_seq,
    *s_scheduled, *k_reserve, *ONE;

/* one cache per request, table, queue and margin slot read or written */
static SlotCache c_status, c_content, c_nct, c_ntok, c_kv, c_blocks, c_size, c_sq, c_sh,
    c_sq2, c_sh2, c_phit, c_fss, c_fstep, c_fstep_r, c_seq, c_status_w, c_nct_w;

static int get_ll(PyObject *o, PyObject *name, SlotCache *c, long long *out) {
    PyObject *v = c != NULL ? slot_get(o, name, c) : PyObject_GetAttr(o, name);
    if (v == NULL) return -1;
    *out = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int set_ll(PyObject *o, PyObject *name, SlotCache *c, long long x) {
    PyObject *v = PyLong_FromLongLong(x);
    if (v == NULL) return -1;
    int rc = slot_set(o, name, v, c);
    Py_DECREF(v);
    return rc;
}

/* o.name += x */
static int add_ll(PyObject *o, PyObject *name, SlotCache *c, long long x) {
    long long v;
    if (get_ll(o, name, c, &v) < 0) return -1;
    return set_ll(o, name, c, v + x);
}

/* Margin.note(slack) (None: slack >= 0): 1 passed, 0 failed, -1 error */
static int note(PyObject *m, long long slack) { return margin_note(m, MARGIN, slack); }

/* kv.plain_admission, optional (absent: False): 1, 0, or -1 on error */
static int says_plain(PyObject *kv) {
    PyObject *said = PyObject_GetAttr(kv, s_plain_admission);
    if (said == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
        PyErr_Clear();
        return 0;
    }
    int plain = PyObject_IsTrue(said);
    Py_DECREF(said);
    return plain;
}

/* The blocks r still needs for its num_tokens (*ntok), max(cdiv(num_tokens, B) - blocks held, 0):
 * KvAllocator.blocks_needed(r, r.num_tokens) for a plain pool, no hits. Its table (None: none yet)
 * in *table, a new reference. 0, or -1 on error (*table then NULL). */
static int own_need(PyObject *r, long long B, long long *ntok, long long *need, PyObject **table) {
    long long held = 0;
    *table = NULL;
    if (get_ll(r, s_num_tokens, &c_ntok, ntok) < 0 || (*table = slot_get(r, s_kv, &c_kv)) == NULL) return -1;
    if (*table != Py_None) {
        PyObject *blocks = slot_get(*table, s_blocks, &c_blocks);
        held = blocks == NULL ? -1 : PyObject_Size(blocks);
        Py_XDECREF(blocks);
        if (held < 0) { Py_CLEAR(*table); return -1; }
    }
    *need = (*ntok + B - 1) / B - held;
    if (*need < 0) *need = 0;
    return 0;
}

static PyObject *setup(PyObject *self, PyObject *args) {
    PyObject *o[6];
    if (!PyArg_ParseTuple(args, "OOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5])) return NULL;
    PyObject **dst[6] = {&FCFS, &ADMISSION, &MARGIN, &RUNNING, &PREEMPTED, &REMOTE};
    for (int i = 0; i < 6; i++) Py_XSETREF(*dst[i], Py_NewRef(o[i]));
    Py_RETURN_NONE;
}

/* the pass's objects, read once a call */
typedef struct {
    PyObject *kv, *running, *waiting, *adm, *stats, *seqs, *fq, *headroom, *empty, *fresh_args;
    long long cap, thr, B, wm;
    int chunked, caching, more;  /* more: the rest read (pass_more), once a candidate may be admitted */
} Pass;

static void pass_clear(Pass *p) {
    Py_CLEAR(p->kv); Py_CLEAR(p->running); Py_CLEAR(p->waiting); Py_CLEAR(p->adm); Py_CLEAR(p->stats);
    Py_CLEAR(p->seqs); Py_CLEAR(p->fq); Py_CLEAR(p->headroom); Py_CLEAR(p->fresh_args);
}

#define GET(dst, o, name) if ((dst = PyObject_GetAttr(o, name)) == NULL) return -1
#define TRUTH(dst, o, name) do { PyObject *t_ = PyObject_GetAttr(o, name); if (t_ == NULL) return -1; \
        dst = PyObject_IsTrue(t_); Py_DECREF(t_); if (dst < 0) return -1; } while (0)

/* 1: the pass is plain (p filled but for pass_more's), 0: not (the Python pass runs it), 3: no
 * request waits (the pass does nothing, whatever it is), -1: error */
static int pass_open(Pass *p, PyObject *sched) {
    int plain;
    GET(p->waiting, sched, s_waiting);
    Py_ssize_t len = PyObject_Size(p->waiting);
    if (len <= 0) return len < 0 ? -1 : 3;
    TRUTH(plain, sched, s_plain_hooks);
    if (!plain) return 0;
    GET(p->kv, sched, s_kv);
    GET(p->adm, sched, s_admission);
    if ((PyObject *)Py_TYPE(p->waiting) != FCFS || (PyObject *)Py_TYPE(p->adm) != ADMISSION) return 0;
    if ((plain = says_plain(p->kv)) <= 0) return plain;
    PyObject *conn;
    GET(conn, p->kv, s_connector);
    Py_DECREF(conn);
    if (conn != Py_None) return 0;
    TRUTH(plain, p->adm, s_reserve_full_isl);
    if (!plain) return 0;
    GET(p->running, sched, s_running);
    if (!PyList_CheckExact(p->running)) return 0;
    GET(p->seqs, sched, s_seq_margin);
    PyObject *pool;
    GET(pool, p->kv, s_pool);
    p->fq = PyObject_GetAttr(pool, s_free_queue);
    Py_DECREF(pool);
    if (p->fq == NULL) return -1;
    GET(p->headroom, p->kv, s_headroom);
    if (get_ll(sched, s_max_num_seqs, NULL, &p->cap) < 0 || get_ll(p->kv, s_block_size, NULL, &p->B) < 0
            || get_ll(p->adm, s_watermark_blocks, NULL, &p->wm) < 0)
        return -1;
    p->cap -= 1;
    return p->B > 0;
}

/* What only an admission reads (not the heads refused by the seq cap or the no-hope check, about
 * half the passes of a busy replica): 0, or -1 on error */
static int pass_more(Pass *p, PyObject *sched) {
    p->more = 1;
    GET(p->stats, sched, s_stats);
    /* optional: allocate's take path for a new table, compiled (PagedAllocator.fresh_args), taken
     * while the pool's lazy_unique holds, as allocate checks; else allocate itself is called */
    if ((p->fresh_args = PyObject_GetAttr(p->kv, s_fresh_args)) == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
        PyErr_Clear();
        p->fresh_args = Py_NewRef(Py_None);
    }
    if (p->fresh_args != Py_None) {
        int lazy;
        TRUTH(lazy, p->kv, s_lazy_unique);
        if (!lazy || !PyTuple_Check(p->fresh_args) || PyTuple_GET_SIZE(p->fresh_args) < 1)
            Py_SETREF(p->fresh_args, Py_NewRef(Py_None));
    }
    if (get_ll(sched, s_threshold, NULL, &p->thr) < 0) return -1;
    TRUTH(p->chunked, sched, s_chunked_prefill);
    TRUTH(p->caching, p->kv, s_enable_caching);
    return 0;
}

/* One candidate, the queue's head r. 1: admitted, 0: the pass ends, 2: hand back, -1: error */
static int candidate(Pass *p, PyObject *sched, PyObject *plan, PyObject *r, long long *budget,
                     PyObject *now, PyObject *step) {
    PyObject *status = slot_get(r, s_status, &c_status);
    if (status == NULL) return -1;
    Py_DECREF(status);  /* compared by identity only: the enum member lives on */
    PyObject *content = slot_get(r, s_content, &c_content);
    if (content == NULL) return -1;
    Py_DECREF(content);
    long long nct, ntok;
    if (get_ll(r, s_num_computed_tokens, &c_nct, &nct) < 0) return -1;
    if (status == REMOTE || content != Py_None || nct != 0) return 2;
    Py_ssize_t nrun = PyList_GET_SIZE(p->running);
    int ok = note(p->seqs, p->cap - (long long)nrun);
    if (ok <= 0) return ok;
    long long wm = nrun ? p->wm : 0, need, free_blocks;
    PyObject *table;
    if (own_need(r, p->B, &ntok, &need, &table) < 0) return -1;
    if (get_ll(p->fq, s_size, &c_size, &free_blocks) < 0) { Py_DECREF(table); return -1; }
    ok = note(p->headroom, free_blocks - (need + wm));
    if (ok <= 0) { Py_DECREF(table); return ok; }  /* hopeless: decided without the probe */
    if (!p->more && pass_more(p, sched) < 0) { Py_DECREF(table); return -1; }
    PyObject *hits;
    if (table == Py_None || !p->caching) hits = Py_NewRef(p->empty);
    else hits = PyObject_CallMethodOneArg(p->kv, s_get_computed_blocks, r);
    int fresh = table == Py_None;  /* no table yet */
    Py_DECREF(table);
    if (hits == NULL) return -1;
    Py_ssize_t nhit = PyObject_Size(hits);
    if (nhit < 0) { Py_DECREF(hits); return -1; }
    long long tokens = (long long)nhit * p->B, n = ntok - tokens;
    if (0 < p->thr && p->thr < n) {
        long long nw;
        if (get_ll(sched, s_num_waiting, NULL, &nw) < 0) { Py_DECREF(hits); return -1; }
        if ((long long)nrun + nw > 1) n = p->thr;
    }
    if ((!p->chunked && n > *budget)) { Py_DECREF(hits); return 0; }
    if (n > *budget) n = *budget;
    PyObject *on = PyLong_FromLongLong(n), *res;
    if (on == NULL) { Py_DECREF(hits); return -1; }
    if (nhit == 0 && fresh && p->fresh_args != Py_None) {  /* kv.allocate's own first test, made here */
        PyObject *o_wm = PyLong_FromLongLong(wm);
        if (o_wm == NULL) { Py_DECREF(hits); Py_DECREF(on); return -1; }
        PyObject *a[5] = {NULL, r, on, o_wm, p->fresh_args};
        res = PyObject_Vectorcall(PyTuple_GET_ITEM(p->fresh_args, 0), a + 1, 4 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        Py_DECREF(o_wm);
        if (res == Py_None) { Py_DECREF(res); goto generic; }  /* it does not apply: nothing changed */
    } else if (nhit == 0) {  /* admit_hopeful: the reserve was the no-hope check's comparison */
      generic:;
        PyObject *o_wm = PyLong_FromLongLong(wm);
        if (o_wm == NULL) { Py_DECREF(hits); Py_DECREF(on); return -1; }
        PyObject *a[6] = {NULL, p->kv, r, on, hits, o_wm};  /* a[0]: room for the callee (the offset flag) */
        res = PyObject_VectorcallMethod(s_allocate, a + 1, 4 | PY_VECTORCALL_ARGUMENTS_OFFSET, k_reserve);
        Py_DECREF(o_wm);
    } else {
        PyObject *a[7] = {NULL, p->adm, p->kv, r, on, hits, nrun ? Py_True : Py_False};
        res = PyObject_VectorcallMethod(s_admit, a + 1, 6 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    }
    Py_DECREF(hits);
    if (res == NULL) { Py_DECREF(on); return -1; }
    ok = PyObject_IsTrue(res);
    Py_DECREF(res);
    if (ok <= 0) { Py_DECREF(on); return ok; }
    PyObject *popped = PyObject_CallMethodNoArgs(p->waiting, s_popleft);
    if (popped == NULL) { Py_DECREF(on); return -1; }
    Py_DECREF(popped);
    int pre = PyObject_RichCompareBool(status, PREEMPTED, Py_EQ);
    if (pre < 0) { Py_DECREF(on); return -1; }
    if (pre ? (add_ll(p->stats, s_preempted_queries, &c_sq2, ntok) < 0
               || add_ll(p->stats, s_preempted_hits, &c_sh2, tokens) < 0)
            : (add_ll(p->stats, s_queries, &c_sq, ntok) < 0 || add_ll(p->stats, s_hits, &c_sh, tokens) < 0
               || set_ll(r, s_prefix_hit_tokens, &c_phit, tokens) < 0)) { Py_DECREF(on); return -1; }
    long long first;
    if (slot_set(r, s_status, RUNNING, &c_status_w) < 0 || set_ll(r, s_num_computed_tokens, &c_nct_w, tokens) < 0
            || get_ll(r, s_first_scheduled_step, &c_fstep_r, &first) < 0) { Py_DECREF(on); return -1; }
    if (first < 0 && (slot_set(r, s_first_scheduled_s, now, &c_fss) < 0
                      || slot_set(r, s_first_scheduled_step, step, &c_fstep) < 0)) { Py_DECREF(on); return -1; }
    /* Scheduler.run */
    PyObject *seq = PyObject_GetAttr(sched, s__seq), *next = NULL;
    if (seq == NULL || slot_set(r, s_seq, seq, &c_seq) < 0 || (next = PyNumber_Add(seq, ONE)) == NULL
            || PyObject_SetAttr(sched, s__seq, next) < 0 || PyList_Append(p->running, r) < 0) {
        Py_XDECREF(seq); Py_XDECREF(next); Py_DECREF(on); return -1;
    }
    Py_DECREF(seq);
    Py_DECREF(next);
    PyObject *scheduled = PyObject_GetAttr(plan, s_scheduled), *pair = NULL;
    if (scheduled == NULL || (pair = PyTuple_Pack(2, r, on)) == NULL || PyList_Append(scheduled, pair) < 0) {
        Py_XDECREF(scheduled); Py_XDECREF(pair); Py_DECREF(on); return -1;
    }
    Py_DECREF(scheduled);
    Py_DECREF(pair);
    Py_DECREF(on);
    *budget -= n;
    return 1;
}

static PyObject *admit(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "admit(sched, plan, budget, now, step)");
        return NULL;
    }
    if (FCFS == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "admit: setup() first");
        return NULL;
    }
    PyObject *sched = args[0], *plan = args[1];
    long long budget = PyLong_AsLongLong(args[2]);
    if (budget == -1 && PyErr_Occurred()) return NULL;
    Pass p = {0};
    p.empty = PyTuple_New(0);  /* the empty tuple, a singleton */
    int rc = budget > 0 ? pass_open(&p, sched) : 3;  /* 0: not plain, the whole pass is Python's */
    int back = rc == 0;
    while (rc == 1 && budget > 0) {
        Py_ssize_t len = PyObject_Size(p.waiting);
        if (len <= 0) { rc = len < 0 ? -1 : 0; break; }
        PyObject *r = PySequence_GetItem(p.waiting, 0);
        if (r == NULL) { rc = -1; break; }
        rc = candidate(&p, sched, plan, r, &budget, args[3], args[4]);
        Py_DECREF(r);
        if (rc == 2) back = 1;
    }
    pass_clear(&p);
    Py_DECREF(p.empty);
    if (rc < 0) return NULL;
    if (back) return PyLong_FromLongLong(budget);
    Py_RETURN_NONE;
}

/* nothing(sched, head, budget) -> True | False | None: waiting_pass.admits_nothing, compiled for an
 * exact Admission and an allocator that says its arithmetic is plain (None otherwise: nothing
 * read changed, the Python answers). True where no request waits (head None) or no budget is
 * left; else the seq margin's note of max_num_seqs - 1 - len(running) (failed: True); else
 * Admission.hopeless(kv, head, True): False with prompt content or without the full-ISL
 * reserve, else not fits(kv, blocks for head.num_tokens + the watermark), noted in kv.headroom. */
static PyObject *nothing(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "nothing(sched, head, budget)");
        return NULL;
    }
    if (FCFS == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "nothing: setup() first");
        return NULL;
    }
    PyObject *sched = args[0], *head = args[1];
    long long budget = PyLong_AsLongLong(args[2]);
    if (budget == -1 && PyErr_Occurred()) return NULL;
    if (head == Py_None || budget <= 0) Py_RETURN_TRUE;
    PyObject *adm = PyObject_GetAttr(sched, s_admission), *kv = NULL, *x = NULL, *out = NULL;
    if (adm == NULL) return NULL;
    if ((PyObject *)Py_TYPE(adm) != ADMISSION || (kv = PyObject_GetAttr(sched, s_kv)) == NULL) {
        out = kv == NULL && PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
        goto done;
    }
    int plain = says_plain(kv);
    if (plain <= 0) { out = plain < 0 ? NULL : Py_NewRef(Py_None); goto done; }
    long long cap, B, wm, ntok, need, free_blocks;
    PyObject *running = PyObject_GetAttr(sched, s_running);
    if (running == NULL) goto done;
    Py_ssize_t nrun = PyObject_Size(running);
    Py_DECREF(running);
    if (nrun < 0 || get_ll(sched, s_max_num_seqs, NULL, &cap) < 0 || (x = PyObject_GetAttr(sched, s_seq_margin)) == NULL)
        goto done;
    int ok = note(x, cap - 1 - (long long)nrun);
    Py_CLEAR(x);
    if (ok < 0) goto done;
    if (!ok) { out = Py_NewRef(Py_True); goto done; }
    int full;
    if ((x = PyObject_GetAttr(adm, s_reserve_full_isl)) == NULL || (full = PyObject_IsTrue(x)) < 0) goto done;
    Py_CLEAR(x);
    if ((x = slot_get(head, s_content, &c_content)) == NULL) goto done;
    int content = x != Py_None;
    Py_CLEAR(x);
    if (!full || content) { out = Py_NewRef(Py_False); goto done; }
    if (get_ll(adm, s_watermark_blocks, NULL, &wm) < 0 || get_ll(kv, s_block_size, NULL, &B) < 0) goto done;
    if (B <= 0) { out = Py_NewRef(Py_None); goto done; }
    if (own_need(head, B, &ntok, &need, &x) < 0) goto done;
    Py_CLEAR(x);
    PyObject *pool = PyObject_GetAttr(kv, s_pool), *fq = pool == NULL ? NULL : PyObject_GetAttr(pool, s_free_queue);
    Py_XDECREF(pool);
    if (fq == NULL) goto done;
    ok = get_ll(fq, s_size, &c_size, &free_blocks);
    Py_DECREF(fq);
    if (ok < 0 || (x = PyObject_GetAttr(kv, s_headroom)) == NULL) goto done;
    ok = note(x, free_blocks - (need + wm));
    Py_CLEAR(x);
    if (ok >= 0) out = Py_NewRef(ok ? Py_False : Py_True);
done:
    Py_XDECREF(x);
    Py_XDECREF(kv);
    Py_DECREF(adm);
    return out;
}

static PyMethodDef methods[] = {
    {"nothing", (PyCFunction)(void (*)(void))nothing, METH_FASTCALL,
     "waiting_pass.admits_nothing, its plain case (see the source)."},
    {"setup", setup, METH_VARARGS, "The types and statuses admit uses (see the source)."},
    {"admit", (PyCFunction)(void (*)(void))admit, METH_FASTCALL, "The waiting pass, its plain case (see the source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_admit",
    "The waiting pass of a scheduling step, compiled for its plain case.", -1, methods};

#define INTERN(v, s) if ((v = PyUnicode_InternFromString(s)) == NULL) return NULL

PyMODINIT_FUNC PyInit__admit(void) {
    INTERN(s_kv, "kv"); INTERN(s_running, "running"); INTERN(s_waiting, "waiting");
    INTERN(s_admission, "admission"); INTERN(s_stats, "stats"); INTERN(s_max_num_seqs, "max_num_seqs");
    INTERN(s_seq_margin, "seq_margin"); INTERN(s_threshold, "threshold"); INTERN(s_chunked_prefill, "chunked_prefill");
    INTERN(s_plain_hooks, "plain_hooks"); INTERN(s_fresh_args, "fresh_args"); INTERN(s_lazy_unique, "lazy_unique"); INTERN(s_plain_admission, "plain_admission"); INTERN(s_num_waiting, "num_waiting"); INTERN(s__seq, "_seq");
    INTERN(s_connector, "connector"); INTERN(s_pool, "pool"); INTERN(s_free_queue, "free_queue");
    INTERN(s_size, "size"); INTERN(s_headroom, "headroom"); INTERN(s_block_size, "block_size");
    INTERN(s_enable_caching, "enable_caching"); INTERN(s_reserve_full_isl, "reserve_full_isl");
    INTERN(s_watermark_blocks, "watermark_blocks"); INTERN(s_status, "status"); INTERN(s_content, "content");
    INTERN(s_num_computed_tokens, "num_computed_tokens"); INTERN(s_num_tokens, "num_tokens");
    INTERN(s_blocks, "blocks"); INTERN(s_get_computed_blocks, "get_computed_blocks"); INTERN(s_allocate, "allocate");
    INTERN(s_admit, "admit"); INTERN(s_popleft, "popleft"); INTERN(s_preempted_queries, "preempted_queries");
    INTERN(s_preempted_hits, "preempted_hits"); INTERN(s_queries, "queries"); INTERN(s_hits, "hits");
    INTERN(s_prefix_hit_tokens, "prefix_hit_tokens"); INTERN(s_first_scheduled_s, "first_scheduled_s");
    INTERN(s_first_scheduled_step, "first_scheduled_step"); INTERN(s_seq, "seq"); INTERN(s_scheduled, "scheduled");
    if (margin_note_init() < 0 || (k_reserve = Py_BuildValue("(s)", "reserve")) == NULL || (ONE = PyLong_FromLong(1)) == NULL) return NULL;
    return PyModule_Create(&module);
}
