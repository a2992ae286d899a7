"""Speculative decoding as vLLM 0.33's V1 scheduler sees it (``vllm/v1/core/sched/scheduler.py``).

A decoding request carries ``K = num_speculative_tokens`` draft tokens, proposed after each step
that sampled for it (``update_draft_token_ids``), and is scheduled for ``1 + K`` tokens::

    num_new_tokens = num_tokens_with_spec - num_computed_tokens        = 1 + K  (budget permitting)
    allocate_slots(num_new_tokens, num_lookahead_tokens = L)           slots up to computed + 1 + K + L
    update_from_output: a of the K drafts accepted -> a + 1 tokens appended,
                        num_computed_tokens -= K - a                   (the rejected positions)

``L`` is ``K`` when the drafter reads the target's hidden states (``use_eagle()``: EAGLE,
EAGLE-3, MTP) and 0 for ngram, which has no draft model. A prefill, and a request resumed after
a preemption, carry no drafts until they sample.

**Acceptance** (kvsim's knob, not vLLM's): each draft token is accepted with probability
``acceptance_rate`` if all before it were (the usual rejection-sampling model), drawn from the
run's seeded ``numpy`` Generator, ``K`` uniforms per drafting request in plan order, so runs are
reproducible. Tokens past the request's output length are dropped, as ``check_stop`` trims them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.request import Request
from sim.sched.plan import StepPlan

#: vLLM ``SpeculativeConfig.method`` values modelled; the ones that read ahead (``use_eagle()``)
#: get lookahead slots and a draft layer of KV (``sim.memory.draft_kv``).
METHODS = ("ngram", "eagle", "eagle3", "mtp")


@dataclass(slots=True, eq=False)
class SpecDecode:
    num_speculative_tokens: int
    method: str
    acceptance_rate: float
    rng: np.random.Generator
    drafted: int = 0                   # draft tokens scheduled
    accepted: int = 0                  # of them, accepted

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"speculative method {self.method!r}: expected one of {', '.join(METHODS)}")

    @property
    def lookahead(self) -> int:
        """vLLM ``num_lookahead_tokens``: K for EAGLE/EAGLE-3/MTP, 0 for ngram."""
        return 0 if self.method == "ngram" else self.num_speculative_tokens

    def update(self, plan: StepPlan, end: float) -> list[Request]:
        """:meth:`Scheduler.update` with drafts: verify, accept, advance; the finished requests."""
        K, alpha = self.num_speculative_tokens, self.acceptance_rate
        scheduled = plan.scheduled
        drafts = [r.num_computed_tokens + n - r.num_tokens for r, n in scheduled]
        m = sum(1 for d in drafts if d > 0)
        u = self.rng.random((m, K)) if m else None
        j = 0
        done = []
        for (r, n), d in zip(scheduled, drafts, strict=True):
            if d <= 0:
                if r.advance(n, end) and r.num_output >= r.output_tokens:
                    done.append(r)
                continue
            assert u is not None
            row = u[j]
            j += 1
            a = 0
            while a < d and row[a] < alpha:
                a += 1
            self.drafted += d
            self.accepted += a
            r.num_computed_tokens += n - (d - a)
            new = min(a + 1, r.output_tokens - r.num_output)
            r.num_output += new
            r.num_tokens += new
            if r.num_output >= r.output_tokens:
                done.append(r)
        return done
