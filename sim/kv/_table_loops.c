/* The paged allocator's per-request block loops, compiled: an optional accelerator for
 * sim/kv/paged.py (PagedAllocator.append_block, register_decoded_blocks, register_full_blocks).
 *
 * In a fast-forward window, every step where decoders cross a block boundary gives each of them
 * one new block, and (with prefix caching) marks the block its last token filled; an admission
 * marks its prompt's blocks. On a busy replica that is a few hundred thousand requests (or
 * blocks) touched a second, in Python 40-300 ns each.
 * These loops do the same, on the same objects, in the same order; the Python in paged.py stays
 * the reference (KVSIM_PURE_PYTHON=1 selects it, and tests/test_table_loops.py runs both):
 *
 *   append_each(reqs, blocks) -> None
 *       reqs[i].kv.blocks.append(blocks[i]) for each i (the lengths must match).
 *
 *   register_decoded(reqs, ahead, block_size, block_hash, unpub, slow) -> None
 *       For each request r, in order: with upto = r.num_computed_tokens + ahead, table = r.kv and
 *       j = table.num_registered, if r.content is None, upto // block_size == j + 1 and
 *       block_hash[table.blocks[j]] is None, then block_hash[that block] = unpub and
 *       table.num_registered = j + 1 (a block of a request without content, marked unpublished);
 *       otherwise slow(r, upto) (the Python path, called at its place in the order). With unpub
 *       None (not lazy: the allocator enters keys in the map), slow(r, upto) for every request.
 *
 *   cross(reqs, nxt, prv, head, ref, block_hash, cache, unpub, ahead, block_size, mark, slow) -> evicted
 *       A window step's block boundary in one call (PagedAllocator.cross_boundary): the pops of
 *       BlockPool.get_new_blocks(len(reqs)) from the free queue's front (its loop, on the pool's
 *       lists; `unpub` the UNPUBLISHED mark), append_each(reqs,
 *       those blocks), then, unless ahead is None, register_decoded(reqs, ahead, block_size,
 *       block_hash, mark, slow). Returns the evictions; the caller takes len(reqs) off the
 *       queue's size and counts them. The appends and registrations go request by request
 *       (each table read once): the same outcome, since every pop is done before and a
 *       registration reads only its own request's table and the map (on an error, the requests
 *       before it are registered).
 *
 *   mark_blocks(block_hash, blocks, j0, full, unpub) -> None
 *       For each block b of blocks[j0:full] (a slice: clamped to the list), in order: if
 *       block_hash[b] is None, block_hash[b] = unpub (a new request's prompt blocks, marked).
 *
 *   take(blocks, nxt, prv, head, ref, block_hash, cache, unpub, n, j0, full) -> evicted
 *       An admission's new blocks in one call (PagedAllocator.allocate, a request without
 *       content): the pops of BlockPool.get_new_blocks(n) (as cross's), blocks.extend(them),
 *       then mark_blocks(block_hash, blocks, j0, full, unpub). Returns the evictions; the caller
 *       takes n off the queue's size, counts them and sets the table's num_registered.
 *
 *   fresh(req, n, reserve, args) -> True | False | None
 *       PagedAllocator.allocate(req, n, (), reserve=reserve) for a request that holds no table
 *       yet and has no content, as allocate's take path makes it (the caller checked the
 *       allocator's lazy_unique). None where that path does not apply (req.kv or req.content not
 *       None, computed + n < 1, pool.dups or pool.observed, pool.cache not the map in args):
 *       nothing changed, the caller takes the Python path. Else can_allocate's test,
 *       free - cdiv(computed + n, B) - reserve >= 0, noted in the margin (False: failed, nothing
 *       else changed); then req.kv = BlockTable(), take's pops and marks for those blocks up to
 *       full = min(computed + n, num_tokens) // B, the queue's size, the pool's evictions and the
 *       table's num_registered (full, when > 0). args: PagedAllocator.fresh_args, (fresh,
 *       Margin, margin, BlockTable, pool, free_queue, nxt, prv, head, ref, block_hash, cache,
 *       unpub, B): fresh itself first, for a compiled caller to call it from them.
 *
 *   lookup_unique(cache, u0, n) -> list
 *       cache[u0 - j] for j = 0, 1, ... while the key is in the map, at most n: a request
 *       without content probing its own blocks from before a preemption (get_computed_blocks).
 *
 *   publish(block_hash, cache, dups, blocks, n, u0, unpub) -> None
 *       For j < n (and within blocks), in order: a block b = blocks[j] whose hash is unpub
 *       enters the map under u0 - j (BlockPool.cache_block: a second block under a key waits
 *       in dups[key]). A preempted request's marked blocks, published for its probe.
 *
 * The prefix-cache map may be a dict subclass that logs what enters or leaves it (KV events):
 * it is read and written through its own protocol (get, `in`, item assignment), as the Python
 * loops do, so it sees every change.
 * Block ids are bounds-checked: a bad one raises IndexError, never reads memory.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_free_front.h"  /* get_index, set_item, pop_n */
