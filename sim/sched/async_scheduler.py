"""vLLM's async scheduling: step k+1 is planned while step k runs on the GPU.

Followed, from vLLM's source (``vllm/v1/``):

* ``engine/core.py:EngineCore.step_with_batch_queue`` with a batch queue of 2 (what
  ``async_scheduling`` sets): schedule step k+1 and hand it to the GPU, *then* wait for step k's
  output and apply it (``update_from_output``). The scheduler therefore plans step k+1 knowing the
  outputs of steps up to k-1 only, with the arrivals it has received by the time step k started.
  After an idle engine (or a step that scheduled nothing) the first two steps are planned back to
  back.
* ``core/sched/async_scheduler.py:AsyncScheduler._update_after_schedule``: a scheduled request that
  is not a partial prefill gets an output placeholder (``num_output_placeholders += 1``); the
  running pass asks ``num_tokens + placeholders - num_computed_tokens`` = 1 token of it, so a
  decode's slots are the same as in sync mode.
* ``core/sched/scheduler.py:Scheduler.schedule``: a request whose in-flight step samples its last
  token (``max_tokens`` or ``max_model_len`` reached) is not scheduled again -- but it is still in
  ``running``: it holds its blocks and its ``max_num_seqs`` slot until the output arrives, and it
  can be chosen as a preemption victim. **This is where decisions change**: frees land one step
  later, so the next plan sees fewer free blocks (more preemptions, more steps).
* ``AsyncScheduler._update_request_with_output``: when the output arrives the token is appended,
  the placeholder dropped, and blocks are cached up to ``num_computed_tokens - placeholders``
  (skipped for a request preempted meanwhile). At schedule time ``allocate_slots`` caches up to
  ``min(computed + new, num_tokens)``, which excludes the token in flight: a decode's full block
  is registered one step later than in sync mode.
* A request preempted while its token is in flight still gets that token, and if it was its last
  one it finishes (``stopped_preempted_reqs``) and leaves the waiting queue.

kvsim keeps its sync representation (a sampled token is counted in ``num_tokens`` at
:meth:`update`) and marks it ``pending_output`` until :meth:`output`; the scheduler reads that
mark where vLLM reads placeholders (``Scheduler._grow``, the decode fast path). The engine loop
that overlaps the steps is ``sim.engine.replica.Replica._loop_async``; fast-forward is
:mod:`sim.engine.fastforward.async_window`. Speculative decoding is not modelled together with async scheduling.
"""

from __future__ import annotations

from sim.request import Request, Status
from sim.sched.plan import StepPlan
from sim.sched.scheduler import Scheduler


class AsyncScheduler(Scheduler):
    async_scheduling = True

    def update(self, plan: StepPlan, end: float, step: int) -> list[Request]:
        """Advance and sample, as sync; the sampled tokens stay unseen until :meth:`output`."""
        done = []
        for r, n in plan.scheduled:
            if r.advance(n, end):
                r.pending_output = 1
                if r.num_output >= r.output_tokens:
                    done.append(r)
        return done

    def output(self, plan: StepPlan) -> None:
        """The step's output lands (after the next step was planned): tokens seen, and the blocks
        they complete cached, for requests still running."""
        kv = self.kv
        caching = kv.paged and kv.enable_caching
        B = kv.block_size
        running = Status.RUNNING
        for r, _ in plan.scheduled:
            if r.pending_output:
                r.pending_output = 0
                # only a decode that just filled its block has one to add (the rest was cached
                # when the step was planned)
                if caching and not r.num_computed_tokens % B and r.status is running:
                    kv.register_full_blocks(r, r.num_computed_tokens)
