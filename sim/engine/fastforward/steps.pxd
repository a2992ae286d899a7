# Cython declarations for steps.py (compiled where a C compiler is: setup.py). The window's state
# is typed (window_state.pxd); its kernel, the plan and the requests stay the objects they are (a
# scheduler's or an allocator's override runs).
cimport cython

from sim.engine.fastforward.window_state cimport WindowState
from sim.kv.linear cimport split


@cython.locals(B=Py_ssize_t, free_blocks=Py_ssize_t, shared=Py_ssize_t, internal=Py_ssize_t,
               tok=Py_ssize_t, res=Py_ssize_t, ext=Py_ssize_t, free=Py_ssize_t)
cpdef land(WindowState w, object plan, object batch, double dt, double start, list done, Py_ssize_t computed,
           Py_ssize_t nw)
