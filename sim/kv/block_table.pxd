# Cython declarations for block_table.py (compiled where a C compiler is: setup.py).
cdef class BlockTable:
    cdef public list blocks, hashes
    cdef public Py_ssize_t num_registered