#include "../_margin_note.h"  /* margin_note; slot_get, slot_set: the requests' and tables' slots */

static PyObject *s_kv, *s_blocks, *s_num_registered, *s_num_computed, *s_content;
static SlotCache c_kv, c_blocks, c_reg_get, c_reg_set, c_computed, c_content;  /* one per call site */

static PyObject *table_blocks(PyObject *r, PyObject **table_out) {
    /* new references: r.kv (in *table_out) and r.kv.blocks (returned, checked to be a list) */
    PyObject *table = slot_get(r, s_kv, &c_kv);
    if (table == NULL) return NULL;
    PyObject *blocks = slot_get(table, s_blocks, &c_blocks);
    if (blocks == NULL) {
        Py_DECREF(table);
        return NULL;
    }
    if (!PyList_Check(blocks)) {
        Py_DECREF(table);
        Py_DECREF(blocks);
        PyErr_SetString(PyExc_TypeError, "a block table's blocks must be a list");
        return NULL;
    }
    *table_out = table;
    return blocks;
}

static int as_long(PyObject *o, long *out) {
    long v = PyLong_AsLong(o);
    if (v == -1 && PyErr_Occurred()) return -1;
    *out = v;
    return 0;
}

static long floor_div(long a, long b) {  /* Python's a // b for b > 0 */
    long q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}

/* A decoder's filled block marked, on its table and blocks list (borrowed), if it is the fast
 * case: the block past the registered ones, unhashed (1); 0 not the fast case (call slow); -1 error */
static int mark_in(PyObject *table, PyObject *blocks, long upto, long bsize, PyObject *bh, PyObject *unpub) {
    long j;
    PyObject *reg = slot_get(table, s_num_registered, &c_reg_get);
    if (reg == NULL) return -1;
    int bad = as_long(reg, &j);
    Py_DECREF(reg);
    if (bad < 0) return -1;
    if (floor_div(upto, bsize) != j + 1 || j < 0 || j >= PyList_GET_SIZE(blocks)) return 0;
    long b;
    if (as_long(PyList_GET_ITEM(blocks, j), &b) < 0) return -1;
    if (b < 0 || b >= PyList_GET_SIZE(bh)) {
        PyErr_Format(PyExc_IndexError, "block id %ld out of range", b);
        return -1;
    }
    if (PyList_GET_ITEM(bh, b) != Py_None) return 0;
    PyObject *nj = PyLong_FromLong(j + 1);
    if (nj == NULL) return -1;
    int set = slot_set(table, s_num_registered, nj, &c_reg_set);
    Py_DECREF(nj);
    if (set < 0) return -1;
    PyObject *old = PyList_GET_ITEM(bh, b);
    Py_INCREF(unpub);
    PyList_SET_ITEM(bh, b, unpub);
    Py_DECREF(old);
    return 1;
}

/* 1: r has no content (the fast case may apply); 0: it has; -1: error */
static int no_content(PyObject *r) {
    PyObject *content = slot_get(r, s_content, &c_content);
    if (content == NULL) return -1;
    Py_DECREF(content);  /* only compared with None */
    return content == Py_None;
}

