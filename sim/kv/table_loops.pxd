# Cython declarations for table_loops.py (compiled where a C compiler is: setup.py). Counts and
# indices are C integers; block ids stay the lists' own int objects (``i`` is one as a C index);
# the requests (their fields read as struct members), their tables, the margin and the map stay the objects they are (the map may be
# a dict subclass that logs its changes: untyped).
from libc.stdint cimport int64_t

cimport cython

from sim.kv.block_pool cimport BlockPool, pop_front
from sim.kv.block_table cimport BlockTable
from sim.kv.free_queue cimport FreeQueue
from sim.kv.margin cimport Margin
from sim.request cimport Request


@cython.locals(n=Py_ssize_t, k=Py_ssize_t, r=Request)
cpdef append_each(list reqs, list blocks)

@cython.locals(n=Py_ssize_t, k=Py_ssize_t, c=Py_ssize_t, upto=Py_ssize_t, j=Py_ssize_t, i=Py_ssize_t, blocks=list,
               table=BlockTable, r=Request)
cdef _each_decoder(list reqs, list new, Py_ssize_t ahead, Py_ssize_t block_size, list bh, object mark, object slow)

cpdef register_decoded(list reqs, Py_ssize_t ahead, Py_ssize_t block_size, list bh, object mark, object slow)

@cython.locals(fq=FreeQueue, evicted=Py_ssize_t, new=list, bh=list)
cpdef bint cross_pool(list reqs, BlockPool pool, object ahead, Py_ssize_t block_size, object mark, object slow) except -1

@cython.locals(j0=Py_ssize_t, end=Py_ssize_t, j=Py_ssize_t, i=Py_ssize_t, blocks=list)
cpdef mark_full(list bh, BlockTable table, Py_ssize_t full)

@cython.locals(need=Py_ssize_t)
cpdef Py_ssize_t new_blocks(Request req, Py_ssize_t slots, Py_ssize_t nhit, Py_ssize_t block_size) except -1

@cython.locals(nhit=Py_ssize_t, need=Py_ssize_t, hit_free=Py_ssize_t)
cpdef Py_ssize_t can_take(BlockPool pool, Margin margin, Py_ssize_t block_size, Request req, Py_ssize_t n,
                          object hits, Py_ssize_t reserve) except? -2

@cython.locals(need=Py_ssize_t, upto=Py_ssize_t, tokens=Py_ssize_t, table=BlockTable)
cpdef bint grow(BlockPool pool, Margin margin, Py_ssize_t block_size, Request req, Py_ssize_t n,
                Py_ssize_t reserve) except -1

@cython.locals(j=Py_ssize_t, hits=list)
cpdef list lookup_unique(object cache, long long u0, Py_ssize_t n)

@cython.locals(bh=list, end=Py_ssize_t, j=Py_ssize_t, i=Py_ssize_t)
cpdef publish(BlockPool pool, list blocks, Py_ssize_t n, long long u0)
