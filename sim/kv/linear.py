"""The memory breakdown of a paged pool whose every held block is full but the last of each
request (:class:`~sim.kv.base.LinearBreakdown`), written once: the allocator's ``breakdown``
and fast-forward's step records both call :func:`split`.

Compiled by Cython where a C compiler is (``linear.pxd``: C integers in and out, so a compiled
caller gets the five counts without a tuple), else run as is.
"""

from __future__ import annotations


def split(block_size: int, usable: int, null_slots: int, free: int, shared: int,
          computed: int) -> tuple[int, int, int, int, int]:
    """Token states, reserved, internal, external and free slots of a pool of ``usable`` blocks
    with ``free`` free, ``shared`` excess references and ``computed`` token states held::

        used = usable - free;  internal = (used + shared) * block_size - computed
        token_states = used * block_size - internal;  reserved = 0
        external = null_slots;  free slots = free * block_size
    """
    used = usable - free
    internal = (used + shared) * block_size - computed
    return used * block_size - internal, 0, internal, null_slots, free * block_size
