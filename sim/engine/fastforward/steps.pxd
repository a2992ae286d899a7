# Cython declarations for steps.py (compiled where a C compiler is: setup.py). The kernel, the
# plan and the requests stay the objects they are (a scheduler's or an allocator's override runs).
from sim.io.fill cimport RowBuffer

cimport cython


@cython.locals(rows=RowBuffer)
cpdef land(object k, object lag, object plan, object batch, object dt, object start, list done, object computed,
           object nw)
