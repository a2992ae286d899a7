# Cython declarations for decoders.py (compiled where a C compiler is: setup.py). The requests'
# token counts stay the int objects they hold; the sums are C integers.
cimport cython


@cython.locals(B=Py_ssize_t, bucket=list, filling=list)
cpdef Py_ssize_t boundary(list buckets, Py_ssize_t s1, bint lag, object cross, object register) except -1

@cython.locals(computed=Py_ssize_t, pages=Py_ssize_t)
cpdef tuple leave_all(list done, list buckets, Py_ssize_t s1, bint paged)

cpdef Py_ssize_t leave(object r, list buckets, bint paged) except -1