/* register_decoded's loop, and cross's after its pops (0, or -1 with an exception set). With
 * `new` (one block for each request), each request's block is appended first, its table read
 * once for both: the same outcome as appending to every table and then registering, since every
 * pop is done before and a registration reads only its own request's table and the map. Then,
 * for each request in order, its filled block is marked (a request without content, `unpub`
 * given, the fast case of mark_in) or slow(r, num_computed_tokens + ahead) is called. */
static int each_decoder(PyObject *reqs, PyObject *new, long ahead, long bsize, PyObject *bh, PyObject *unpub,
                        PyObject *slow) {
    if (bsize <= 0) {
        PyErr_SetString(PyExc_ValueError, "register_decoded: block_size must be positive");
        return -1;
    }
    Py_ssize_t n = PyList_GET_SIZE(reqs);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *r = PyList_GET_ITEM(reqs, i);
        Py_INCREF(r);  /* held: slow() may change the list */
        PyObject *table = NULL, *blocks = NULL;
        int done = 0;
        if (new != NULL) {
            blocks = table_blocks(r, &table);
            done = blocks == NULL ? -1 : PyList_Append(blocks, PyList_GET_ITEM(new, i));
        }
        long computed = 0;
        if (done == 0) {
            PyObject *c = slot_get(r, s_num_computed, &c_computed);
            done = c == NULL ? -1 : as_long(c, &computed);
            Py_XDECREF(c);
        }
        if (done == 0 && unpub != Py_None) {
            done = no_content(r);
            if (done == 1 && blocks == NULL) {  /* (not read yet: no block appended) */
                blocks = table_blocks(r, &table);
                if (blocks == NULL) done = -1;
            }
            if (done == 1) done = mark_in(table, blocks, computed + ahead, bsize, bh, unpub);
        }
        Py_XDECREF(blocks);
        Py_XDECREF(table);
        if (done == 0) {
            PyObject *u = PyLong_FromLong(computed + ahead);
            PyObject *res = u == NULL ? NULL : PyObject_CallFunctionObjArgs(slow, r, u, NULL);
            Py_XDECREF(u);
            if (res == NULL) done = -1;
            Py_XDECREF(res);
        }
        Py_DECREF(r);
        if (done < 0) return -1;
        if (PyList_GET_SIZE(reqs) != n) {
            PyErr_SetString(PyExc_RuntimeError, "register_decoded: the request list changed");
            return -1;
        }
    }
    return 0;
}

static PyObject *register_decoded(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6 || !PyList_Check(args[0]) || !PyList_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError,
                        "register_decoded(reqs: list, ahead, block_size, block_hash: list, unpub, slow)");
        return NULL;
    }
    long ahead, bsize;
    if (as_long(args[1], &ahead) < 0 || as_long(args[2], &bsize) < 0) return NULL;
    if (each_decoder(args[0], NULL, ahead, bsize, args[3], args[4], args[5]) < 0) return NULL;
    Py_RETURN_NONE;
}

/* append_each's loop (0, or -1 with an exception set); the lengths match */
static int append_all(PyObject *reqs, PyObject *new) {
    Py_ssize_t n = PyList_GET_SIZE(reqs);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *table;
        PyObject *blocks = table_blocks(PyList_GET_ITEM(reqs, i), &table);
        if (blocks == NULL) return -1;
        int rc = PyList_Append(blocks, PyList_GET_ITEM(new, i));
        Py_DECREF(blocks);
        Py_DECREF(table);
        if (rc < 0) return -1;
    }
    return 0;
}

/* the pool's arguments of cross and take, p[0..5] = nxt, prv, head, ref, block_hash, cache: the
 * lists are lists, the map a dict (1), or not (0) */
static int pool_args(PyObject *const *p) {
    return PyList_Check(p[0]) && PyList_Check(p[1]) && PyList_Check(p[3]) && PyList_Check(p[4]) &&
           PyDict_Check(p[5]);
}

