# Cython declarations for linear.py (compiled where a C compiler is: setup.py).
cimport cython

@cython.locals(used=Py_ssize_t, internal=Py_ssize_t)
cpdef (Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t) split(
    Py_ssize_t block_size, Py_ssize_t usable, Py_ssize_t null_slots, Py_ssize_t free, Py_ssize_t shared,
    Py_ssize_t computed)
