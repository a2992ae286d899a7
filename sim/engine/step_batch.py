"""A step's :class:`~sim.cost.StepBatch` from its plan, and its requests' computed tokens:
the two loops over a plan's scheduled requests that every step with admissions runs
(:meth:`StepKernel.batch <sim.engine.step.StepKernel.batch>`, ``StepKernel.computed_of``).

Compiled by Cython from this source where a C compiler is (``step_batch.pxd``: C counts, the
pairs a C double summed as Python sums them; ``setup.py``), else it runs as this Python.
"""

from __future__ import annotations

from sim.cost import StepBatch
from sim.request import Request
from sim.sched.plan import StepPlan


def batch_of(plan: StepPlan, B: int, block_bytes: int) -> StepBatch:
    """Describe the step for the cost model (prefill vs decode work, pages touched): ``B`` tokens
    a page (0: contiguous), ``block_bytes`` a block's KV bytes (swap traffic)."""
    pf_tok = pf_seqs = pf_ctx = dec = dec_ctx = pages = 0
    pairs = 0.0
    riders = plan.free_riders
    for r, n in plan.scheduled:
        if riders and r.uid in riders:
            continue  # forked group member: the leader's prefill computed its KV
        c = r.num_computed_tokens
        ctx = c + n
        if n == 1 and r.num_output and c == r.num_tokens - 1:
            dec += 1
            dec_ctx += ctx
        else:
            pf_tok += n
            pf_seqs += 1
            pf_ctx += ctx
            pairs += n * (2 * c + n + 1) / 2  # (exact as a double: halving a double is)
        if B:
            pages += -(-ctx // B)
    return tuple.__new__(StepBatch, (pf_tok, pf_seqs, pairs, pf_ctx, dec, dec_ctx, pages, B, plan.swap_out_blocks,
                                     plan.swap_in_blocks, block_bytes))


def computed_of(scheduled: list[tuple[Request, int]]) -> int:
    """The computed tokens of a plan's scheduled requests, summed."""
    total = 0
    for r, _ in scheduled:
        total += r.num_computed_tokens
    return total
