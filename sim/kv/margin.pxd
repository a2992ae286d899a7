# Cython declarations for margin.py (compiled where a C compiler is: setup.py). NEVER (1 << 62)
# and every slack fit a C long long.
cdef class Margin:
    cdef public long long pass_min, fail_max

    cpdef bint note(self, long long slack) except -1
