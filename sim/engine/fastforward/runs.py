"""Runs of quiet steps applied as arrays: the window's quiet steps, many at a time.

Between two events of a window (a finish, a pull that may admit) quiet steps change nothing a
decision reads; per step only the time, the context tokens (``+ decoders``), the pages and the
free blocks (``- bucket`` at a block boundary) move, and all of them are known up to the next
finish. A :class:`QuietRuns` lays a run out as numpy arrays once::

    j            1      2      3    ...  H          (window steps s0 + j)
    bucket       0      2      0    ...             decoders crossing a boundary (pops)
    pages/free   P0+0   P0+2   P0+2 ...             cumulative
    dt           time(ctx_j, pages_j)               sim/cost/bulk.py, the same floats
    T      T0    T0+dt1 T1+dt2 ...                  np.cumsum: the sequential float sums

and commits it in pieces: the records deferred to the step log (laid out when it is read,
:mod:`~sim.engine.fastforward.run_records`), the pool operations of
the boundary steps one by one in step order, the step counters and busy time. A piece ends
before a pull is due or a router arrival falls in a step; a live router's pause is taken
inside the run (:func:`~sim.engine.fastforward.pause.pause`, the state then is the exact
loop's) and the run goes on when nothing changed; a router that reads only outstanding tokens
is answered from ``T`` while the replica naps through the run (:meth:`QuietRuns._take_lazy`).
Commits equal the quiet steps of :mod:`sim.engine.fastforward.window` one at a time, bit for
bit (tests lower ``MIN_RUN``).

Arrays pay only for long runs and long pieces: a run is laid out when it can reach ``MIN_RUN``
steps and the router's next read is ``MIN_PIECE`` steps away, and not while this replica's
pieces have averaged fewer than ``MIN_PIECE`` steps (a router reading every few steps: 8
replicas of Llama-2-70B took 39 % more instructions with runs of 16 and no such test).
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Generator
from functools import reduce
from operator import add
from typing import Any

from sim.engine.fastforward.decoders import boundary
from sim.engine.fastforward.pause import Nap, Pausing, pause
from sim.engine.fastforward.run_layout import lay_out_run
from sim.engine.fastforward.run_records import RunRows, RunShape, fold_piece, lay_out, run_ends
from sim.engine.step import StepKernel
from sim.kv.base import DecodeBlocks

MIN_RUN = 48     # steps a new run must be able to reach to pay for its arrays (measured: 16 lost on 8 x 70B)
MIN_PIECE = 6    # steps to the router's next arrival a new run needs (its pieces end there)
HORIZON = 1024   # steps laid out at most


class QuietRuns:
    """One window's runs (its constants; the current run's arrays). Slotted: a window on an
    idle replica (a lone request of a day on many replicas) makes one, and fills no dict."""

    __slots__ = ("B", "F0", "H", "P0", "T", "blocks", "buckets", "bulk", "busy", "cross", "cross_boundary",
                 "ctx", "cum", "dt", "due", "ev", "fq", "k", "key", "lag", "lazy", "lone", "min_run", "na", "no_run",
                 "nulls", "p_dt", "p_start", "pages", "pausing", "register", "rows", "s0", "t", "usable")

    def __init__(self, k: StepKernel, lag: int, buckets: list[list[Any]], lin: tuple[int, int],
                 register: Callable[[list[Any], int], None] | None,
                 cross_boundary: Callable[[list[Any], int | None], None],
                 pausing: Pausing | None) -> None:
        self.k, self.lag, self.buckets, self.B = k, lag, buckets, len(buckets)
        self.usable, self.nulls = lin
        self.register, self.cross_boundary = register, cross_boundary
        self.pausing = pausing  # None: not pausable (the window ends or hands over at the router)
        self.lazy = pausing is not None and pausing.lazy  # the router's reads need no pause (pause.py)
        blocks = k.decode_blocks
        assert blocks is not None, "quiet runs: a paged allocator's decoders"
        self.blocks: DecodeBlocks = blocks
        self.fq, self.bulk = self.blocks.pool.free_queue, bool(lag) and self.blocks.lazy_unique
        self.min_run = MIN_RUN  # the window's gates read it here (tests lower the module's)
        self.key: tuple[Any, ...] | None = None
        self.no_run: tuple[Any, ...] | None = None  # the state at the last refused run
        self.t = self.due = self.na = self.p_start = self.p_dt = 0.0
        self.pages = self.ctx = 0

    def ready(self, s: int, t: float, decoders: int, c0_sum: int, pages: int, fin: dict[int, Any], due: float,
              na: float, p_start: float, p_dt: float, qnw: int, nrun: int, shared: int) -> bool:
        """A run is laid out from ``s + 1`` on (the one laid out still holds, or a new one pays)."""
        key = (decoders, c0_sum, qnw, nrun, shared)
        off = s - self.s0 if self.key == key else -1  # where the laid-out run stands, if it still holds
        cached = 0 <= off < self.H and self.T[off] == t and self._p(off) == pages and self._f(off) == self.fq.size
        if self.lazy:
            na = math.inf  # the router's next read bounds no piece
        if not cached and (self.no_run == (key, due, na)
                           or not self._build(s, t, decoders, c0_sum, pages, fin, due, na, p_start, p_dt, key)):
            self.no_run = (key, due, na)  # none until the decoders, the queue, a pull or the router change
            return False
        return True

    def take(self, s: int, due: float, na: float, p_start: float, room: float) -> Generator[Any, Any, int]:
        """Commit the laid-out run's quiet steps from ``s + 1`` on (after :meth:`ready`); return
        how many. Afterwards ``t``, ``pages``, ``ctx``, ``due``, ``na`` (and, async,
        ``p_start``/``p_dt``) hold the window's new values. At most ``room`` steps (the window's
        records before it calls the replica's progress hook)."""
        if False:
            yield 0.0
        lag, T, off0 = self.lag, self.T, s - self.s0
        H = int(min(self.H, off0 + room))
        if self.lazy:
            return (yield from self._take_lazy(off0, H, due, p_start))
        off = off0
        while off < H:
            plan_t = (p_start if off == off0 else T[off - 1]) if lag else T[off]
            if due <= plan_t:
                break  # a pull is due: the window takes it
            # steps off+1 .. m can go: their plans come before ``due``, their router checks before
            # ``na`` (async: plan T[j-2], check T[j-1]; sync: plan T[j-1], check T[j])
            i = bisect_left(T, na)  # first T[i] >= na
            m = min(H, bisect_left(T, due) + lag, i if lag else i - 1)
            if m > off:
                self._commit(off, m)
                off = m
                continue
            p = self.pausing
            if p is None or (not lag and T[off] >= na):
                break  # the window ends or hands over here
            self._pool_ops(off, off + 1)  # step off+1 planned, the router reads mid-flight
            na = yield from pause(self.k, p.running, self.s0 + off, (), T[off + 1 - lag], na, p.next_arrival,
                                  p.real_counts)
            due = p.next_due()
            self._commit(off, off + 1, ops=False)
            off += 1
        return self._took(off0, off, due, na)

    def _took(self, off0: int, off: int, due: float, na: float) -> int:
        self.due, self.na = due, na
        n = off - off0
        if n:
            key = self.key
            assert key is not None, "a run taken: its key is set"
            decoders, c0_sum = key[0], key[1]
            self.t, self.pages, self.ctx = self.T[off], self._p(off), c0_sum + decoders * (self.s0 + off)
            self.p_start, self.p_dt = self.T[off - 1], self.dt[off - 1]
        return n

    def _take_lazy(self, off0: int, H: int, due: float, p_start: float) -> Generator[Any, Any, int]:
        """:meth:`take` for a router that reads only outstanding tokens (pause.py, lazy reads).

        Steps ``off0+1 .. m`` can go unless a submission reaches this replica before the plan
        after them (``T[m - lag]``, the first plan that could pull it): sleep until then, reads
        answered from ``T`` meanwhile; woken early by a submission at ``ts``, ``m`` shrinks to
        the steps planned before ``ts`` and the replica sleeps on to the new plan time."""
        lag, T, p = self.lag, self.T, self.pausing
        assert p is not None  # lazy runs are pausable
        if due <= (p_start if lag else T[off0]):
            return self._took(off0, off0, due, p.next_arrival())
        m = min(H, bisect_left(T, due) + lag)
        if m <= off0:
            return self._took(off0, off0, due, p.next_arrival())
        self.k.virtual_at = self._virtual_at
        wake = True
        while True:
            now = yield Nap(T[m - lag], wake)
            if now >= T[m - lag]:
                break
            d = p.next_due()
            if d < due:  # a submission (at now): the steps planned from now on are not quiet
                due = d
                m = min(m, bisect_left(T, due) + lag)
                wake = False
        self.k.virtual_at = None
        self._commit(off0, m)
        return self._took(off0, m, due, p.next_arrival())

    def _virtual_at(self, t: float) -> int:
        """The computed tokens the decoders' virtual counts lack at instant ``t`` of a lazy run
        (what :func:`~sim.engine.fastforward.pause.pause` would set then: its ``s`` steps done,
        sync ``i - 1`` and async ``i`` for the first step end ``T[i] >= t``)."""
        key = self.key
        assert key is not None, "a run laid out: its key is set"
        return (self.s0 + bisect_left(self.T, t) - 1 + self.lag) * key[3]

    def _build(self, s: int, t: float, decoders: int, c0_sum: int, pages: int, fin: dict[int, Any], due: float,
               na: float, p_start: float, p_dt: float, key: tuple[Any, ...]) -> bool:
        k = self.k
        terms = k.decode_terms(decoders)
        if terms is None:
            return False
        dt1 = k.decode_time(decoders)(c0_sum + decoders * (s + 1), pages)
        to_due = (due - (p_start if self.lag else t)) / dt1  # steps, at most (dt grows along a run)
        if to_due < MIN_RUN or (na - t) / dt1 < MIN_PIECE:
            return False  # a pull is due soon, or the router reads within a few steps: not worth it
        if k.run_piece < MIN_PIECE and not self.lazy:  # this replica's pieces have been short
            k.run_piece += 0.05  # (so that it tries again now and then)
            return False
        H = int(min(min(fin) - s - 1 if fin else HORIZON, HORIZON, to_due + 2))
        if H < MIN_RUN:
            return False
        B, F0 = self.B, self.fq.size
        # bucket i's decoders take their blocks at the offsets j (steps s + j) with (s + j) % B == i:
        # one offset a period, so the pops repeat every B steps (few Python ints, no array scan)
        if decoders == 1:  # its bucket is (1 - c0) % B (decoders.join), c0 the sum's only term
            firsts, per_period = [((-c0_sum - s) % B + 1, 1)], 1
        else:
            firsts = sorted([((i - s - 1) % B + 1, len(b)) for i, b in enumerate(self.buckets) if b])
            per_period = sum(n for _, n in firsts)
        if per_period * -(-H // B) > F0:  # a step could preempt (free blocks only fall): the window goes exact before it
            H = min(H, _first_short(firsts, B, F0))
            if H < MIN_RUN:
                return False
        _, _, qnw, nrun, shared = key
        cum, ctx, dts, ends, busy = lay_out_run(H, B, firsts, decoders, c0_sum + decoders * s, pages, terms,
                                                p_dt, p_start, t, k.busy_s, self.lag)
        self.rows = RunRows(RunShape(k.step, self.lag, B, F0, self.usable, self.nulls, decoders, qnw, nrun,
                                     shared), ends, dts, ctx, cum)  # records: run_records.py
        dt, T = dts[1:], ends[1:]  # T[j]: end of step j; busy: the busy time after each step
        self.dt, self.busy = dt.data, busy.data  # memoryviews, as T below
        self.T = T.data  # a memoryview: Python floats by index, bisected in place (a list cost ~10 ns a step)
        self.cum, self.P0, self.F0 = cum.data, pages, F0  # blocks taken, by offset
        # offsets that take blocks, and the one after the run (sync registers the blocks step s+H fills)
        cross = list(range(firsts[0][0], H + 2, B)) if len(firsts) == 1 else \
            [j for q in range(0, H + 1, B) for j0, _ in firsts if (j := q + j0) <= H + 1]
        self.cross = cross[:-1] if cross and cross[-1] > H else cross
        if not self.lag and self.register is not None:  # sync: the blocks that fill are registered then
            self.ev = sorted({*self.cross, *(j - 1 for j in cross if j > 1)})
        else:
            self.ev = self.cross  # offsets of steps with pool operations
        self.s0, self.H, self.key, self.lone = s, H, key, len(firsts) == 1
        return True

    def _p(self, off: int) -> int:
        return self.P0 if off == 0 else self.P0 + self.cum[off - 1]

    def _f(self, off: int) -> int:
        return self.F0 if off == 0 else self.F0 - self.cum[off - 1]

    def _pool_ops(self, a: int, b: int) -> None:
        """The block appends and registrations of run steps ``a+1 .. b``, in step order."""
        ev, buckets, s0, B = self.ev, self.buckets, self.s0, self.B
        steps = ev[bisect_right(ev, a):bisect_right(ev, b)]
        if self.bulk and len(steps) > 1:  # async: each step appends, then registers what filled a step before
            crossing = [buckets[(s0 + steps[0]) % B]] * len(steps) if self.lone else [buckets[(s0 + j) % B] for j in steps]
            self.blocks.append_blocks(crossing, self._p(b) - self._p(a))  # pops first: they commute with registrations in the map
            if (reg := self.register) is not None:  # one bucket: its last registration covers the others
                i = len(steps) - 1 if self.lone else 0
                for j, g in zip(steps[i:], crossing[i:], strict=True):
                    reg(g, s0 + j - 1)
            return
        for j in steps:
            boundary(buckets, s0 + j, self.lag, self.cross_boundary, self.register)

    def _commit(self, a: int, b: int, ops: bool = True) -> None:
        """Run steps ``a+1 .. b``: pool operations (unless done), records, counters."""
        if ops:
            self._pool_ops(a, b)
        k, n = self.k, b - a
        k.run_piece += 0.125 * (n - k.run_piece)  # the mean piece length, an EWMA
        margin = k.kv.headroom
        cross = self.cross
        if margin is not None and bisect_right(cross, b) > bisect_right(cross, a):
            low = self._f(b)  # free blocks only fall along a run: the last boundary step's slack
            if low < margin.pass_min:
                margin.pass_min = low
        k.log.defer(lay_out, (self.rows, a, b), b - a, fold_piece, run_ends)  # laid out (or folded) when read
        busy = self.busy
        if k.busy_s == busy[a]:  # the sums laid out start from here (always, unless a run is resumed elsewhere)
            k.busy_s = busy[b]
        else:  # one float sum after another, as step by step
            d = self.rows.durations(a, b).tolist()
            k.busy_s = reduce(add, d, k.busy_s)
        k.step += n
        k.ff_steps += n
        k.bulk_steps += n


def _first_short(firsts: list[tuple[int, int]], B: int, free: int) -> int:
    """How many steps a run can hold: those before the first whose pops exceed ``free`` blocks
    (``firsts``: each bucket's first offset and decoders, in offset order, repeating every ``B``
    steps)."""
    per_period = sum(n for _, n in firsts)
    q, left = divmod(free, per_period)  # whole periods the free blocks cover, and what is left after
    for j0, n in firsts:
        left -= n
        if left < 0:
            return q * B + j0 - 1
    raise AssertionError("the pops exceed the free blocks within the next period")
