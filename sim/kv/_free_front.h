/* The free queue's front pop for _table_loops.c's cross (PagedAllocator.cross_boundary, a window
 * step's block boundary in one call) and take: what BlockPool.get_new_blocks' loop does
 * (sim/kv/block_pool.py). Every index is bounds-checked: a bad block id raises
 * IndexError, never reads memory.
 */
#ifndef KVSIM_FREE_FRONT_H
#define KVSIM_FREE_FRONT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

static int get_index(PyObject *list, PyObject *item, Py_ssize_t *out) {
    Py_ssize_t i = PyLong_AsSsize_t(item);
    if (i == -1 && PyErr_Occurred()) return -1;
    if (i < 0 || i >= PyList_GET_SIZE(list)) {
        PyErr_Format(PyExc_IndexError, "block id %zd out of range", i);
        return -1;
    }
    *out = i;
    return 0;
}

/* `item` as an index below `lim` (the least length of the lists it indexes): one conversion for
 * several lists */
static int index_below(PyObject *item, Py_ssize_t lim, Py_ssize_t *out) {
    Py_ssize_t i = PyLong_AsSsize_t(item);
    if (i == -1 && PyErr_Occurred()) return -1;
    if (i < 0 || i >= lim) {
        PyErr_Format(PyExc_IndexError, "block id %zd out of range", i);
        return -1;
    }
    *out = i;
    return 0;
}

static Py_ssize_t least_len(PyObject *a, PyObject *b, PyObject *c) {
    Py_ssize_t n = PyList_GET_SIZE(a);
    if (PyList_GET_SIZE(b) < n) n = PyList_GET_SIZE(b);
    return PyList_GET_SIZE(c) < n ? PyList_GET_SIZE(c) : n;
}

static void set_item(PyObject *list, Py_ssize_t i, PyObject *value) {  /* borrowed value */
    Py_INCREF(value);
    PyObject *old = PyList_GET_ITEM(list, i);
    PyList_SET_ITEM(list, i, value);
    Py_DECREF(old);
}

/* Unlink the first n blocks after `head` (lists nxt, prv, ref, bh checked by the caller; cache
 * a dict), ref count 1 each, evicting a hash a block still carries (del cache[key] unless the
 * key is `unpub`). Returns a new list of the blocks, the evictions in *evicted; NULL on error. */
static PyObject *pop_n(PyObject *nxt, PyObject *prv, PyObject *head, PyObject *ref, PyObject *bh,
                       PyObject *cache, Py_ssize_t n, PyObject *unpub, Py_ssize_t *evicted) {
    Py_ssize_t h;
    if (get_index(nxt, head, &h) < 0) return NULL;
    PyObject *out = PyList_New(n > 0 ? n : 0);
    if (out == NULL) return NULL;
    PyObject *one = PyLong_FromLong(1);  /* a cached small int: no allocation */
    *evicted = 0;
    PyObject *b = PyList_GET_ITEM(nxt, h);
    Py_ssize_t lim = least_len(ref, bh, nxt);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t bi;
        if (index_below(b, lim, &bi) < 0) goto fail;
        Py_INCREF(b);
        PyList_SET_ITEM(out, i, b);
        PyObject *key = PyList_GET_ITEM(bh, bi);
        if (key != Py_None) {
            if (key != unpub) {
                if (PyObject_DelItem(cache, key) < 0) goto fail;  /* its __delitem__ (any code) */
                lim = least_len(ref, bh, nxt);
                if (bi >= lim) {
                    PyErr_SetString(PyExc_RuntimeError, "the pool's lists shrank during a pop");
                    goto fail;
                }
            }
            set_item(bh, bi, Py_None);
            (*evicted)++;
        }
        set_item(ref, bi, one);
        b = PyList_GET_ITEM(nxt, bi);
    }
    Py_ssize_t bi;
    if (get_index(prv, b, &bi) < 0) goto fail;
    set_item(nxt, h, b);
    set_item(prv, bi, head);
    Py_DECREF(one);
    return out;
fail:
    Py_DECREF(one);
    Py_DECREF(out);
    return NULL;
}

#endif
