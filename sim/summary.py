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
from sim.budget import KvBudget
from sim.config import SimConfig
from sim.results import memory_breakdown


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
    timings: Timings = field(default_factory=Timings)
    trace: TraceInfo = field(default_factory=TraceInfo)
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
        for k, v in s.items():
            if isinstance(v, (int, float, str)) and not isinstance(v, bool) and k not in out:
                out[k] = v
        out["cost_model_name"] = out.pop("cost_model")
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


def summarize(cfg: SimConfig, budget: KvBudget, cost_name: str, req: pd.DataFrame,
              steps: pd.DataFrame, c: RunCounters) -> Summary:
    done = req[req["status"] == "finished"]
    span = float(done["finish_s"].max() - req["arrival_s"].min()) if len(done) else 0.0
    out_tokens = int(done["output_tokens"].sum())
    memory = memory_breakdown(steps)
    held = steps["token_state_slots"] + steps["internal_frag_slots"] + steps["reserved_slots"]
    saved = steps["shared_blocks_saved"]
    rate = (lambda x: x / span) if span > 0 else (lambda x: 0.0)
    return Summary(
        config=cfg.model_dump(), cost_model=cost_name, num_gpu_blocks=budget.num_gpu_blocks,
        budget=budget.as_dict(), num_requests=len(req), num_finished=len(done),
        num_rejected=int((req["status"] == "rejected").sum()),
        num_unfinished=int((req["status"] == "unfinished").sum()),
        num_steps=len(steps), fast_forward_steps=c.fast_forward_steps, simulated_s=span,
        throughput=Throughput(rate(len(done)), rate(out_tokens),
                              rate(out_tokens + int(done["prompt_tokens"].sum()))),
        ttft_s=Percentiles.of(done["ttft_s"]), tpot_s=Percentiles.of(done["tpot_s"]),
        e2e_s=Percentiles.of(done["e2e_s"]), memory=memory,
        kv_usage_mean=1.0 - memory["free"] if len(steps) else 0.0,
        kv_held_slots_peak=int(held.max()) if len(steps) else 0,
        preemptions=c.preemptions, preemptions_per_1k=1000.0 * c.preemptions / max(len(req), 1),
        swap_fallbacks=c.swap_fallbacks, evictions=c.evictions, prefix_cache=c.prefix,
        sharing_saved_fraction=float((saved / (saved + (held / c.block_size).clip(lower=1))).mean())
        if len(steps) and c.paged else 0.0,
        busy_fraction=c.busy_s / span if span > 0 else 0.0,
        rejections={str(k): int(v) for k, v in
                    req.loc[req["status"] == "rejected", "reject_reason"].value_counts().items()},
    )
