/* An attribute of a __slots__ instance, read and written at its slot: what PyObject_GetAttr and
 * PyObject_SetAttr do for it, without their lookups (about 160 instructions a call, 10 here).
 *
 * The compiled loops read a few attributes of every request a step touches (Request.kv,
 * BlockTable.blocks, ...; both slotted dataclasses). A SlotCache, one per call site, remembers
 * where the attribute lives in the last type it was read on:
 *
 *     instance of tp                   tp.__dict__[name]: member_descriptor
 *     +---------+-----+-----+-----+    +-----------------------------------+
 *     | ob_refcnt, ob_type | ... | slot |  <--  offset (PyMemberDef.offset, T_OBJECT_EX)
 *     +---------+-----+-----+-----+    +-----------------------------------+
 *
 * and uses it while the object's type is that type and the type is unchanged since
 * (`tp_version_tag`, which CPython drops and renews on any change to the type or its bases, as
 * its own attribute caches do). Anything else takes the generic call, so behaviour is the same:
 * a type with its own __getattribute__ / __setattr__ (a frozen dataclass, say), a name that is
 * not a plain object slot (a property, a class attribute, a read-only member), an unset slot
 * (the generic call raises the AttributeError), a free-threaded build.
 */
#ifndef KVSIM_SLOT_ATTR_H
#define KVSIM_SLOT_ATTR_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>  /* T_OBJECT_EX, READONLY */

typedef struct {
    PyTypeObject *tp;  /* borrowed: compared, never dereferenced once stale */
    unsigned int tag;
    Py_ssize_t off;
    int writable;
} SlotCache;

/* the slot's offset in o, or -1: take the generic call (either remembered for the type) */
static Py_ssize_t slot_offset(PyObject *o, PyObject *name, SlotCache *c) {
#ifdef Py_GIL_DISABLED
    return -1;
#else
    PyTypeObject *tp = Py_TYPE(o);
    if (c->tp == tp && (tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) && tp->tp_version_tag == c->tag)
        return c->off;
    c->tp = NULL;
    if (tp->tp_getattro != PyObject_GenericGetAttr) return -1;
    Py_ssize_t off = -1;
    int writable = 0;
    PyObject *d = _PyType_Lookup(tp, name);  /* borrowed; gives tp a version tag where it can */
    if (d != NULL && Py_IS_TYPE(d, &PyMemberDescr_Type)) {
        PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
        if (m->type == T_OBJECT_EX && m->offset > 0) {
            off = m->offset;
            writable = !(m->flags & READONLY) && tp->tp_setattro == PyObject_GenericSetAttr;
        }
    }
    if (tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) {  /* else used once, not remembered */
        c->tp = tp;
        c->tag = tp->tp_version_tag;
        c->off = off;
        c->writable = writable;
    }
    return off;
#endif
}

/* o.name, a new reference (NULL with an exception set) */
static inline PyObject *slot_get(PyObject *o, PyObject *name, SlotCache *c) {
    Py_ssize_t off = slot_offset(o, name, c);
    if (off > 0) {
        PyObject *v = *(PyObject **)((char *)o + off);
        if (v != NULL) return Py_NewRef(v);
    }
    return PyObject_GetAttr(o, name);
}

/* o.name = v (v borrowed); 0, or -1 with an exception set */
static inline int slot_set(PyObject *o, PyObject *name, PyObject *v, SlotCache *c) {
    Py_ssize_t off = slot_offset(o, name, c);
    if (off > 0 && c->tp == Py_TYPE(o) && c->writable) {
        PyObject **p = (PyObject **)((char *)o + off);
        Py_XSETREF(*p, Py_NewRef(v));
        return 0;
    }
    return PyObject_SetAttr(o, name, v);
}

#endif
