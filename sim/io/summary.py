"""The run summary: a typed, frozen record of one simulation, written as ``summary.json``.

``Summary.to_json()`` is the nested document (the file's layout); ``Summary.flat()`` is one
flat row of scalars (sweep tables, pandas).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from sim import __version__
from sim.config.schema import SimConfig
from sim.cost import StepCostModel, basis_of
from sim.cost.regime import run_regime
from sim.io.api_server import ApiServerInfo
from sim.io.overload import Load, offered_load
from sim.io.resolved import resolved_config
from sim.io.stream import StepStats, step_stats
from sim.kv.base import KvAllocator
from sim.memory.budget import KvBudget


@dataclass(frozen=True, slots=True)
class Percentiles:
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None

    @classmethod
    def of(cls, x: pd.Series) -> Percentiles:
        x = x.dropna()
        if len(x) == 0:
            return cls()
        q = np.percentile(x.to_numpy(), [50, 90, 99])
        return cls(float(x.mean()), float(q[0]), float(q[1]), float(q[2]))


@dataclass(frozen=True, slots=True)
class Throughput:
    requests_per_s: float = 0.0
    output_tokens_per_s: float = 0.0
    total_tokens_per_s: float = 0.0


@dataclass(frozen=True, slots=True)
class PrefixCache:
    queries: int = 0
    hits: int = 0
    hit_rate: float = 0.0
    preempted_queries: int = 0
    preempted_hits: int = 0


@dataclass(frozen=True, slots=True)
class KvOffload:
    """The prefix cache per tier with ``--kv-offloading-size`` (all zero without): tokens of new
    requests found on the GPU and in the CPU tier, as shares of their queried tokens (vLLM's
    prefix-cache and connector hit rates), and the CPU tier's traffic in blocks."""

    cpu_blocks: int = 0
    gpu_hits: int = 0
    gpu_hit_rate: float = 0.0
    cpu_hits: int = 0
    cpu_hit_rate: float = 0.0
    cpu_preempted_hits: int = 0        # tokens loaded for resumed (preempted) requests
    loaded_blocks: int = 0             # CPU -> GPU (charged to the admitting step as swap-in)
    stored_blocks: int = 0             # GPU -> CPU (write-through of every filled block)
    cpu_evictions: int = 0


def kv_offload_of(kv: KvAllocator, prefix: PrefixCache) -> KvOffload:
    """The per-tier counters of the KV connector behind the prefix cache (the CPU offload tier,
    :mod:`sim.kv.offload`); zeros without one."""
    if kv.connector is None:
        return KvOffload()
    c = kv.connector.stats()
    q, cpu = prefix.queries, c.hit_tokens
    return KvOffload(c.external_blocks, prefix.hits - cpu, (prefix.hits - cpu) / q if q else 0.0, cpu,
                     cpu / q if q else 0.0, c.preempted_hit_tokens, c.loaded_blocks, c.stored_blocks, c.evictions)


@dataclass(frozen=True, slots=True)
class Timings:
    load_s: float = 0.0
    simulate_s: float = 0.0
    write_s: float = 0.0


@dataclass(frozen=True, slots=True)
class TraceInfo:
    path: str = ""
    format: str = ""
    num_rows: int = 0
    content_hash: str = ""
    num_bad_rows: int = 0
    notes: tuple[str, ...] = ()        # what loading did to the file (re-sorted rows, skipped rows)


@dataclass(frozen=True, slots=True)
class Summary:
    config: dict[str, Any]
    cost_model: str
    num_gpu_blocks: int
    budget: dict[str, Any]
    num_requests: int
    num_finished: int
    num_rejected: int
    num_unfinished: int
    num_steps: int
    fast_forward_steps: int
    simulated_s: float
    throughput: Throughput
    ttft_s: Percentiles
    tpot_s: Percentiles
    e2e_s: Percentiles
    memory: dict[str, float]           # time-averaged pool share per memory category
    kv_usage_mean: float
    kv_held_slots_peak: int
    preemptions: int
    preemptions_per_1k: float
    swap_fallbacks: int
    evictions: int
    prefix_cache: PrefixCache
    sharing_saved_fraction: float
    busy_fraction: float
    rejections: dict[str, int]         # reject reason -> count
    num_length_capped: int = 0         # finished requests cut at max_model_len (finish reason "length")
    load: Load = field(default_factory=Load)  # offered vs served rate, overloaded (sim/io/overload.py)
    max_concurrency: int | None = None  # the clients' closed loop (--max-concurrency; sim/run/clients.py), None: open loop
    config_defaults: tuple[str, ...] = ()  # knobs left unset, filled in by preset/budget (sim/io/resolved.py)
    kv_offload: KvOffload = field(default_factory=KvOffload)  # per-tier hits (--kv-offloading-size)
    cost_basis: str = ""               # fitted | extrapolated | uncalibrated | exact (sim/cost/batch.py)
    cost_basis_detail: str = ""        # each term's source; how it was extrapolated
    cost_band: tuple[float, float] = (0.0, 0.0)  # step-time error band (optimistic, pessimistic), fractions
    # the run against the stack's fitted regime (batch, context, prompt; sim/cost/regime.py): its own
    # fitted | extrapolated verdict and how far; with the held-out mean E2E and TTFT bands that verdict picks
    cost_regime: dict[str, Any] = field(default_factory=dict)
    cost_band_e2e: tuple[float, float] = (0.0, 0.0)
    cost_band_ttft: tuple[float, float] = (0.0, 0.0)
    timings: Timings = field(default_factory=Timings)
    trace: TraceInfo = field(default_factory=TraceInfo)
    api_server: ApiServerInfo = field(default_factory=ApiServerInfo)  # the front-end's profile (sim/frontend)
    kvsim_version: str = __version__

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        return {"kvsim_version": d.pop("kvsim_version"), **d}

    def flat(self) -> dict[str, Any]:
        """One row of scalars: ``ttft_p99_s``, ``throughput_rps``, ``mem_token_state``, ..."""
        s = self.to_json()
        out: dict[str, Any] = {}
        tp = s["throughput"]
        out.update(throughput_rps=tp["requests_per_s"], output_tokens_per_s=tp["output_tokens_per_s"],
                   total_tokens_per_s=tp["total_tokens_per_s"])
        for lat in ("ttft_s", "tpot_s", "e2e_s"):
            for q, v in s[lat].items():
                out[f"{lat.removesuffix('_s')}_{q}_s"] = v
        out.update({f"mem_{k}": v for k, v in s["memory"].items()})
        out.update({f"prefix_{k}": v for k, v in s["prefix_cache"].items()})
        out.update({f"offload_{k}": v for k, v in s["kv_offload"].items()})
        for k, v in s.items():
            if isinstance(v, (int, float, str)) and not isinstance(v, bool) and k not in out:
                out[k] = v
        out["cost_model_name"] = out.pop("cost_model")
        out["cost_band_optimistic"], out["cost_band_pessimistic"] = s["cost_band"]
        out["cost_regime_basis"] = s["cost_regime"].get("basis", "")
        for k in ("e2e", "ttft"):
            out[f"cost_band_{k}_optimistic"], out[f"cost_band_{k}_pessimistic"] = s[f"cost_band_{k}"]
        out.update(s["load"])  # offered_rps, served_rps, backlog_at_last_arrival, overloaded
        if s["max_concurrency"] is not None:  # a closed loop's clients (an open loop's cell: empty in a table)
            out["max_concurrency"] = s["max_concurrency"]
        out["simulate_s"] = s["timings"]["simulate_s"]
        return out


