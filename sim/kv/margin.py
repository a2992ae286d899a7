"""How close a run's capacity decisions came to going the other way (a sweep reuses runs by it).

Every capacity decision of the scheduler is a comparison ``need <= have``: a request's blocks
against the free blocks, ``len(running)`` against ``max_num_seqs``. A :class:`Margin` records
each one's *slack* ``have - need`` -- the smallest slack of those that passed and the largest
of those that failed::

    slack:   ... -3 -2 -1 | 0  1  2  3 ...
             failed       | passed
                 fail_max ^        ^ pass_min

A run with ``d`` less of the resource (``d < 0``: more) shifts every slack by ``-d``, so it
takes every decision the same way iff ``fail_max < d <= pass_min`` (:meth:`allows`); with the
same inputs otherwise it is then the same run, step for step (:mod:`sim.sweep.derive`).

Compiled by Cython from this source where a C compiler is (``margin.pxd``: the two bounds are C
integers, :meth:`Margin.note` a C call from the compiled allocator loops, :mod:`sim.kv.table_loops`,
that note a capacity decision each), else run as it is.
"""

from __future__ import annotations

NEVER = 1 << 62  # no comparison seen on that side


class Margin:
    def __init__(self) -> None:
        self.pass_min = NEVER
        self.fail_max = -NEVER

    def note(self, slack: int) -> bool:
        """Record one comparison's ``have - need``; return whether it passed (``slack >= 0``)."""
        if slack >= 0:
            if slack < self.pass_min:
                self.pass_min = slack
            return True
        if slack > self.fail_max:
            self.fail_max = slack
        return False

    def allows(self, d: int) -> bool:
        """Every recorded comparison goes the same way with ``d`` less of the resource."""
        return self.fail_max < d <= self.pass_min
