# Cython declarations for decode_time.py (compiled where a C compiler is: setup.py).
from libc.stdint cimport int64_t

cimport cython

@cython.locals(t=double)
cpdef double step_time(double dense, double eta_attn, double head, double a_kv, double a_fl, double a_pg,
                       double roof, double floor, double tail, double sched, bint is_async, int64_t ctx,
                       int64_t pages) noexcept
