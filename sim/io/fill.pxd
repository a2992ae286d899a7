# Cython declarations for fill.py (compiled where a C compiler is: setup.py). A row stays an
# object (a StepRecord is a tuple subclass, which a `tuple` variable would refuse); bounds are
# checked as in Python (Cython's defaults). An int field is a Py_ssize_t (int64 on the 64-bit
# builds kvsim runs on): Cython converts to it as an index (__index__, a float refused, as
# Python's memoryview does), to int64_t as int() would (a float truncated).
from libc.stdint cimport int64_t

cimport cython

from sim.request cimport Request

cdef Py_ssize_t NF  # (a C constant compiled: no module attribute)


cdef void write(int64_t[::1] ints, double[::1] floats, Py_ssize_t o, Py_ssize_t step, double start_s,
                double duration_s, Py_ssize_t num_running, Py_ssize_t num_waiting, Py_ssize_t prefill_tokens,
                Py_ssize_t decode_tokens, Py_ssize_t num_preempted, Py_ssize_t free_blocks,
                Py_ssize_t token_state_slots, Py_ssize_t reserved_slots, Py_ssize_t internal_frag_slots,
                Py_ssize_t external_frag_slots, Py_ssize_t free_slots, Py_ssize_t shared_blocks_saved,
                Py_ssize_t swap_out_blocks, Py_ssize_t swap_in_blocks) except *

@cython.locals(n=Py_ssize_t, m=Py_ssize_t, i=Py_ssize_t, k=Py_ssize_t, j=Py_ssize_t, o=object, v=Py_ssize_t,
               codes=list, code=Py_ssize_t, plain=bint)
cpdef void gather_attrs(list objs, tuple names, int64_t[::1] ints, double[::1] floats) except *

cpdef object request_field(Request r, Py_ssize_t code)


cdef class RowBuffer:
    cdef public object dtype, a
    cdef int64_t[::1] ints
    cdef double[::1] floats
    cdef public Py_ssize_t n

    cpdef _grow(self, Py_ssize_t capacity)
    @cython.locals(n=Py_ssize_t)
    cpdef append(self, object t)
    @cython.locals(n=Py_ssize_t)
    cpdef add(self, Py_ssize_t step, double start_s, double duration_s, Py_ssize_t num_running,
              Py_ssize_t num_waiting, Py_ssize_t prefill_tokens, Py_ssize_t decode_tokens, Py_ssize_t num_preempted,
              Py_ssize_t free_blocks, Py_ssize_t token_state_slots, Py_ssize_t reserved_slots,
              Py_ssize_t internal_frag_slots, Py_ssize_t external_frag_slots, Py_ssize_t free_slots,
              Py_ssize_t shared_blocks_saved, Py_ssize_t swap_out_blocks, Py_ssize_t swap_in_blocks)
    cpdef clear(self)
