# Cython declarations for step_batch.py (compiled where a C compiler is: setup.py). The counts are
# C integers read from the requests' own int objects (struct members); ``pairs`` a C double, each term Python's
# true division of two ints (the int product as a double, halved: exact).
from libc.stdint cimport int64_t

cimport cython

from sim.request cimport Request


@cython.locals(pf_tok=int64_t, pf_seqs=int64_t, pf_ctx=int64_t, dec=int64_t, dec_ctx=int64_t, pages=int64_t,
               pairs=double, n=int64_t, c=int64_t, ctx=int64_t, r=Request)
cpdef object batch_of(object plan, int64_t B, object block_bytes)

@cython.locals(total=int64_t, r=Request)
cpdef object computed_of(list scheduled)
