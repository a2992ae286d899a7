"""One place that turns a :class:`~sim.config.SimConfig` into a running replica.

    cfg --> specs --> KV budget --> allocator --> scheduler (+ queue, admission, preemption,
            victim) --> cost model --> StepKernel --> Replica (SimPy)

Used by :func:`sim.run.simulate`, the fleet router and the memory-map recorder.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np
import simpy

from sim.budget import KvBudget, compute_budget
from sim.config import SimConfig
from sim.cost import StepCostModel, build_cost_model
from sim.engine import Replica
from sim.errors import ConfigError
from sim.kv.base import KvAllocator
from sim.kv.paged import PagedAllocator
from sim.kv.slab import SlabAllocator
from sim.request import Request
from sim.sched.admission import Admission
from sim.sched.paper_v0 import PaperV0Scheduler
from sim.sched.policies import VICTIMS
from sim.sched.preemption import Recompute, Swap
from sim.sched.queues import QUEUES
from sim.sched.scheduler import Scheduler
from sim.specs import resolve_gpu, resolve_model
from sim.step import StepKernel


class Components(NamedTuple):
    budget: KvBudget
    kv: KvAllocator
    sched: Scheduler
    cost: StepCostModel


def make_allocator(cfg: SimConfig, budget: KvBudget, fork: bool) -> KvAllocator:
    if cfg.allocator == "paged":
        return PagedAllocator(
            budget.num_gpu_blocks, cfg.block_size, null_block=budget.null_block,
            free_order=cfg.resolved("free_order"),
            enable_caching=bool(cfg.resolved("enable_prefix_caching")), exact_fill=fork)
    slots = budget.available_kv_bytes // budget.bytes_per_token
    return SlabAllocator(int(slots), budget.max_model_len, cfg.reservation, cfg.slab_placement)


def make_scheduler(cfg: SimConfig, budget: KvBudget, kv: KvAllocator, fork: bool) -> Scheduler:
    # the watermark is the paper's block-manager rule: a slab reserves whole chunks instead
    watermark = int(cfg.resolved("watermark") * kv.num_blocks) if kv.paged else 0
    swap = cfg.preemption == "swap" and kv.paged
    cpu_blocks = int(cfg.swap_space * 2**30 // budget.bytes_per_block) if swap else 0
    common = dict(
        max_num_seqs=budget.max_num_seqs, max_num_batched_tokens=budget.max_num_batched_tokens,
        queue=QUEUES[cfg.policy](),
        admission=Admission(bool(cfg.resolved("reserve_full_isl")), watermark),
        preemption=Swap(cpu_blocks) if swap else Recompute(),
        choose_victim=VICTIMS[cfg.victim or ("priority" if cfg.policy == "priority" else "last")],
        long_prefill_token_threshold=cfg.long_prefill_token_threshold)
    if cfg.resolved("chunked_prefill"):
        return Scheduler(kv, **common)  # type: ignore[arg-type]
    return PaperV0Scheduler(kv, fork_cow=fork, rng=np.random.default_rng(cfg.seed), **common)


def build(cfg: SimConfig) -> Components:
    model, gpu = resolve_model(cfg.model), resolve_gpu(cfg.gpu)
    budget = compute_budget(cfg, model, gpu)
    fork = cfg.resolved("sharing") == "fork-cow" and cfg.allocator == "paged"  # slabs never share
    if fork and (cfg.resolved("chunked_prefill") or cfg.resolved("enable_prefix_caching")):
        raise ConfigError("--sharing fork-cow (paper-v0) needs the paged allocator, no chunked prefill and "
                          "no prefix caching: use --preset paper-v0")
    kv = make_allocator(cfg, budget, fork)
    sched = make_scheduler(cfg, budget, kv, fork)
    cost = build_cost_model(cfg.cost_model, model, gpu, cfg.tensor_parallel_size,
                            Path(cfg.calibration) if cfg.calibration else None)
    return Components(budget, kv, sched, cost)


def rejecter(budget: KvBudget, kv: KvAllocator, sched: Scheduler) -> Callable[[Request], str]:
    """Reasons a request can never run, checked when it arrives (vLLM's API server rejects)."""
    max_len = budget.max_model_len

    def reject(r: Request) -> str:
        if r.prompt_tokens + r.output_tokens > max_len:
            return f"prompt+output {r.prompt_tokens + r.output_tokens} > max_model_len {max_len}"
        if not sched.chunked_prefill and r.prompt_tokens > sched.max_num_batched_tokens:
            return f"prompt {r.prompt_tokens} > max_num_batched_tokens {sched.max_num_batched_tokens} (no chunked prefill)"
        return kv.never_fits(r)

    return reject


def new_replica(env: simpy.Environment, cfg: SimConfig, *, parts: Components | None = None,
                check: bool = False, exact_steps: bool | None = None,
                on_step: Callable[[Replica], None] | None = None,
                on_progress: Callable[[Replica], None] | None = None) -> Replica:
    """A replica for ``cfg`` on ``env`` (``parts`` reuses components already built)."""
    budget, kv, sched, cost = parts if parts is not None else build(cfg)
    kernel = StepKernel(sched, kv, cost, block_bytes=budget.bytes_per_block)
    return Replica(env, kernel, exact_steps=cfg.exact_steps if exact_steps is None else exact_steps,
                   check=check, reject=rejecter(budget, kv, sched), on_step=on_step,
                   on_progress=on_progress)
