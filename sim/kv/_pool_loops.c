/* The block pool's two per-block loops, compiled: an optional accelerator for sim/kv/block_pool.py.
 *
 * They work on the pool's own Python lists (ref counts, block hashes, the free queue's links), in
 * place, and do exactly what the pure-Python loops in block_pool.py do, step for step: the same
 * blocks in the same order, the same links, the same counts. The pure-Python loops stay the
 * reference (KVSIM_PURE_PYTHON=1 selects them, and tests/test_pool_loops.py runs both on the same
 * operations and compares every list). Only the interpreter's per-element dispatch is saved:
 * about 125-140 ns a block in Python.
 *
 *   pop_front(nxt, prv, head, ref, bh, cache, n, unpub) -> (blocks, evicted)
 *       Unlink the first n blocks after `head` (the free queue's front), set their ref count to 1,
 *       and evict a hash a block still carries: bh[b] = None, and del cache[key] unless the key
 *       is `unpub` (UNPUBLISHED, compared by identity as in Python). Only for a pool with no
 *       duplicate keys (the caller checks), where a hashed block is its key's entry. The key is
 *       deleted through the map's own `del` (PyObject_DelItem), as Python's `del cache[key]`:
 *       a dict subclass that logs its deletes (KV events) sees every eviction.
 *
 *   release(table, ref, bh, nxt, prv, head, end, reverse, split) -> (shared, n_freed)
 *       Drop one reference on each block of `table` (last block first when `reverse`). A block
 *       still referenced counts in `shared`; one without a hash goes to the front when `split`
 *       (after `head`, in the order met, as FreeQueue.prepend_n); every other block is linked at
 *       the tail, before `end`. `n_freed` blocks joined the queue.
 *
 *   touch(blocks, ref, nxt, prv) -> (unlinked, shared)
 *       Take one more reference on each block, in order: a block with ref count 0 is unlinked
 *       from the free queue (FreeQueue.remove: its neighbours joined), one already referenced
 *       counts in `shared`. The caller adjusts the queue's size and the shared excess.
 *
 * Every index is bounds-checked: a bad block id raises IndexError, never reads memory.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_free_front.h"  /* get_index, set_item, pop_n */

static int all_lists(PyObject *const *args, int n) {
    for (int i = 0; i < n; i++) {
        if (!PyList_Check(args[i])) {
            PyErr_SetString(PyExc_TypeError, "pool loops take the pool's lists");
            return 0;
        }
    }
    return 1;
}

static PyObject *pop_front(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "pop_front takes 8 arguments");
        return NULL;
    }
    PyObject *lists[4] = {args[0], args[1], args[3], args[4]};  /* nxt, prv, ref, bh */
    if (!all_lists(lists, 4)) return NULL;
    if (!PyDict_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError, "pop_front: cache must be a dict");
        return NULL;
    }
    Py_ssize_t n = PyLong_AsSsize_t(args[6]), evicted;
    if (n == -1 && PyErr_Occurred()) return NULL;
    PyObject *out = pop_n(args[0], args[1], args[2], args[3], args[4], args[5], n, args[7], &evicted);
    return out == NULL ? NULL : Py_BuildValue("(Nn)", out, evicted);
}

