"""One place that turns a :class:`~sim.config.schema.SimConfig` into a running replica.

    cfg --> specs --> KV budget --> allocator --> scheduler (+ queue, admission, preemption,
            victim) --> cost model --> StepKernel --> Replica (SimPy)

Used by :func:`sim.run.simulate.simulate`, the fleet router and the memory-map recorder.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import simpy

from sim.config.schema import SimConfig
from sim.cost import StepCostModel
from sim.engine.replica import Replica
from sim.engine.step import StepKernel
from sim.errors import ConfigError
from sim.io.rejects import BATCH_TOKENS, KV_POOL, MAX_MODEL_LEN, Rejection
from sim.kv.base import KvAllocator
from sim.kv.factory import make_connector, paged_variant
from sim.kv.paged import PagedAllocator
from sim.kv.slab import SlabAllocator
from sim.memory.budget import KvBudget
from sim.model.catalog import ModelSpec
from sim.request import Request
from sim.run.static import static_parts
from sim.sched.admission import Admission
from sim.sched.async_scheduler import AsyncScheduler
from sim.sched.paper_v0 import PaperV0Scheduler
from sim.sched.policies import VICTIMS
from sim.sched.preemption import Recompute, Swap
from sim.sched.queues import QUEUES
from sim.sched.scheduler import Scheduler
from sim.sched.spec_decode import SpecDecode


class Components(NamedTuple):
    budget: KvBudget
    kv: KvAllocator
    sched: Scheduler
    cost: StepCostModel


def make_allocator(cfg: SimConfig, budget: KvBudget, fork: bool, model: ModelSpec | None = None) -> KvAllocator:
    """The KV pool, with the KV connector the flags ask for (CPU offload tier) behind it."""
    kv = paged_variant(cfg, budget, model, fork) if model is not None else None  # hybrid groups
    if kv is None and cfg.allocator == "paged":
        kv = PagedAllocator(
            budget.num_gpu_blocks, cfg.block_size, null_block=budget.null_block,
            free_order=cfg.resolved("free_order"),
            enable_caching=bool(cfg.resolved("enable_prefix_caching")), exact_fill=fork)
    if kv is None:
        slots = budget.available_kv_bytes // budget.bytes_per_token
        return SlabAllocator(int(slots), budget.max_model_len, cfg.reservation, cfg.slab_placement)
    make_connector(cfg, budget, kv)
    return kv


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
        choose_victim=VICTIMS[cfg.resolved("victim")],
        long_prefill_token_threshold=cfg.long_prefill_token_threshold)
    rng = np.random.default_rng(cfg.seed)  # the run's one Generator (beam re-forks, draft acceptance)
    chunked, lag, k = bool(cfg.resolved("chunked_prefill")), bool(cfg.resolved("async_scheduling")), \
        cfg.num_speculative_tokens
    if not chunked and (fork or cfg.preset == "paper-v0"):  # the paper's prefill-only steps
        if lag or k:
            raise ConfigError("--async-scheduling and --num-speculative-tokens need V1 steps, not the "
                              "paper-v0 preset's prefill-only ones")
        return PaperV0Scheduler(kv, fork_cow=fork, rng=rng, **common)
    if k and (lag or not kv.paged):
        raise ConfigError("--num-speculative-tokens is modelled with the paged allocator and sync scheduling: "
                          "add --no-async-scheduling" + ("" if kv.paged else " and --allocator paged"))
    spec = SpecDecode(k, cfg.speculative_method, cfg.spec_acceptance_rate, rng) if k else None
    return (AsyncScheduler if lag else Scheduler)(  # V1 steps, with or without chunked prefill
        kv, chunked_prefill=chunked, spec=spec, max_model_len=budget.max_model_len, **common)  # type: ignore[arg-type]


def build(cfg: SimConfig) -> Components:
    model, budget, cost = static_parts(cfg)
    fork = cfg.resolved("sharing") == "fork-cow" and cfg.allocator == "paged"  # slabs never share
    if fork and (cfg.resolved("chunked_prefill") or cfg.resolved("enable_prefix_caching")):
        raise ConfigError("--sharing fork-cow (paper-v0) needs the paged allocator, no chunked prefill and "
                          "no prefix caching: use --preset paper-v0")
    kv = make_allocator(cfg, budget, fork, model)
    sched = make_scheduler(cfg, budget, kv, fork)
    return Components(budget, kv, sched, cost)


def rejecter(budget: KvBudget, kv: KvAllocator, sched: Scheduler) -> Callable[[Request], Rejection | None]:
    """Why a request can never run (sim/io/rejects.py), checked when it arrives; a request that would
    pass ``max_model_len`` is cut there instead (``Request.cap_output``, finish reason "length")."""
    max_len = budget.max_model_len

    def reject(r: Request) -> Rejection | None:
        # vLLM (v1/engine/input_processor.py:_validate_prompt_len) refuses a prompt that leaves no
        # room for one output token; any other request runs and stops at max_model_len (check_stop)
        if r.prompt_tokens >= max_len:
            return Rejection(MAX_MODEL_LEN, f"prompt {r.prompt_tokens} >= max_model_len {max_len} "
                                            "(no room for an output token)")
        r.cap_output(max_len)
        if not sched.chunked_prefill and r.prompt_tokens > sched.max_num_batched_tokens:
            return Rejection(BATCH_TOKENS, f"prompt {r.prompt_tokens} > max_num_batched_tokens "
                                           f"{sched.max_num_batched_tokens} (no chunked prefill)")
        why = kv.never_fits(r)
        return Rejection(KV_POOL, why) if why else None

    return reject


def new_replica(env: simpy.Environment, cfg: SimConfig, *, parts: Components | None = None,
                check: bool = False, exact_steps: bool | None = None,
                on_step: Callable[[Replica], None] | None = None,
                on_progress: Callable[[Replica], None] | None = None) -> Replica:
    """A replica for ``cfg`` on ``env`` (``parts`` reuses components already built)."""
    budget, kv, sched, cost = parts if parts is not None else build(cfg)
    kernel = StepKernel(sched, kv, cost, block_bytes=budget.bytes_per_block)
    exact = cfg.exact_steps if exact_steps is None else exact_steps
    # windows free blocks mid-decode, or a paged pool offers no bulk-decode view: no fast-forward
    # (a KV connector that completes transfers between steps gets lockstep windows: replica.py)
    exact = exact or kv.allocates_every_step or (kv.paged and kv.decode_blocks is None)
    return Replica(env, kernel, exact_steps=exact,
                   check=check, reject=rejecter(budget, kv, sched), on_step=on_step,
                   on_progress=on_progress)
