"""What a fast-forward window step does around the decoder arithmetic of
:mod:`sim.engine.fastforward.window`: land a step (free its finished requests, append its
record).

Compiled by Cython from this source where a C compiler is (``steps.pxd``; ``setup.py``), else it
runs as this Python."""

from __future__ import annotations

from collections.abc import Callable, Generator
from functools import partial
from typing import Any

from sim.cost import StepBatch
from sim.engine.fastforward.window_state import WindowState
from sim.engine.step import InFlight
from sim.kv.linear import split
from sim.request import Request
from sim.sched.plan import StepPlan

new_batch = partial(tuple.__new__, StepBatch)  # StepBatch from a tuple in field order (hot path)
Pull = Callable[[float], None]          # take in the arrivals due at a time
NextArrival = Callable[[], float]       # a router's next possible submission
NO_PLAN = StepPlan()  # a window step that admitted nothing (read only: its record's zero counts)
NONE: list[Request] = []  # no request finishes in this step (read only)
Window = Generator[Any, Any, tuple[float, InFlight | None]]  # yields pause times (float) or naps (pause.Nap)


def land(w: WindowState, plan: StepPlan, batch: StepBatch, dt: float, start: float, done: list[Request],
         computed: int, nw: int) -> None:
    """The step ``(plan, batch, dt, start)`` of window ``w`` lands: the requests whose last token
    it sampled (``done``) are freed, then its record; ``computed`` counts the running requests'
    token states once they are gone, ``nw`` the waiting requests. The replica's parts are read
    from the window (its kernel's, read once as it opened)."""
    k, kv = w.k, w.kv
    if done:
        if w.lag:  # as AsyncScheduler.output: the token is seen, a block it filled is cached
            B = w.B
            for r in done:
                r.pending_output = 0
                if w.caching and not r.num_computed_tokens % B:
                    kv.register_full_blocks(r, r.num_computed_tokens)
        k.finish(done, start + dt)
    running = w.running
    if w.linear:  # KvAllocator.breakdown of a paged pool, without its calls (LinearBreakdown.split)
        free_blocks, shared = w.fq.size, w.pool.shared_excess
        tok, res, internal, ext, free = split(w.B, w.usable, w.nulls, free_blocks, shared, computed)
    else:
        tok, res, internal, ext, free = kv.breakdown(running, computed, waiting=w.waiting.peek() if nw else None)
        free_blocks, shared = kv.num_free_blocks, kv.shared_excess
    w.rows.add(k.step, start, dt, len(running), nw, batch.prefill_tokens, batch.num_decode_seqs,
               plan.num_preempted, free_blocks, tok, res, internal, ext, free,
               shared, plan.swap_out_blocks, plan.swap_in_blocks)
    k.busy_s += dt
    k.step += 1
    k.ff_steps += 1
