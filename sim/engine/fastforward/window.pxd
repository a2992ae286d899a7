# Cython declarations for window.py (compiled where a C compiler is: setup.py): the window set
# up, its state and steps declared by window_state.pxd and window_steps.pxd.
from sim.engine.fastforward.window_steps cimport WindowSteps


cdef class WindowRun(WindowSteps):
    pass
