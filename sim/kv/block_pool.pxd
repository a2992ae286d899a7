# Cython declarations for block_pool.py (compiled where a C compiler is: setup.py). The map and
# its duplicates stay plain objects: a KV-events map is a dict subclass that logs its own
# deletes (sim/cluster/events.py), which a typed dict's C calls would bypass. Block ids stay
# the lists' own int objects (``ids[b]``); ``i`` is one as a C index (the module docstring), and
# the free queue's links are C integers.
from libc.stdint cimport int64_t

cimport cython

from sim.kv.free_queue cimport FreeQueue


@cython.locals(b=Py_ssize_t, evicted=Py_ssize_t)
cpdef Py_ssize_t pop_front(list out, int64_t[::1] nxt, int64_t[::1] prv, Py_ssize_t head, list ids, list ref, list bh,
                           object cache, Py_ssize_t n, object unpub) except -1


cdef class BlockPool:
    cdef dict __dict__  # (instances take attributes: sim/sweep/derive.py wraps their methods)
    cdef public Py_ssize_t num_blocks, null_block, usable_blocks, shared_excess, evictions
    cdef public object free_order, cache, dups
    cdef public bint stack, observed
    cdef public list ref, block_hash
    cdef public FreeQueue free_queue

    cpdef cache_block(self, object b, object key)
    @cython.locals(bh=list, j=Py_ssize_t, i=Py_ssize_t)
    cpdef cache_unhashed(self, list blocks, list keys)
    @cython.locals(fq=FreeQueue, nxt=int64_t[::1], head=Py_ssize_t, ids=list, ref=list, bh=list, out=list, popped=list,
                   b=Py_ssize_t)
    cpdef list get_new_blocks(self, Py_ssize_t n)
    @cython.locals(fq=FreeQueue, nxt=int64_t[::1], head=Py_ssize_t, b=Py_ssize_t, after=Py_ssize_t)
    cpdef object pop_one(self)
    @cython.locals(ref=list, fq=FreeQueue, i=Py_ssize_t)
    cpdef touch(self, object blocks)
    @cython.locals(ref=list, bh=list, fq=FreeQueue, split=bint, front=list, nxt=int64_t[::1], prv=int64_t[::1],
                   end=Py_ssize_t, shared=Py_ssize_t, n_tail=Py_ssize_t, r=Py_ssize_t, i=Py_ssize_t, li=Py_ssize_t,
                   n=Py_ssize_t, j=Py_ssize_t, stack=bint)
    cpdef release(self, list table)
