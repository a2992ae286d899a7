"""The step kernel: what every engine step does around the scheduler, shared by the exact
loop (:mod:`sim.engine.replica`) and fast-forward (:mod:`sim.engine.fastforward.window`).

    plan  = sched.schedule(now, step)          # who runs, how many tokens
    batch = kernel.batch(plan)                 # StepBatch: the cost model's whole input
    dt    = cost.step_time(batch)              # the step-cost seam (sim/cost)
    done  = sched.update(plan, now + dt, step) # tokens computed, tokens sampled
    kernel.finish(done, now + dt)              # free, mark finished
    kernel.record(now, dt, plan, batch)        # one StepRecord

Under async scheduling (:mod:`sim.sched.async_scheduler`) the next step is planned between a
step's :meth:`StepKernel.launch` (batch, duration, update) and its :meth:`StepKernel.land`
(output seen, finish, record); :class:`InFlight` carries the step in between.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sim.cost import StepBatch, StepCostModel
from sim.cost.bulk import DecodeTerms, DecodeTime, decode_step_terms, decode_step_time
from sim.engine.step_batch import batch_of, computed_of
from sim.io.records import StepLog
from sim.kv.base import DecodeBlocks, KvAllocator, LinearBreakdown, MemoryBreakdown
from sim.request import Request
from sim.sched.plan import StepPlan
from sim.sched.scheduler import Scheduler


@dataclass(frozen=True, slots=True, eq=False)
class InFlight:
    """A step on the GPU whose output has not reached the scheduler (async scheduling)."""

    plan: StepPlan
    batch: StepBatch
    dt: float
    start: float
    done: list[Request] | None         # requests whose last token it samples (None: sampled at land)


@dataclass(slots=True, eq=False)
class StepKernel:
    sched: Scheduler
    kv: KvAllocator
    cost: StepCostModel
    block_bytes: int = 0               # KV bytes per block (swap traffic in the cost model)
    log: StepLog = field(default_factory=StepLog)
    finished: list[Request] = field(default_factory=list)
    step: int = 0                      # index of the next step
    busy_s: float = 0.0
    ff_steps: int = 0                  # steps applied by fast-forward
    bulk_steps: int = 0                # of which quiet steps (no admission pass, decode time in bulk)
    run_piece: float = 64.0            # mean steps a quiet run commits at a time (fastforward/runs.py)
    page_size: int = 0                 # StepBatch.block_size: tokens per page, 0 = contiguous
    pending: StepPlan | None = None    # a step fast-forward planned for the exact loop to run
    virtual_tokens: int = 0            # a paused window: computed tokens its virtual counts lack
    virtual_at: Callable[[float], int] | None = None  # a napping lazy run: virtual_tokens at an instant
    progress: Callable[[], None] | None = None  # the replica's on_progress, for long windows
    decode_blocks: DecodeBlocks | None = None  # the allocator's bulk-decode view (None: a slab)
    caching: bool = False              # prefix caching on a paged pool (decoded blocks are hashed)
    lin: LinearBreakdown | None = None  # the pool's breakdown constants, when it is linear (DecodeBlocks)
    #: requests that left the engine (finished, or rejected by the replica) and when: a closed-loop
    #: client sends its next request then (sim/run/clients.py); set, windows land in Python
    on_done: Callable[[list[Request], float], None] | None = None
    _decode: dict[int, DecodeTime] = field(default_factory=dict)  # decoders -> decode_time(...)
    _decode_terms: dict[int, DecodeTerms | None] = field(default_factory=dict)

    #: the computed tokens of a plan's scheduled requests, summed (:mod:`sim.engine.step_batch`)
    computed_of = staticmethod(computed_of)

    def __post_init__(self) -> None:
        """The allocator's answers the engine needs on every step or window, asked once."""
        kv = self.kv
        self.page_size = kv.block_size if kv.paged else 0
        self.decode_blocks = kv.decode_blocks
        self.caching = kv.paged and kv.enable_caching
        self.lin = self.decode_blocks.linear_breakdown() if self.decode_blocks is not None else None

    def decode_time(self, seqs: int) -> DecodeTime:
        """``time(ctx, pages)`` of a step of ``seqs`` decodes, equal to ``cost.step_time`` of its
        batch bit for bit (:mod:`sim.cost.bulk`); built once per decoder count."""
        f = self._decode.get(seqs)
        if f is None:
            f = self._decode[seqs] = decode_step_time(self.cost, seqs, self.page_size, self.block_bytes)
        return f

    def decode_terms(self, seqs: int) -> DecodeTerms | None:
        """The folded terms :meth:`decode_time` applies (None: the cost model has none)."""
        if seqs not in self._decode_terms:
            self._decode_terms[seqs] = decode_step_terms(self.cost, seqs, self.page_size)
        return self._decode_terms[seqs]

    def batch(self, plan: StepPlan) -> StepBatch:
        """Describe the step for the cost model (prefill vs decode work, pages touched)."""
        return batch_of(plan, self.page_size, self.block_bytes)

    def finish(self, done: list[Request], end: float) -> None:
        """Finish requests whose last token the step ending at ``end`` sampled (in this order)."""
        if done:
            self.sched.finish(done, end, self.step)
            self.finished.extend(done)
            if self.on_done is not None:
                self.on_done(done, end)

    def launch(self, plan: StepPlan, start: float, *, sample: bool = True) -> InFlight:
        """Start a step at ``start``: its batch and cost, and (``sample``) its tokens computed and
        sampled now, unseen by an async scheduler until :meth:`land`. Without ``sample`` (sync
        scheduling) the tokens are computed when the step lands, so nothing reads them mid-step."""
        batch = self.batch(plan)
        dt = self.cost.step_time(batch)
        return InFlight(plan, batch, dt, start,
                        self.sched.update(plan, start + dt, self.step) if sample else None)

    def land(self, f: InFlight) -> None:
        """The step's output reaches the scheduler: tokens seen, finished requests freed, one record."""
        end = f.start + f.dt
        if f.done is None:
            done = self.sched.update(f.plan, end, self.step)
        else:
            self.sched.output(f.plan)
            done = f.done
        self.finish(done, end)
        self.record(f.start, f.dt, f.plan, f.batch)

    def breakdown(self) -> MemoryBreakdown:
        sched = self.sched
        running, swapped = sched.running, sched.preemption.swapped
        head = swapped[0] if swapped else sched.waiting.peek()  # the next request to place
        mem = self.kv.breakdown(running, sum(r.num_computed_tokens for r in running), waiting=head)
        ahead = sched.spec_tokens + sched.lookahead
        if ahead and self.decode_blocks is not None:
            # speculative decoding: slots held past the next token for drafts and lookahead are
            # reserved (used again next step), not fragmentation
            B = self.page_size
            held = sum(min(max(len(r.kv.blocks) * B - r.num_computed_tokens - 1, 0), ahead)
                       for r in running if r.kv is not None)
            mem = mem._replace(reserved=mem.reserved + held, internal_frag=mem.internal_frag - held)
        return mem

    def record(self, start: float, dt: float, plan: StepPlan, batch: StepBatch,
               mem: MemoryBreakdown | None = None) -> None:
        """Append the step's record and advance the step counter and busy time."""
        sched, kv = self.sched, self.kv
        tok, res, internal, ext, free = mem if mem is not None else self.breakdown()
        self.log.append((
            self.step, start, dt, len(sched.running), sched.num_waiting, batch.prefill_tokens,
            batch.num_decode_seqs, plan.num_preempted, kv.num_free_blocks, tok, res, internal, ext,
            free, kv.shared_excess, plan.swap_out_blocks, plan.swap_in_blocks))
        self.busy_s += dt
        self.step += 1
