# Cython declarations for waiting_pass.py (compiled where a C compiler is: setup.py). Counts
# are C integers; the queue, the rules, the margins, the allocator and the requests' classes stay
# the objects they are (a subclass's methods run); a request's fields are read as struct members,
# its token counts the int objects it holds.
cimport cython

from sim.request cimport Request


@cython.locals(cap=Py_ssize_t, B=Py_ssize_t, n=Py_ssize_t, ext=Py_ssize_t, busy=bint, loaded=bint, skipped=list,
               r=Request)
cpdef admit(sched, plan, Py_ssize_t budget, now, step)

cpdef Py_ssize_t long_prefill_cap(sched, Py_ssize_t n) except? -1

@cython.locals(slack=Py_ssize_t)
cpdef bint admits_nothing(sched, Request head, Py_ssize_t budget) except -1

cpdef count_hit(sched, Request r, tokens)