@dataclass(frozen=True, slots=True)
class RunCounters:
    """What the summary needs from the engine besides the two tables."""

    fast_forward_steps: int
    busy_s: float
    preemptions: int
    swap_fallbacks: int
    evictions: int
    prefix: PrefixCache
    paged: bool
    block_size: int


def run_span(req: pd.DataFrame) -> float:
    """A run's simulated time, the denominator of its rates: first send to last finish (0: none
    finished). One replica's and a cluster's summaries both use it."""
    done = req["finish_s"][req["status"] == "finished"]
    return float(done.max() - req["arrival_s"].min()) if len(done) else 0.0


def summarize(cfg: SimConfig, budget: KvBudget, cost: StepCostModel, req: pd.DataFrame,
              steps: pd.DataFrame | StepStats, c: RunCounters) -> Summary:
    """``cost``: the run's own step-cost model (its name and basis are reported, never rebuilt);
    ``steps``: the steps frame, or the :class:`StepStats` a streamed run folded (sim/io/stream.py);
    ``req`` needs only the columns of :func:`sim.io.results.request_columns`."""
    done = req[req["status"] == "finished"]
    span = run_span(req)
    out_tokens = int(done["output_tokens"].sum())
    st = steps if isinstance(steps, StepStats) else step_stats(steps, c.block_size, c.paged)
    memory = st.memory
    rate = (lambda x: x / span) if span > 0 else (lambda x: 0.0)
    config, defaults = resolved_config(cfg, budget)
    basis = basis_of(cost)
    reg = run_regime(cost, basis.basis, req)
    run_basis = reg.report.get("basis") or basis.basis  # fitted only inside the fitted regime
    detail = basis.detail if run_basis == basis.basis else f"{basis.detail}; this run: {reg.report['detail']}"
    return Summary(
        cost_basis=run_basis, cost_basis_detail=detail, cost_band=reg.band_step or basis.band,
        cost_regime=reg.report, cost_band_e2e=reg.band_e2e, cost_band_ttft=reg.band_ttft,
        config=config, config_defaults=defaults, cost_model=cost.name, num_gpu_blocks=budget.num_gpu_blocks,
        budget=budget.as_dict(), num_requests=len(req), num_finished=len(done),
        num_rejected=int((req["status"] == "rejected").sum()),
        num_unfinished=int((req["status"] == "unfinished").sum()),
        num_steps=st.num_steps, fast_forward_steps=c.fast_forward_steps, simulated_s=span,
        throughput=Throughput(rate(len(done)), rate(out_tokens),
                              rate(out_tokens + int(done["prompt_tokens"].sum()))),
        ttft_s=Percentiles.of(done["ttft_s"]), tpot_s=Percentiles.of(done["tpot_s"]),
        e2e_s=Percentiles.of(done["e2e_s"]), memory=memory,
        kv_usage_mean=1.0 - memory["free"] if st.num_steps else 0.0,
        kv_held_slots_peak=st.held_slots_peak,
        preemptions=c.preemptions, preemptions_per_1k=1000.0 * c.preemptions / max(len(req), 1),
        swap_fallbacks=c.swap_fallbacks, evictions=c.evictions, prefix_cache=c.prefix,
        sharing_saved_fraction=st.saved_fraction,
        busy_fraction=c.busy_s / span if span > 0 else 0.0,
        rejections={str(k): int(v) for k, v in
                    req.loc[req["status"] == "rejected", "reject_reason"].value_counts().items() if v},
        num_length_capped=int((done["finish_reason"] == "length").sum()) if "finish_reason" in done else 0,
        load=offered_load(req),
    )
