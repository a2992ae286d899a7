"""What a plan is asked for (:class:`PlanSpec`) and the demand measured on the trace
(:class:`Demand`).

Their own module so that the planner (which builds them) and the table (which reads them)
both depend on these types, and not on each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sim.cluster.slo import Slo
from sim.fleet.candidate import Split
from sim.fleet.prices import GpuPrice, PricePoint


@dataclass(frozen=True, slots=True)
class PlanSpec:
    gpus: list[str]
    tps: list[int]
    slo: Slo
    base: dict[str, Any]                       # SimConfig settings shared by all candidates
    prices: dict[str, GpuPrice]
    knobs: dict[str, list[Any]] = field(default_factory=dict)
    rate_scale: float = 1.0
    target_qps: float | None = None
    router: str = "least-outstanding-tokens"
    n_plus_k: int = 0
    headroom: float = 0.0
    replications: int = 3
    seed: int = 0
    window: int = 2000
    iters: int = 3
    peak_window_s: float = 300.0
    bucket_s: float = 60.0
    cold_start_s: float = 120.0
    price_point: PricePoint = "typical"
    validate: bool = True
    backend: str = "local"
    workers: int = 1
    address: str | None = None
    splits: list[Split] = field(default_factory=list)   # xPyD groups searched beside unified replicas
    raise_seqs: bool = False   # also search 2x max_num_seqs where the cap binds (fleet/tuning.py)
    max_concurrency: int | None = None   # a closed loop of N clients (sim/fleet/clients_plan.py)
    client_rate: float | None = None     # ... that also keep to --request-rate (the trace's times drawn at it)


@dataclass(frozen=True, slots=True)
class Demand:
    mean_qps: float
    peak_qps: float
    scale: float               # applied to the trace's arrival rate
    mean_output_tokens: float
    mean_total_tokens: float
    duration_s: float
    clients: int = 0           # a closed loop's N clients (rates NaN, or its --request-rate); 0: open loop

    @property
    def load(self) -> float:
        """What the fleet is sized for: N clients, or the peak rate."""
        return float(self.clients) if self.clients else self.peak_qps
