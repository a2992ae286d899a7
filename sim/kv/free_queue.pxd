# Cython declarations for free_queue.py (compiled where a C compiler is: setup.py): the links
# are C arrays (typed memoryviews of the array("q") buffers), the ids the int objects tables hold.
from libc.stdint cimport int64_t

cimport cython


cdef class FreeQueue:
    cdef public Py_ssize_t _head, _tail
    cdef public Py_ssize_t size
    cdef public int64_t[::1] _next, _prev
    cdef public list ids

    @cython.locals(prv=int64_t[::1], out=list, ids=list, b=Py_ssize_t)
    cpdef list pop_n(self, Py_ssize_t n)
    @cython.locals(nxt=int64_t[::1], prv=int64_t[::1], i=Py_ssize_t, p=Py_ssize_t, n=Py_ssize_t)
    cpdef remove(self, object b)
    @cython.locals(nxt=int64_t[::1], prv=int64_t[::1], last=Py_ssize_t, b=Py_ssize_t)
    cpdef append_n(self, list blocks)
    @cython.locals(nxt=int64_t[::1], prv=int64_t[::1], first=Py_ssize_t, b=Py_ssize_t)
    cpdef prepend_n(self, list blocks)