static PyObject *cross(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 12 || !PyList_Check(args[0]) || !pool_args(args + 1)) {
        PyErr_SetString(PyExc_TypeError, "cross(reqs: list, nxt: list, prv: list, head, ref: list, "
                        "block_hash: list, cache: dict, unpub, ahead, block_size, mark, slow)");
        return NULL;
    }
    PyObject *reqs = args[0];
    long ahead = 0, bsize = 0;
    if (args[8] != Py_None && (as_long(args[8], &ahead) < 0 || as_long(args[9], &bsize) < 0)) return NULL;
    Py_ssize_t evicted;
    PyObject *new = pop_n(args[1], args[2], args[3], args[4], args[5], args[6], PyList_GET_SIZE(reqs), args[7],
                          &evicted);
    if (new == NULL) return NULL;
    int rc = args[8] == Py_None ? append_all(reqs, new)
                                : each_decoder(reqs, new, ahead, bsize, args[5], args[10], args[11]);
    Py_DECREF(new);
    if (rc < 0) return NULL;
    return PyLong_FromSsize_t(evicted);
}

static PyObject *append_each(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyList_Check(args[0]) || !PyList_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "append_each(reqs: list, blocks: list)");
        return NULL;
    }
    if (PyList_GET_SIZE(args[1]) != PyList_GET_SIZE(args[0])) {
        PyErr_SetString(PyExc_ValueError, "append_each: one block for each request");
        return NULL;
    }
    if (append_all(args[0], args[1]) < 0) return NULL;
    Py_RETURN_NONE;
}

/* mark_blocks' loop: blocks[j0:full] (clamped) whose hash is None get unpub (0, or -1 with an
 * exception set) */
static int mark_range(PyObject *bh, PyObject *blocks, Py_ssize_t j0, Py_ssize_t full, PyObject *unpub) {
    if (j0 < 0 || full < 0) {
        PyErr_SetString(PyExc_ValueError, "mark_blocks: j0 and full must not be negative");
        return -1;
    }
    if (full > PyList_GET_SIZE(blocks)) full = PyList_GET_SIZE(blocks);
    for (Py_ssize_t j = j0; j < full; j++) {
        long b;
        if (as_long(PyList_GET_ITEM(blocks, j), &b) < 0) return -1;
        if (b < 0 || b >= PyList_GET_SIZE(bh)) {
            PyErr_Format(PyExc_IndexError, "block id %ld out of range", b);
            return -1;
        }
        PyObject *old = PyList_GET_ITEM(bh, b);
        if (old == Py_None) {
            Py_INCREF(unpub);
            PyList_SET_ITEM(bh, b, unpub);
            Py_DECREF(old);
        }
    }
    return 0;
}

static PyObject *mark_blocks(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || !PyList_Check(args[0]) || !PyList_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "mark_blocks(block_hash: list, blocks: list, j0, full, unpub)");
        return NULL;
    }
    Py_ssize_t j0 = PyLong_AsSsize_t(args[2]), full = PyLong_AsSsize_t(args[3]);
    if ((j0 == -1 || full == -1) && PyErr_Occurred()) return NULL;
    if (mark_range(args[0], args[1], j0, full, args[4]) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *take(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 11 || !PyList_Check(args[0]) || !pool_args(args + 1)) {
        PyErr_SetString(PyExc_TypeError, "take(blocks: list, nxt: list, prv: list, head, ref: list, "
                        "block_hash: list, cache: dict, unpub, n, j0, full)");
        return NULL;
    }
    Py_ssize_t n = PyLong_AsSsize_t(args[8]), j0 = PyLong_AsSsize_t(args[9]), full = PyLong_AsSsize_t(args[10]);
    if ((n == -1 || j0 == -1 || full == -1) && PyErr_Occurred()) return NULL;
    if (n < 0 || j0 < 0 || full < 0) {
        PyErr_SetString(PyExc_ValueError, "take: n, j0 and full must not be negative");
        return NULL;
    }
    Py_ssize_t evicted;
    PyObject *new = pop_n(args[1], args[2], args[3], args[4], args[5], args[6], n, args[7], &evicted);
    if (new == NULL) return NULL;
    Py_ssize_t len = PyList_GET_SIZE(args[0]);
    int rc = PyList_SetSlice(args[0], len, len, new);  /* blocks.extend(new) */
    Py_DECREF(new);
    if (rc < 0 || mark_range(args[5], args[0], j0, full, args[7]) < 0) return NULL;
    return PyLong_FromSsize_t(evicted);
}

