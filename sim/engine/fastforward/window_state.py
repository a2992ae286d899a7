"""The state of one fast-forward window: what :class:`~sim.engine.fastforward.window.WindowRun`
sets up and its steps (:mod:`sim.engine.fastforward.window_steps`) read and change.

Declared once here, for mypy and for Cython (``window_state.pxd`` types the counts and times as C
integers and doubles; everything else stays the object it is)::

    s, t                 the window's last applied step and the time it ends (async: the step
                         in flight's end; p_* is that step: plan, batch, duration, start, done)
    c0_sum, decoders,    the decoders' virtual counts summed, how many, the pages they hold
    pages
    buckets, fin, ends   decoders by c0 mod block size; by the step that samples their last
                         token (and those steps, a heap)
    due, na, held        the replica's next arrival, a router's next arrival, whether admission
                         can run (truthy: it cannot until a pull; 2: nor a run of quiet steps)
"""

from __future__ import annotations

from typing import Any

from sim.io.fill import RowBuffer
from sim.request import Request


class WindowState:
    """Attributes only (set by ``WindowRun.__init__``)."""

    k: Any
    sched: Any
    kv: Any
    running: list[Request]
    waiting: Any
    seqs: Any
    pool: Any
    fq: Any
    margin: Any
    register: Any
    cross: Any
    step_cost: Any
    bb: Any
    breakdown: Any
    rows: RowBuffer
    own: Any
    router: Any
    head: Request | None
    log: Any
    progress: Any
    dec_time: Any
    p_plan: Any
    p_batch: Any
    p_done: list[Request]
    cap: float
    runs: Any
    quick: Any
    polls: Any
    pull_due: Any
    part: Request | None
    f: Any
    held: bool | int | None
    out: list[Request] | None
    planned: Any
    keep: Any
    fin: dict[int, list[Request]]
    ends: list[int]
    buckets: list[list[Request]]
    bucket: list[Request]
    partial: set[int]
    lag: int
    max_batched: int
    max_seqs: int
    B: int
    page: int
    usable: int
    nulls: int
    c0_sum: int
    decoders: int
    pages: int
    qnw: int
    nw: int
    s: int
    dec_n: int
    every: int
    t: float
    dt: float
    p_dt: float
    p_start: float
    due: float
    na: float
    plan_t: float
    paged: bool
    caching: bool
    sync_reg: bool
    preempts: bool
    quiet: bool
    busy: bool
    landing: bool
    pausable: bool
    real_counts: bool
    linear: bool
