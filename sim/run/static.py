"""The parts of a replica that a run never changes: specs, KV budget, step-cost model.

A sweep runs hundreds of points in one worker process and a capacity search probes one
candidate many times (rates x seeds); both rebuilt the budget and the cost model's folded
tables for every run. :func:`static_parts` builds them once per process and key:

- the KV budget (and the KV-dtype-applied model spec) per full :class:`SimConfig`;
- the cost model per (model, KV dtype, calibration file, and every cost knob:
  :func:`~sim.cost.for_config.cost_key`), so points that differ only in engine knobs (block
  size, memory share) share one.

Both are pure functions of their key: the budget is a frozen record and the cost models only
memoise step times per token count, which are pure too, so a reused part gives bit-identical
runs. A key that names a file (an HF ``config.json`` model, a ``--calibration`` fit) includes
the file's size and mtime, so an edited file is read again.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sim.config.schema import SimConfig
from sim.cost import StepCostModel
from sim.cost.for_config import cost_key, cost_model_for
from sim.memory.budget import KvBudget, compute_budget, model_for
from sim.memory.draft_kv import with_draft_kv
from sim.model.catalog import ModelSpec, resolve_gpu, resolve_model
from workloads.schema import Trace

MAX_ENTRIES = 256  # per cache and process; a full cache is emptied (no partial eviction order)

_BUDGETS: dict[tuple[Any, ...], tuple[ModelSpec, KvBudget]] = {}
_COSTS: dict[tuple[Any, ...], StepCostModel] = {}


def _stamp(name: str | None) -> tuple[str, int, int] | None:
    """(path, size, mtime_ns) of a file argument, None for a catalog name or no file."""
    if not name:
        return None
    p = Path(name)
    if p.is_dir():
        p = p / ("config.json" if (p / "config.json").exists() else "fit.yaml")
    try:
        st = os.stat(p)
    except OSError:
        return None
    return str(p), st.st_size, st.st_mtime_ns


def _stack_stamp(name: str | None) -> tuple[str, int, int] | None:
    """A serving-stack profile given as a file is stamped like any file argument (a fit rewrites
    one path between replays: keyed by name alone, every replay would reuse the first profile)."""
    return _stamp(name) if name and name.endswith((".yaml", ".yml")) else None


def _put(cache: dict[tuple[Any, ...], Any], key: tuple[Any, ...], value: Any) -> None:
    if len(cache) >= MAX_ENTRIES:
        cache.clear()
    cache[key] = value


def static_parts(cfg: SimConfig) -> tuple[ModelSpec, KvBudget, StepCostModel]:
    """(model as stored, KV budget, cost model) for ``cfg``, built once per process and key."""
    mstamp = _stamp(cfg.model)
    bkey = (cfg, mstamp)
    got = _BUDGETS.get(bkey)
    if got is None:
        model, gpu = model_for(cfg, resolve_model(cfg.model)), resolve_gpu(cfg.gpu)  # KV dtype applied
        budget = compute_budget(cfg, model, gpu)
        if cfg.num_speculative_tokens:
            budget = with_draft_kv(budget, cfg.speculative_method)  # the drafter's KV layer
        got = (model, budget)
        _put(_BUDGETS, bkey, got)
    model, budget = got
    ckey = (cfg.model, mstamp, cfg.kv_cache_dtype, _stamp(cfg.calibration), _stack_stamp(cfg.serving_stack),
            *cost_key(cfg))
    cost = _COSTS.get(ckey)
    if cost is None:
        cost = cost_model_for(cfg, model)
        _put(_COSTS, ckey, cost)
    return model, budget, cost


def clear() -> None:
    """Forget every cached part (tests; after editing a catalog in place)."""
    _BUDGETS.clear()
    _COSTS.clear()
    _HASHES.clear()


_HASHES: dict[int, tuple[Trace, str]] = {}


def content_hash_of(trace: Trace) -> str:
    """``trace.content_hash`` (a pass over every row) once per process and trace object.

    Keyed by identity; the entry holds the trace, so its id is never reused while cached.
    A trace is frozen and its frame is not edited in place once loaded.
    """
    got = _HASHES.get(id(trace))
    if got is None or got[0] is not trace:
        if len(_HASHES) >= MAX_ENTRIES:
            _HASHES.clear()
        got = _HASHES[id(trace)] = (trace, trace.content_hash)
    return got[1]