static PyObject *s_num_tokens, *s_size, *s_evictions, *s_dups, *s_observed, *s_cache;
static SlotCache c_fresh_kv, c_fresh_content, c_fresh_nct, c_fresh_ntok, c_fresh_reg, c_fresh_blocks, c_size_get,
    c_size_set, c_ev_get, c_ev_set;

/* o.name += d for an int attribute (an exact int: else the generic add) */
static int add_to(PyObject *o, PyObject *name, Py_ssize_t d, SlotCache *cg, SlotCache *cs) {
    PyObject *v = slot_get(o, name, cg);
    if (v == NULL) return -1;
    PyObject *dv = PyLong_FromSsize_t(d), *nv = dv == NULL ? NULL : PyNumber_Add(v, dv);
    Py_DECREF(v);
    Py_XDECREF(dv);
    if (nv == NULL) return -1;
    int rc = slot_set(o, name, nv, cs);
    Py_DECREF(nv);
    return rc;
}

static int truthy_attr(PyObject *o, PyObject *name) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL) return -1;
    int t = PyObject_IsTrue(v);
    Py_DECREF(v);
    return t;
}

static PyObject *fresh(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *a;
    if (nargs != 4 || !PyTuple_Check(a = args[3]) || PyTuple_GET_SIZE(a) != 14 || !pool_args(&PyTuple_GET_ITEM(a, 6))) {
        PyErr_SetString(PyExc_TypeError, "fresh(req, n, reserve, (fresh, Margin, margin, BlockTable, pool, free_queue, "
                        "nxt: list, prv: list, head, ref: list, block_hash: list, cache: dict, unpub, B))");
        return NULL;
    }
    PyObject *req = args[0], *pool = PyTuple_GET_ITEM(a, 4), *fq = PyTuple_GET_ITEM(a, 5);
    PyObject *const *pa = &PyTuple_GET_ITEM(a, 6);  /* nxt, prv, head, ref, block_hash, cache, unpub */
    long long n = PyLong_AsLongLong(args[1]), reserve = PyLong_AsLongLong(args[2]);
    long long B = PyLong_AsLongLong(PyTuple_GET_ITEM(a, 13)), nct, ntok, free_blocks;
    if (((n == -1 || reserve == -1 || B == -1) && PyErr_Occurred())) return NULL;
    if (B <= 0) {
        PyErr_SetString(PyExc_ValueError, "fresh: block size must be positive");
        return NULL;
    }
    PyObject *v = slot_get(req, s_kv, &c_fresh_kv);
    if (v == NULL) return NULL;
    Py_DECREF(v);
    if (v != Py_None) Py_RETURN_NONE;
    if ((v = slot_get(req, s_content, &c_fresh_content)) == NULL) return NULL;
    Py_DECREF(v);
    if (v != Py_None) Py_RETURN_NONE;
    if ((v = slot_get(req, s_num_computed, &c_fresh_nct)) == NULL) return NULL;
    nct = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if (nct == -1 && PyErr_Occurred()) return NULL;
    if (nct + n < 1) Py_RETURN_NONE;
    int dups = truthy_attr(pool, s_dups), observed = dups ? 0 : truthy_attr(pool, s_observed);
    if (dups < 0 || observed < 0) return NULL;
    if (dups || observed) Py_RETURN_NONE;
    if ((v = PyObject_GetAttr(pool, s_cache)) == NULL) return NULL;
    Py_DECREF(v);
    if (v != pa[5]) Py_RETURN_NONE;  /* the map was replaced (KV events log it): Python's path */
    if ((v = slot_get(fq, s_size, &c_size_get)) == NULL) return NULL;
    free_blocks = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if (free_blocks == -1 && PyErr_Occurred()) return NULL;
    long long need = (nct + n + B - 1) / B;
    int ok = margin_note(PyTuple_GET_ITEM(a, 2), PyTuple_GET_ITEM(a, 1), free_blocks - need - reserve);
    if (ok < 0) return NULL;
    if (!ok) Py_RETURN_FALSE;
    if ((v = slot_get(req, s_num_tokens, &c_fresh_ntok)) == NULL) return NULL;
    ntok = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if (ntok == -1 && PyErr_Occurred()) return NULL;
    long long upto = nct + n < ntok ? nct + n : ntok, full = upto >= 0 ? upto / B : 0;
    PyObject *table = PyObject_CallNoArgs(PyTuple_GET_ITEM(a, 3));
    if (table == NULL) return NULL;
    PyObject *blocks = NULL, *new = NULL;
    Py_ssize_t evicted = 0;
    if (slot_set(req, s_kv, table, &c_fresh_kv) < 0 || (blocks = slot_get(table, s_blocks, &c_fresh_blocks)) == NULL)
        goto fail;
    if (!PyList_Check(blocks)) {
        PyErr_SetString(PyExc_TypeError, "a block table's blocks must be a list");
        goto fail;
    }
    new = pop_n(pa[0], pa[1], pa[2], pa[3], pa[4], pa[5], (Py_ssize_t)need, pa[6], &evicted);
    if (new == NULL) goto fail;
    Py_ssize_t len = PyList_GET_SIZE(blocks);
    if (PyList_SetSlice(blocks, len, len, new) < 0 || mark_range(pa[4], blocks, 0, (Py_ssize_t)full, pa[6]) < 0)
        goto fail;
    if (add_to(pool, s_evictions, evicted, &c_ev_get, &c_ev_set) < 0
            || add_to(fq, s_size, -(Py_ssize_t)need, &c_size_get, &c_size_set) < 0)
        goto fail;
    if (full > 0) {
        PyObject *f = PyLong_FromLongLong(full);
        if (f == NULL || slot_set(table, s_num_registered, f, &c_fresh_reg) < 0) {
            Py_XDECREF(f);
            goto fail;
        }
        Py_DECREF(f);
    }
    Py_DECREF(new);
    Py_DECREF(blocks);
    Py_DECREF(table);
    Py_RETURN_TRUE;
fail:
    Py_XDECREF(new);
    Py_XDECREF(blocks);
    Py_DECREF(table);
    return NULL;
}

