"""The SimPy engine: one replica's step loop.

Each step: pull arrivals from the replica's inbox (``arrival_s <= now``), schedule, ask the
cost model for the step's duration, ``yield env.timeout(duration)``, apply the outcome (the
step kernel, :mod:`sim.engine.step`). Requests enter through :meth:`Replica.submit` -- all up front
(a trace replay) or one at a time from a router process (a fleet replay, which also gives
the replica its next-arrival hint). An idle engine waits on a timeout to its next known
arrival OR a wake event that ``submit`` triggers; it never polls.

After each exact step the loop hands over to :mod:`sim.engine.fastforward.window`, which applies runs of
steps in bulk with bit-identical results (``exact_steps=True`` turns it off).

One loop serves sync and async scheduling (vLLM's GPU default, :mod:`sim.sched.async_scheduler`):
under async scheduling step k+1 is planned, while step k runs, from the arrivals received when
step k started and the outputs of steps up to k-1; step k's output lands when it ends, and step
k+1 starts then. :mod:`sim.engine.fastforward.ordering` names the difference.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Generator, Iterable
from operator import attrgetter
from typing import Any

import simpy

from sim.engine.fastforward.ordering import Order, order_of
from sim.engine.fastforward.pause import Nap
from sim.engine.fastforward.window import Window, fast_forward
from sim.engine.resumes import clearing
from sim.engine.sleep import sleep_until
from sim.engine.step import InFlight, StepKernel
from sim.engine.views import KernelViews
from sim.engine.waits import Waits
from sim.io.rejects import KV_POOL, Rejection
from sim.request import Request, Status

_arrival = attrgetter("arrival_s")
NEVER_FITS = "cannot be scheduled even on an idle engine: does not fit the KV pool"  # code kv_pool


class Replica(KernelViews, Waits):
    """One serving instance: a step kernel (scheduler + allocator + cost model) driven by SimPy."""

    def __init__(
        self,
        env: simpy.Environment,
        kernel: StepKernel,
        *,
        exact_steps: bool = False,
        check: bool = False,
        reject: Callable[[Request], Rejection | None] | None = None,
        on_step: Callable[[Replica], None] | None = None,
        on_progress: Callable[[Replica], None] | None = None,
    ) -> None:
        self.env = env
        self.kernel = kernel
        self.exact_steps = exact_steps
        self.check = check
        self.reject = reject
        self.on_step = on_step
        self.on_progress = on_progress  # after every step or fast-forward window (cheap)
        if on_progress is not None:  # ... and every few thousand steps inside a window
            kernel.progress = lambda: on_progress(self)
        self.rejected: list[Request] = []
        self._inbox: list[Request] = []     # submitted requests, in arrival order
        self._cursor = 0
        self._router_next: Callable[[], float] | None = None
        self._routed: Callable[[], simpy.Event] | None = None  # pausable windows wait on it
        self._real_counts = True
        self._lazy = False
        self._wake: simpy.Event | None = None
        self._napping = False  # in a wakeable nap: wake() interrupts it
        #: the time of the step being planned (also inside a fast-forward window): KV events' stamp
        self.clock = 0.0
        self._ot: int | None = None  # the requests' outstanding tokens while the loop sleeps (resumes.py)
        self.idle = self.surely_busy = False  # what a router reads instead of the count (signals.py)
        self.process = env.process(clearing(self, self._loop()))

    # ---- arrivals -----------------------------------------------------------------------------
    def submit(self, req: Request) -> None:
        """Hand a request to this replica (arrival order); wakes an idle loop."""
        self._inbox.append(req)
        self._ot = None
        self.idle = False
        self.wake()

    def submit_all(self, reqs: Iterable[Request]) -> None:
        self._inbox.extend(reqs)
        self._ot = None

    def submit_sent(self, req: Request) -> None:
        """Hand over a request whose send time became known at a finish (a closed-loop client,
        :mod:`sim.run.clients`, called from this replica's own step): into the unpulled inbox at
        its arrival, after equal ones. No wake: the loop is running (it is the caller)."""
        inbox = self._inbox
        inbox.insert(bisect_right(inbox, req.arrival_s, lo=self._cursor, key=_arrival), req)
        self._ot = None

    def follow_router(self, next_arrival: Callable[[], float], *, routed: Callable[[], simpy.Event] | None = None,
                      real_counts: bool = True, lazy_reads: bool = False) -> None:
        """Fed live by a router: fast-forward never runs past its next possible submission.

        ``routed``: the router submits only at ``next_arrival()`` instants, acting before any
        replica event then, and ``routed()`` fires once it has (:class:`sim.cluster.router.Router`);
        a window waits on it there and goes on (:mod:`sim.engine.fastforward.pause`) instead of
        ending. ``real_counts=False``: the router reads no per-request token counts, only
        :attr:`outstanding_tokens` (a waiting window then corrects their sum instead).
        ``lazy_reads``: nothing else reads the replica between its own events either (no
        monitor, no cache view), so a run of quiet steps answers those reads from its laid-out
        step ends and sleeps through the router's arrivals (:mod:`sim.engine.fastforward.pause`)."""
        self._router_next = next_arrival
        self._routed = routed
        self._real_counts = real_counts
        self._lazy = lazy_reads and not real_counts and routed is not None

    def next_own_arrival(self) -> float:
        """Arrival time of the first submitted request not yet pulled (inf if none)."""
        return self._inbox[self._cursor].arrival_s if self._cursor < len(self._inbox) else math.inf

    def _next_arrival_hint(self) -> float:
        assert self._router_next is not None
        return min(self.next_own_arrival(), self._router_next())

    def _pull_due(self, now: float) -> None:
        self.clock = now
        if self._cursor < len(self._inbox) and self._inbox[self._cursor].arrival_s <= now:
            self._pull(now)

    def _pull(self, now: float, force: int = 0) -> None:
        inbox, sched = self._inbox, self.kernel.sched
        self.clock = now
        i = self._cursor
        while i < len(inbox) and (inbox[i].arrival_s <= now or i < force):
            r = inbox[i]
            rej = self.reject(r) if self.reject else None
            if rej is not None:
                r.status, r.reject_reason, r.reject_detail = Status.REJECTED, rej.code, rej.detail
                self.rejected.append(r)
                if self.kernel.on_done is not None:  # a client's slot frees (sim/run/clients.py)
                    self.kernel.on_done([r], now)
            else:
                sched.add(r)
            i += 1
        self._cursor = i

    # ---- the loop -----------------------------------------------------------------------------
    def _loop(self) -> Generator[simpy.Event, Any, None]:
        """The step loop, for both orders (:mod:`sim.engine.fastforward.ordering`).

        Sync: plan a step, launch it, wait its duration, land it (its tokens computed when it
        lands). Async, vLLM's batch queue of two (``EngineCore.step_with_batch_queue``): plan the
        next step while ``flight`` runs, then land ``flight``'s output; two steps are planned back
        to back when nothing is in flight. After each exact step, fast-forward."""
        env, k = self.env, self.kernel
        sched = k.sched
        order = order_of(sched.async_scheduling)
        lag = order.lag
        flight: InFlight | None = None
        unrecorded = 0  # preemptions of a plan that scheduled nothing (no step to record them in)
        while True:
            if flight is None:
                self._pull(env.now)
                if not sched.running and sched.num_waiting == 0 and not (yield from self._wait_for_work()):
                    continue
                plan = k.pending if k.pending is not None else sched.schedule(env.now, k.step)
                k.pending = None
                if not plan.scheduled and not sched.running:
                    if not (yield from self._wait_for_transfers()):
                        self._reject_head()
                    continue
                plan.num_preempted += unrecorded
                unrecorded = 0
                flight = k.launch(plan, env.now, sample=bool(lag))
                if lag and not self.exact_steps:  # async: the window takes the step just launched
                    flight = yield from self._forward(order, flight)
                    if flight is None:
                        continue
            nxt = None
            if lag:
                self._pull(env.now)  # arrivals received by the time `flight` started
                nxt = sched.schedule(env.now, k.step + 1)
            yield env.timeout(flight.dt)
            k.land(flight)
            self._stepped()
            flight = None
            if nxt is not None:
                if nxt.scheduled:
                    flight = k.launch(nxt, env.now)
                else:
                    unrecorded += nxt.num_preempted
            if self.exact_steps or (lag and flight is None):
                continue
            flight = yield from self._forward(order, flight)

    def _forward(self, order: Order, flight: InFlight | None) -> Generator[simpy.Event, Any, InFlight | None]:
        """Fast-forward from here (async: ``flight`` just launched, the next step not planned);
        sleep to where the window ended; return the step then in flight."""
        env, k = self.env, self.kernel
        c = k.kv.connector
        lockstep = c is not None and c.asynchronous  # transfers land between steps: sleep through each
        if lockstep:
            window = fast_forward(k, order, env.now, flight, self._pull_due, None, self.next_own_arrival,
                                  real_counts=self._real_counts, lockstep=env.timeout)
        else:
            pausable = self._routed is not None
            hint = self._router_next if pausable else self._next_arrival_hint if self._router_next is not None else None
            window = fast_forward(k, order, env.now, flight, self._pull_due, hint, self.next_own_arrival, pausable,
                                  self._real_counts, self._lazy)
        if window is None:
            return flight  # nothing in bulk from here
        # (a lockstep window yields the timeouts the exact loop would; any other asks, and _drive answers)
        t, flight = yield from window if lockstep else self._drive(window)
        if t > env.now:
            if self.on_progress:
                self.on_progress(self)
            yield from sleep_until(env, t) if flight is not None else self._idle_from(t)
            if self.check:
                k.kv.check(k.sched.kv_holders())
        return flight

    def _drive(self, window: Window) -> Generator[simpy.Event, Any, tuple[float, InFlight | None]]:
        """Run a fast-forward window; while it waits for the router (at the router's next
        arrival), wait on the router's ``routed`` event."""
        try:
            ask = next(window)
            while True:
                if ask.__class__ is Nap:
                    yield from self._nap(ask)
                    ask = window.send(self.env.now)
                else:
                    yield self._routed()  # type: ignore[misc]
                    ask = window.send(None)
        except StopIteration as stop:
            return stop.value

    def _reject_head(self) -> None:
        """Nothing runs and nothing was scheduled: the waiting head can never run; reject it."""
        sched = self.kernel.sched
        if sched.num_waiting:
            head = sched.reject_head(KV_POOL)
            head.reject_detail = NEVER_FITS
            self.rejected.append(head)
            if self.kernel.on_done is not None:
                self.kernel.on_done([head], self.env.now)

    def _stepped(self) -> None:
        """After each exact step: invariant check and the callbacks."""
        if self.check:
            self.kernel.kv.check(self.kernel.sched.kv_holders())
        if self.on_step:
            self.on_step(self)
        if self.on_progress:
            self.on_progress(self)