static PyObject *release(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "release takes 9 arguments");
        return NULL;
    }
    PyObject *ref = args[1], *bh = args[2], *nxt = args[3], *prv = args[4], *head = args[5];
    PyObject *end = args[6];
    PyObject *lists[4] = {ref, bh, nxt, prv};
    if (!all_lists(lists, 4)) return NULL;
    int reverse = PyObject_IsTrue(args[7]), split = PyObject_IsTrue(args[8]);
    if (reverse < 0 || split < 0) return NULL;
    Py_ssize_t e, h, li;
    if (get_index(prv, end, &e) < 0 || get_index(nxt, head, &h) < 0) return NULL;
    PyObject *table = PySequence_Fast(args[0], "release: the table must be a sequence");
    if (table == NULL) return NULL;
    PyObject *front = PyList_New(0);
    if (front == NULL) {
        Py_DECREF(table);
        return NULL;
    }
    PyObject *last = PyList_GET_ITEM(prv, e);
    Py_INCREF(last);  /* held: the links below may replace the list's reference to it */
    if (get_index(nxt, last, &li) < 0) goto fail;  /* then li follows `last` */
    Py_ssize_t shared = 0, n_tail = 0, len = PySequence_Fast_GET_SIZE(table);
    PyObject **items = PySequence_Fast_ITEMS(table);
    Py_ssize_t lim = least_len(ref, bh, prv);  /* no Python code runs in the loop: the lengths hold */
    if (PyList_GET_SIZE(nxt) < lim) lim = PyList_GET_SIZE(nxt);
    for (Py_ssize_t k = 0; k < len; k++) {
        PyObject *b = items[reverse ? len - 1 - k : k];
        Py_ssize_t bi;
        if (index_below(b, lim, &bi) < 0) goto fail;
        long r = PyLong_AsLong(PyList_GET_ITEM(ref, bi));
        if (r == -1 && PyErr_Occurred()) goto fail;
        PyObject *rv = PyLong_FromLong(r - 1);
        if (rv == NULL) goto fail;
        PyObject *old = PyList_GET_ITEM(ref, bi);
        PyList_SET_ITEM(ref, bi, rv);
        Py_DECREF(old);
        if (r - 1 > 0) {
            shared++;
        } else if (split && PyList_GET_ITEM(bh, bi) == Py_None) {
            if (PyList_Append(front, b) < 0) goto fail;
        } else {
            set_item(nxt, li, b);
            set_item(prv, bi, last);
            Py_INCREF(b);
            Py_DECREF(last);
            last = b;
            li = bi;  /* < lim <= len(nxt) */
            n_tail++;
        }
    }
    set_item(nxt, li, end);
    set_item(prv, e, last);
    /* the front's blocks after head, the first met first (FreeQueue.prepend_n) */
    Py_ssize_t n_front = PyList_GET_SIZE(front);
    if (n_front) {
        PyObject *first = PyList_GET_ITEM(nxt, h);
        for (Py_ssize_t k = n_front - 1; k >= 0; k--) {
            PyObject *b = PyList_GET_ITEM(front, k);
            Py_ssize_t bi, fi;
            if (get_index(nxt, b, &bi) < 0 || get_index(prv, first, &fi) < 0) goto fail;
            set_item(nxt, bi, first);
            set_item(prv, fi, b);
            first = b;  /* still held by `front` */
        }
        Py_ssize_t fi;
        if (get_index(prv, first, &fi) < 0) goto fail;
        set_item(nxt, h, first);
        set_item(prv, fi, head);
    }
    Py_DECREF(last);
    Py_DECREF(table);
    Py_DECREF(front);
    return Py_BuildValue("(nn)", shared, n_tail + n_front);
fail:
    Py_DECREF(last);
    Py_DECREF(table);
    Py_DECREF(front);
    return NULL;
}

static PyObject *touch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "touch takes 4 arguments");
        return NULL;
    }
    PyObject *ref = args[1], *nxt = args[2], *prv = args[3];
    PyObject *lists[3] = {ref, nxt, prv};
    if (!all_lists(lists, 3)) return NULL;
    PyObject *blocks = PySequence_Fast(args[0], "touch: blocks must be a sequence");
    if (blocks == NULL) return NULL;
    Py_ssize_t unlinked = 0, shared = 0, len = PySequence_Fast_GET_SIZE(blocks);
    PyObject **items = PySequence_Fast_ITEMS(blocks);
    for (Py_ssize_t k = 0; k < len; k++) {
        PyObject *b = items[k];
        Py_ssize_t bi, pi, ni;
        if (get_index(ref, b, &bi) < 0 || get_index(nxt, b, &bi) < 0) goto fail;
        long r = PyLong_AsLong(PyList_GET_ITEM(ref, bi));
        if (r == -1 && PyErr_Occurred()) goto fail;
        if (r == 0) {
            PyObject *p = PyList_GET_ITEM(prv, bi), *n = PyList_GET_ITEM(nxt, bi);
            Py_INCREF(p);  /* held: the first link below may drop the lists' references */
            Py_INCREF(n);
            int bad = get_index(nxt, p, &pi) < 0 || get_index(prv, n, &ni) < 0;
            if (!bad) {
                set_item(nxt, pi, n);
                set_item(prv, ni, p);
            }
            Py_DECREF(p);
            Py_DECREF(n);
            if (bad) goto fail;
            unlinked++;
        } else {
            shared++;
        }
        PyObject *rv = PyLong_FromLong(r + 1);
        if (rv == NULL) goto fail;
        PyObject *old = PyList_GET_ITEM(ref, bi);
        PyList_SET_ITEM(ref, bi, rv);
        Py_DECREF(old);
    }
    Py_DECREF(blocks);
    return Py_BuildValue("(nn)", unlinked, shared);
fail:
    Py_DECREF(blocks);
    return NULL;
}

static PyMethodDef methods[] = {
    {"pop_front", (PyCFunction)(void (*)(void))pop_front, METH_FASTCALL,
     "Unlink n blocks from the free queue's front (see the module source)."},
    {"release", (PyCFunction)(void (*)(void))release, METH_FASTCALL,
     "Drop one reference on each block of a table (see the module source)."},
    {"touch", (PyCFunction)(void (*)(void))touch, METH_FASTCALL,
     "Take one more reference on each block, unlinking free ones (see the module source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_pool_loops",
                                    "The block pool's per-block loops, compiled.", -1, methods};

PyMODINIT_FUNC PyInit__pool_loops(void) { return PyModule_Create(&module); }
