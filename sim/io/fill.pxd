# Cython declarations for fill.py (compiled where a C compiler is: setup.py). A row stays an
# object (a StepRecord is a tuple subclass, which a `tuple` variable would refuse); bounds are
# checked as in Python (Cython's defaults). An int goes through `v`, a Py_ssize_t (int64 on
# the 64-bit builds kvsim runs on): Cython converts to it as an index (__index__, a float
# refused, as Python's memoryview does), to int64_t as int() would (a float truncated).
from libc.stdint cimport int64_t

cimport cython

cdef Py_ssize_t NF  # (a C constant compiled: no module attribute)


@cython.locals(n=Py_ssize_t, i=Py_ssize_t)
cpdef void fill_records(list rows, int64_t[::1] ints, double[::1] floats, Py_ssize_t start, Py_ssize_t end) except *

@cython.locals(k=Py_ssize_t, v=Py_ssize_t)
cdef void fill_one(object t, int64_t[::1] ints, double[::1] floats, Py_ssize_t o) except *

@cython.locals(n=Py_ssize_t, m=Py_ssize_t, i=Py_ssize_t, k=Py_ssize_t, j=Py_ssize_t, o=object, v=Py_ssize_t)
cpdef void gather_attrs(list objs, tuple names, int64_t[::1] ints, double[::1] floats) except *


cdef class RowBuffer:
    cdef public object dtype, a
    cdef int64_t[::1] ints
    cdef double[::1] floats
    cdef public Py_ssize_t n

    cpdef _grow(self, Py_ssize_t capacity)
    @cython.locals(n=Py_ssize_t)
    cpdef append(self, object t)
    cpdef clear(self)
