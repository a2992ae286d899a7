# Cython declarations for step_fold.py (compiled where a C compiler is: setup.py). With the
# directives atop step_fold.py (cdivision), a float divided by a zero pool gives inf or nan
# compiled and ZeroDivisionError as Python; a pool is never empty.
from libc.stdint cimport int64_t

cimport cython


@cython.locals(pool=double)
cdef void fold_row(double[::1] acc, int64_t[::1] ic, double B, double w, int64_t tok, int64_t res,
                   int64_t inl, int64_t ext, int64_t fre, int64_t saved) noexcept

@cython.locals(hb=double, sv=double)
cdef void fold_shares(double[::1] acc, int64_t[::1] ic, double B, double w, double s0, double s1, double s2,
                      double s3, double s4, int64_t held, int64_t saved) noexcept

@cython.locals(n=Py_ssize_t, i=Py_ssize_t, B=double)
cpdef void fold_columns(const double[:] w, const int64_t[:] tok, const int64_t[:] res, const int64_t[:] inl,
                        const int64_t[:] ext, const int64_t[:] fre, const int64_t[:] saved, double[::1] acc, int64_t[::1] ic,
                        int64_t block_size) except *

@cython.locals(r=Py_ssize_t, B=double, tok0=int64_t, int0=int64_t, free_slots=int64_t, c=int64_t, cb=int64_t,
               tok=int64_t, inl=int64_t, pool=double, s_res=double, s_ext=double)
cpdef void fold_run(const int64_t[:] ctx, const int64_t[:] cum, const double[:] dts, Py_ssize_t a, Py_ssize_t b, int lag,
                    int64_t block_size, int64_t comp0, int64_t shared, int64_t usable, int64_t free0,
                    int64_t nulls, double[::1] acc, int64_t[::1] ic) except *
