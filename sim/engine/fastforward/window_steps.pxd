# Cython declarations for window_steps.py (compiled where a C compiler is: setup.py): the steps
# that return are C-callable methods of the window (its state typed by window_state.pxd); those
# that may yield (a router's read, a lockstep sleep) stay generators.
cimport cython

from sim.engine.fastforward.window_state cimport WindowState
from sim.kv.linear cimport split


cdef class WindowSteps(WindowState):
    @cython.locals(slack=Py_ssize_t)
    cpdef bint gate(self, Py_ssize_t s1) except -1
    cpdef bint run_ready(self) except -1
    cpdef cross_boundary(self, Py_ssize_t s1)
    cpdef object decode_batch(self, Py_ssize_t ctx)
    cpdef object decode_time(self)
    @cython.locals(free_blocks=Py_ssize_t, shared=Py_ssize_t, comp=Py_ssize_t, internal=Py_ssize_t, tok=Py_ssize_t,
                   res=Py_ssize_t, ext=Py_ssize_t, free=Py_ssize_t, B=Py_ssize_t, lag=Py_ssize_t)
    cpdef record_quiet(self, Py_ssize_t s1, Py_ssize_t ctx)
    @cython.locals(nw=Py_ssize_t)
    cpdef tuple plan(self, Py_ssize_t s1, object skip, Py_ssize_t n_part)
    @cython.locals(ctx=Py_ssize_t)
    cpdef object launch(self, Py_ssize_t s1, object plan)
    cpdef list join(self, Py_ssize_t s1, object plan, double end)
    cpdef bint plan_step(self, Py_ssize_t s1) except -1
    cpdef bint waits_in_flight(self) except -1
    cpdef land_in_flight(self)
    cpdef bint end_step(self, Py_ssize_t s1, object batch, double end) except -1
