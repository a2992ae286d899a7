# Cython declarations for decoders.py (compiled where a C compiler is: setup.py). The requests'
# token counts stay the int objects they hold (read as struct members); the sums are C integers.
cimport cython

from sim.request cimport Request


cpdef Py_ssize_t join(Request r, object finish_at, dict fin, list ends, list buckets, bint paged) except -1

@cython.locals(c0=Py_ssize_t, n_in=Py_ssize_t, pages=Py_ssize_t, r=Request)
cpdef tuple join_planned(plan, end, lag, s1, dict fin, list ends, list buckets, bint paged, set partial)

@cython.locals(c0_sum=Py_ssize_t, decoders=Py_ssize_t, pages=Py_ssize_t, r=Request)
cpdef tuple index(list running, part, dict fin, list ends, list buckets, bint paged)

@cython.locals(B=Py_ssize_t, bucket=list, filling=list)
cpdef Py_ssize_t boundary(list buckets, Py_ssize_t s1, bint lag, object cross, object register) except -1

@cython.locals(computed=Py_ssize_t, pages=Py_ssize_t, r=Request)
cpdef tuple leave_all(list done, list buckets, Py_ssize_t s1, bint paged)

cpdef Py_ssize_t leave(Request r, list buckets, bint paged) except -1

@cython.locals(r=Request)
cpdef shift(list reqs, s)
