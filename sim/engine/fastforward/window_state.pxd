# Cython declarations for window_state.py (compiled where a C compiler is: setup.py): the window's
# counts and times as C integers and doubles; the kernel, the scheduler, the allocator, the
# requests and the callables stay the objects they are; the step log's rows are its record buffer.
from sim.io.fill cimport RowBuffer


cdef class WindowState:
    cdef public RowBuffer rows
    cdef public object k, sched, kv, running, waiting, seqs, pool, fq, margin, register, cross, step_cost, bb
    cdef public object breakdown, own, router, head, log, progress, dec_time, p_plan, p_batch, p_done
    cdef public object cap, runs, quick, polls, pull_due, part, f, held, out, planned, keep
    cdef public dict fin
    cdef public list ends, buckets, bucket
    cdef public set partial
    cdef public Py_ssize_t lag, max_batched, max_seqs, B, page, usable, nulls, c0_sum, decoders, pages, qnw, s
    cdef public Py_ssize_t dec_n, every, nw
    cdef public double t, dt, p_dt, p_start, due, na, plan_t
    cdef public bint paged, caching, sync_reg, preempts, quiet, busy, landing, pausable, real_counts, linear
