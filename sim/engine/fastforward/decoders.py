"""The virtual decoder set of a fast-forward window, shared by the sync and async windows.

A decoder in a window keeps its token counts at its virtual start ``c0`` and sits in two
indexes: ``buckets[(1 - c0) % B]`` (the window step at which it needs its next block) and
``fin[step]`` (the window step that samples its last token). The running sums (``c0_sum``,
number of decoders, pages held) stay locals of the window loop, which reads them every step;
these helpers maintain the indexes and return the pages to add or take away. ``fin``'s keys
are also kept in a heap, ``ends``, pruned lazily (:func:`nearest`): a key taken out of ``fin``
stays in the heap until it is the least.

Compiled by Cython from this source where a C compiler is (``decoders.pxd``; ``setup.py``), else
it runs as this Python.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from heapq import heappop, heappush
from operator import attrgetter

from sim.request import Request
from sim.sched.plan import StepPlan


def join(r: Request, finish_at: int, fin: dict[int, list[Request]], ends: list[int],
         buckets: list[list[Request]], paged: bool) -> int:
    """Index a decoder (its counts already at ``c0``); returns the pages it holds."""
    if finish_at in fin:
        fin[finish_at].append(r)
    else:
        fin[finish_at] = [r]
        heappush(ends, finish_at)
    if not paged:
        return 0
    buckets[(1 - r.num_computed_tokens) % len(buckets)].append(r)
    return len(r.kv.blocks)


def join_planned(plan: StepPlan, end: float, lag: int, s1: int, fin: dict[int, list[Request]], ends: list[int],
                 buckets: list[list[Request]], paged: bool, partial: set[int]) -> tuple[int, int, int, Request | None]:
    """The requests window step ``s1`` scheduled (admissions, a chunked prefill's chunk) advance;
    those whose prefill completes join the decoders at virtual ``c0 = computed - s1``. Returns
    (their c0 sum, how many joined, their pages, the chunked prefill that remains or None)."""
    c0, n_in, pages, part = 0, 0, 0, None
    for r, n in plan.scheduled:
        if r.advance(n, end):
            if lag:
                r.pending_output = 1
            left = r.output_tokens - r.num_output
            r.num_computed_tokens -= s1
            r.num_output -= s1
            r.num_tokens -= s1
            c0 += r.num_computed_tokens
            n_in += 1
            pages += join(r, s1 + left, fin, ends, buckets, paged)
        else:
            partial.add(r.uid)  # a chunked prefill remains: the window carries one on
            part = r
    return c0, n_in, pages, part


def index(running: list[Request], part: Request | None, fin: dict[int, list[Request]], ends: list[int],
          buckets: list[list[Request]], paged: bool) -> tuple[int, int, int]:
    """Index the decoders of ``running`` (async: not one whose last token is in flight, nor the
    chunked prefill ``part``) as a window starts; returns ``(c0_sum, decoders, pages)``."""
    c0_sum = decoders = pages = 0
    for r in running:
        left = r.output_tokens - r.num_output
        if not left or r is part:
            continue  # async: in f.done, skipped in the next plan, freed when f lands
        c0_sum += r.num_computed_tokens
        decoders += 1
        pages += join(r, left, fin, ends, buckets, paged)
    return c0_sum, decoders, pages


def nearest(fin: dict[int, list[Request]], ends: list[int]) -> float:
    """The least key of ``fin`` (the next window step that samples a last token; inf if none),
    from its heap ``ends``, whose keys no longer in ``fin`` are dropped on the way."""
    while ends:
        if ends[0] in fin:
            return ends[0]
        heappop(ends)
    return math.inf


def leave(r: Request, buckets: list[list[Request]], paged: bool) -> int:
    """Take a decoder (counts still at ``c0``) out of its block bucket; returns its pages."""
    if not paged:
        return 0
    buckets[(1 - r.num_computed_tokens) % len(buckets)].remove(r)
    return len(r.kv.blocks)


def leave_all(done: list[Request], buckets: list[list[Request]], s1: int, paged: bool) -> tuple[int, int]:
    """Take finished decoders out (:func:`leave`, in order), each one's counts then moved to the
    real ones (``+ s1``); returns their computed tokens at ``c0`` and their pages, summed."""
    computed = pages = 0
    for r in done:
        computed += r.num_computed_tokens
        pages += leave(r, buckets, paged)
        r.num_computed_tokens += s1
        r.num_output += s1
        r.num_tokens += s1
    return computed, pages


def shift(reqs: list[Request], s: int) -> None:
    """Move each request's counts by ``s`` steps: ``+s`` from a window's virtual start to the
    real counts, ``-s`` back."""
    for r in reqs:
        r.num_computed_tokens += s
        r.num_output += s
        r.num_tokens += s


#: sort key: running order (``Request.seq``), the order ``Scheduler.update`` finishes in
by_seq: Callable[[Request], int] = attrgetter("seq")


def uids(plan: StepPlan | None) -> set[int]:
    """The requests a window step's admission pass scheduled (their counts are real)."""
    return {r.uid for r, _ in plan.scheduled} if plan is not None else set()


def boundary(buckets: list[list[Request]], s1: int, lag: int,
             cross: Callable[[list[Request], int | None], None] | None,
             register: Callable[[list[Request], int], None] | None) -> int:
    """What window step ``s1`` does at block boundaries, in this order: a new block for each
    decoder crossing one (async: the block its step ``s1 - 1`` token filled is registered now,
    seen a step late), both in one ``cross`` (``DecodeBlocks.cross_boundary``); sync: the blocks
    this step fills are registered. Returns the blocks taken."""
    B = len(buckets)
    bucket = buckets[s1 % B]
    if bucket:
        assert cross is not None, "a window's decoders hold blocks only where its allocator crosses"
        cross(bucket, s1 - 1 if lag and register is not None else None)
    if not lag and register is not None:
        filling = buckets[(s1 + 1) % B]
        if filling:
            register(filling, s1)
    return len(bucket)