static PyObject *lookup_unique(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyDict_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "lookup_unique(cache: dict, u0, n)");
        return NULL;
    }
    PyObject *cache = args[0];
    long long u0 = PyLong_AsLongLong(args[1]);
    if (u0 == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t n = PyLong_AsSsize_t(args[2]);
    if (n == -1 && PyErr_Occurred()) return NULL;
    PyObject *hits = PyList_New(0);
    if (hits == NULL) return NULL;
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *key = PyLong_FromLongLong(u0 - (long long)j);
        if (key == NULL) goto fail;
        PyObject *b;  /* cache.get(key): a new reference, Py_None if absent */
        if (PyDict_CheckExact(cache)) {
            b = PyDict_GetItemWithError(cache, key);
            if (b == NULL && !PyErr_Occurred()) b = Py_None;
            Py_XINCREF(b);
        } else {
            b = PyObject_CallMethod(cache, "get", "O", key);  /* a subclass's own get */
        }
        Py_DECREF(key);
        if (b == NULL) goto fail;
        if (b == Py_None) {
            Py_DECREF(b);
            break;
        }
        int rc = PyList_Append(hits, b);
        Py_DECREF(b);
        if (rc < 0) goto fail;
    }
    return hits;
fail:
    Py_DECREF(hits);
    return NULL;
}

