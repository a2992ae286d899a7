# Cython declarations for free_queue.py (compiled where a C compiler is: setup.py).
cimport cython


cdef class FreeQueue:
    cdef public object _head, _tail
    cdef public Py_ssize_t size
    cdef public list _next, _prev

    @cython.locals(prv=list, out=list)
    cpdef list pop_n(self, Py_ssize_t n)
    @cython.locals(nxt=list, prv=list, i=Py_ssize_t)
    cpdef remove(self, object b)
    @cython.locals(nxt=list, prv=list)
    cpdef append_n(self, list blocks)
    @cython.locals(nxt=list, prv=list)
    cpdef prepend_n(self, list blocks)
