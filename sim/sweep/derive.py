"""Sweep points that are the same run as one already simulated: derived, not simulated again.

A grid over ``gpu_memory_utilization`` x ``max_num_seqs`` often never touches either limit:
on the Azure conv trace, Llama-3.1-8B on an H100 keeps thousands of blocks free at 50 % memory
and never runs more than 30 requests. Those knobs enter a run only through its capacity
decisions ("need <= free blocks", "len(running) < max_num_seqs"), and every run records how
close each kind came to going the other way (:class:`~sim.kv.margin.Margin`). A point whose
pool is ``d`` blocks smaller (``ds`` fewer sequence slots) than a *base* run's takes every
decision the same way iff both margins allow the shift; then every step, request and float of
the two runs is the same, and only the pool's own counters differ::

    per step   free_slots' = free_slots - d * block_size     (token, fragment columns: equal)
    per run    evictions'  = replay of the base's pool operations on the smaller pool

The free queue of such a run (front-tail order, no prefix hit, no shared block) is three
runs of blocks, so the replay needs only counts::

    head -> [unhashed, freed last-first] [never used yet] [hashed, oldest first] <- tail
            a pop takes from the left; a pop from the hashed run is an eviction

The base records its pool operations (``n`` blocks popped; a table of ``u`` unhashed and ``h``
hashed blocks freed) and checks the replay against its own eviction count before it serves
as a base. A point that fails any test below is simulated; the rows are the same either way
(``tests/test_sweep_derive.py`` compares derived and simulated rows field for field).
"""

from __future__ import annotations

import dataclasses
import time
from array import array
from dataclasses import dataclass
from typing import Any

import pandas as pd

from sim.config.schema import SimConfig
from sim.cost.for_config import cost_key
from sim.io.rejects import KV_POOL
from sim.io.results import MEM_CATS, request_columns
from sim.io.stream import step_stats
from sim.io.summary import RunCounters, Summary
from sim.kv.block_pool import BlockPool
from sim.request import Request, Status
from sim.run.build import Components
from sim.run.clients import ClientSpec
from sim.run.simulate import run_summary, simulate
from sim.run.static import static_parts
from workloads.schema import Trace

#: the knobs a derived point may differ in (they reach the run only through its capacity tests)
POOL_KNOBS = ("gpu_memory_utilization", "max_num_seqs", "kv_memory")
_STEP_COLS = (*MEM_CATS, "duration_s", "shared_blocks_saved")


def class_key(config: dict[str, Any]) -> str:
    """Points with equal keys differ at most in :data:`POOL_KNOBS`."""
    return repr(sorted((k, repr(v)) for k, v in config.items() if k not in POOL_KNOBS))


@dataclass(slots=True)
class Base:
    """A simulated run kept to derive others from."""

    cfg: SimConfig
    parts: Components
    usable: int
    kv_margin: tuple[int, int]     # (fail_max, pass_min) of the pool's block tests
    seq_margin: tuple[int, int]    # the same for the max_num_seqs tests
    max_need: int                  # most blocks any admitted request's final length needs
    requests: pd.DataFrame
    steps: pd.DataFrame            # the columns the summary folds
    counters: RunCounters
    ops: array[int]                # pool operations (record_ops)
    trace: Trace
    clients: ClientSpec            # how the trace was sent: a point derives only from the same clients


def record_ops(pool: BlockPool, ops: array[int], shared: list[bool]) -> None:
    """Log ``pool``'s pops (``n``) and frees (``~u, h``) into ``ops``; a freed block still
    referenced elsewhere sets ``shared[0]`` (the replay does not model it)."""
    get, one, release = pool.get_new_blocks, pool.pop_one, pool.release
    bh, ref, add = pool.block_hash, pool.ref, ops.append

    def get_new_blocks(n: int) -> list[int]:
        add(n)
        return get(n)

    def pop_one() -> int:
        add(1)
        return one()

    def release_table(table: list[int]) -> None:
        h = 0
        for b in table:
            if ref[b] != 1:
                shared[0] = True
            if bh[b] is not None:
                h += 1
        add(~(len(table) - h))
        add(h)
        release(table)

    pool.get_new_blocks, pool.pop_one, pool.release = get_new_blocks, pop_one, release_table  # type: ignore[method-assign]
    pool.observed = True  # no allocator pops around them (PagedAllocator.cross_boundary)


