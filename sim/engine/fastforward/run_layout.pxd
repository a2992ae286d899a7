# Cython declarations for run_layout.py (compiled where a C compiler is: setup.py).
from libc.stdint cimport int64_t

cimport cython

from sim.cost.decode_time cimport step_time


@cython.locals(H=Py_ssize_t, B=Py_ssize_t, i=Py_ssize_t, c=int64_t, x=int64_t, dt=double,
               dense=double, eta_attn=double, head=double, a_kv=double, a_fl=double, a_pg=double,
               roof=double, floor=double, tail=double, sched=double, is_async=bint)
cpdef void fill(int64_t[::1] cum, int64_t[::1] ctx, double[::1] dts, double[::1] ends, double[::1] busy,
                int64_t[::1] pops, int64_t decoders, int64_t ctx0, int64_t pages, object k, double p_dt,
                double p_start, double t, double busy0, int lag) except *
