# Cython declarations for quiet_steps.py (compiled where a C compiler is: setup.py). Counts and
# times are C integers and doubles; the pool, its free queue (not a concrete class:
# tests/test_layers.py), the allocator's cross_call, the window's callables, the margin and the
# requests stay the objects they are.
from libc.stdint cimport int64_t

cimport cython

from sim.cost.decode_time cimport step_time
from sim.engine.fastforward.decoders cimport boundary
from sim.io.fill cimport RowBuffer
from sim.kv.linear cimport split


@cython.final
cdef class QuietSteps:
    cdef object k, register, blocks, margin, fn, crosser, pull, next_due, waiting, admits
    cdef bint lag, na_gate
    cdef list buckets, ends
    cdef dict fin
    cdef tuple call
    cdef int64_t usable, nulls, bsize, run_gap
    cdef object pool, fq
    cdef RowBuffer rows

    cpdef cross(self, list bucket, object ahead)
    cpdef Py_ssize_t boundary(self, Py_ssize_t s1) except -1
    @cython.locals(gap=int64_t, last=int64_t, lag=bint, dense=double, eta_attn=double, hd=double, a_kv=double,
                   a_fl=double, a_pg=double, roof=double, floor=double, tail=double, sched=double, is_async=bint,
                   f0=int64_t, f1=int64_t, f2=int64_t, f3=int64_t, f4=int64_t, buckets=list, fin=dict,
                   B=int64_t, usable=int64_t, nulls=int64_t, na_gate=double,
                   limit=int64_t, budget=int64_t, step=int64_t, busy=double, n=int64_t, s1=int64_t, bucket=list,
                   nb=Py_ssize_t, slack=int64_t, plan_t=double, pg=int64_t, ctx=int64_t, d=double,
                   free_blocks=int64_t, shared=int64_t, internal=int64_t, tok=int64_t, res=int64_t, ext=int64_t,
                   free=int64_t, rows=RowBuffer)
    cpdef tuple take(self, int64_t s, double t, int64_t pages, int64_t c0_sum, int64_t decoders, double dt,
                     object p_plan, object p_batch, double p_dt, double p_start, Py_ssize_t qnw, object head,
                     Py_ssize_t nrun, double due, double na, object held, double room)