def replay_evictions(ops: array[int], usable: int) -> int:
    """Evictions of the logged pool operations on a free queue of ``usable`` blocks."""
    unhashed, fresh, hashed, ev = 0, usable, 0, 0
    it = iter(ops)
    for x in it:
        if x < 0:
            unhashed += ~x
            hashed += next(it)
        elif x <= unhashed:
            unhashed -= x
        else:
            x -= unhashed
            unhashed = 0
            if x <= fresh:
                fresh -= x
            else:
                x -= fresh
                fresh = 0
                hashed -= x
                ev += x
    if hashed < 0:
        raise AssertionError("pool replay popped more blocks than were free")
    return ev


def run_base(cfg: SimConfig, trace: Trace, reqs: list[Request],
             clients: ClientSpec | None = None) -> tuple[Summary, Base | None]:
    """Simulate ``cfg``; also return it as a :class:`Base` when other points may derive from it."""
    ops: array[int] = array("q")
    shared = [False]
    seen: list[Components] = []

    def hook(parts: Components) -> None:
        seen.append(parts)
        pool = _pool(parts)
        if pool is not None:
            record_ops(pool, ops, shared)

    clients = clients or ClientSpec()
    res = simulate(cfg, trace, requests=reqs, on_build=hook, clients=clients)
    parts = seen[0]
    kv, sched = parts.kv, parts.sched
    hits = sched.stats.hits or sched.stats.preempted_hits
    if (_pool(parts) is None or shared[0] or hits or sched.num_preemptions
            or replay_evictions(ops, kv.usable_blocks) != kv.evictions
            or any(r.reject_reason == KV_POOL for r in reqs)):
        return res.summary, None
    km, sm = kv.headroom, sched.seq_margin
    assert km is not None and sm is not None and res.counters is not None
    B = kv.block_size
    need = max((-(-r.final_tokens // B) for r in reqs if r.status is not Status.REJECTED), default=0)
    return res.summary, Base(cfg, parts, kv.usable_blocks, (km.fail_max, km.pass_min), (sm.fail_max, sm.pass_min),
                             need, request_columns(reqs), res.steps[list(_STEP_COLS)], res.counters, ops, trace,
                             clients)


def _pool(parts: Components) -> BlockPool | None:
    """The run's block pool when the replay models it (vLLM's front-tail BlockPool, both margins
    recorded, no KV connector, no watermark); else None (the run serves as no base)."""
    kv, sched = parts.kv, parts.sched
    blocks = kv.decode_blocks
    pool = getattr(blocks, "pool", None)
    if (not isinstance(pool, BlockPool) or pool.free_order != "front-tail" or kv.headroom is None
            or sched.seq_margin is None or kv.connector is not None or sched.admission.watermark_blocks):
        return None
    return pool


def derive(base: Base, cfg: SimConfig, clients: ClientSpec | None = None) -> Summary | None:
    """The summary ``cfg``'s run would give, sent by ``clients``, from ``base``; None when it may
    differ. A closed loop's sends follow its finishes, which the same decisions keep the same."""
    t0 = time.perf_counter()
    if (class_key(cfg.model_dump()) != class_key(base.cfg.model_dump()) or cost_key(cfg) != cost_key(base.cfg)
            or (clients or ClientSpec()) != base.clients):
        return None
    try:
        _, budget, _ = static_parts(cfg)
    except Exception:
        return None  # the point's own run reports its error
    b0 = base.parts.budget
    same = ("max_model_len", "max_num_batched_tokens", "block_size", "null_block", "bytes_per_block")
    if any(getattr(budget, f) != getattr(b0, f) for f in same) or cfg.resolved("watermark"):
        return None
    usable = budget.num_gpu_blocks - (1 if budget.null_block else 0)
    d, ds = base.usable - usable, b0.max_num_seqs - budget.max_num_seqs
    (kf, kp), (sf, sp) = base.kv_margin, base.seq_margin
    if not (kf < d <= kp and sf < ds <= sp) or base.max_need > min(usable, base.usable):
        return None
    steps = base.steps.copy()
    steps["free_slots"] = steps["free_slots"] - d * b0.block_size
    stats = step_stats(steps, b0.block_size, True)
    counters = dataclasses.replace(base.counters, evictions=replay_evictions(base.ops, usable))
    parts = base.parts._replace(budget=budget)
    return run_summary(cfg, parts, base.requests, stats, counters, base.trace, 0.0, time.perf_counter() - t0,
                       base.clients)