static PyObject *publish(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7 || !PyList_Check(args[0]) || !PyDict_Check(args[1]) || !PyDict_CheckExact(args[2])
        || !PyList_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError,
                        "publish(block_hash: list, cache: dict, dups: dict, blocks: list, n, u0, unpub)");
        return NULL;
    }
    PyObject *bh = args[0], *cache = args[1], *dups = args[2], *blocks = args[3], *unpub = args[6];
    Py_ssize_t n = PyLong_AsSsize_t(args[4]);
    if (n == -1 && PyErr_Occurred()) return NULL;
    long long u0 = PyLong_AsLongLong(args[5]);
    if (u0 == -1 && PyErr_Occurred()) return NULL;
    if (n > PyList_GET_SIZE(blocks)) n = PyList_GET_SIZE(blocks);
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *bo = PyList_GET_ITEM(blocks, j);
        long b;
        if (as_long(bo, &b) < 0) return NULL;
        if (b < 0 || b >= PyList_GET_SIZE(bh)) {
            PyErr_Format(PyExc_IndexError, "block id %ld out of range", b);
            return NULL;
        }
        if (PyList_GET_ITEM(bh, b) != unpub) continue;
        PyObject *key = PyLong_FromLongLong(u0 - (long long)j);
        if (key == NULL) return NULL;
        PyObject *old = PyList_GET_ITEM(bh, b);
        PyList_SET_ITEM(bh, b, key);  /* the list takes this reference */
        Py_DECREF(old);
        int has = PySequence_Contains(cache, key);  /* key in cache */
        int rc;
        if (has < 0) return NULL;
        if (has) {  /* dups.setdefault(key, []).append(b) */
            PyObject *more = PyDict_GetItemWithError(dups, key);
            if (more == NULL) {
                if (PyErr_Occurred()) return NULL;
                more = PyList_New(0);
                if (more == NULL) return NULL;
                rc = PyDict_SetItem(dups, key, more);
                Py_DECREF(more);  /* dups holds it */
                if (rc < 0) return NULL;
            }
            if (!PyList_Check(more)) {
                PyErr_SetString(PyExc_TypeError, "publish: dups values must be lists");
                return NULL;
            }
            rc = PyList_Append(more, bo);
        } else {
            rc = PyObject_SetItem(cache, key, bo);  /* cache[key] = b: its __setitem__ */
        }
        if (rc < 0) return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"append_each", (PyCFunction)(void (*)(void))append_each, METH_FASTCALL,
     "Append blocks[i] to reqs[i].kv.blocks (see the module source)."},
    {"register_decoded", (PyCFunction)(void (*)(void))register_decoded, METH_FASTCALL,
     "Mark the blocks decoders filled, or call slow(r, upto) (see the module source)."},
    {"cross", (PyCFunction)(void (*)(void))cross, METH_FASTCALL,
     "A block for each request from the free queue's front, then their filled blocks marked (see the module source)."},
    {"mark_blocks", (PyCFunction)(void (*)(void))mark_blocks, METH_FASTCALL,
     "Mark the unhashed blocks of blocks[j0:full] (see the module source)."},
    {"take", (PyCFunction)(void (*)(void))take, METH_FASTCALL,
     "A new prompt's blocks from the free queue's front, then marked (see the module source)."},
    {"fresh", (PyCFunction)(void (*)(void))fresh, METH_FASTCALL,
     "PagedAllocator.allocate for a new table without content (see the module source)."},
    {"lookup_unique", (PyCFunction)(void (*)(void))lookup_unique, METH_FASTCALL,
     "A request's own blocks in the map under u0, u0 - 1, ... (see the module source)."},
    {"publish", (PyCFunction)(void (*)(void))publish, METH_FASTCALL,
     "Enter a request's marked blocks in the map (see the module source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_table_loops",
                                    "The paged allocator's per-request loops, compiled.", -1, methods};

PyMODINIT_FUNC PyInit__table_loops(void) {
    s_kv = PyUnicode_InternFromString("kv");
    s_blocks = PyUnicode_InternFromString("blocks");
    s_num_registered = PyUnicode_InternFromString("num_registered");
    s_num_computed = PyUnicode_InternFromString("num_computed_tokens");
    s_content = PyUnicode_InternFromString("content");
    s_num_tokens = PyUnicode_InternFromString("num_tokens");
    s_size = PyUnicode_InternFromString("size");
    s_evictions = PyUnicode_InternFromString("evictions");
    s_dups = PyUnicode_InternFromString("dups");
    s_observed = PyUnicode_InternFromString("observed");
    s_cache = PyUnicode_InternFromString("cache");
    if (!s_kv || !s_blocks || !s_num_registered || !s_num_computed || !s_content || !s_num_tokens || !s_size
            || !s_evictions || !s_dups || !s_observed || !s_cache || margin_note_init() < 0) return NULL;
    return PyModule_Create(&module);
}
