"""Replicas over time for a time-varying trace: a reactive autoscaler with a cold start.

Every ``bucket_s`` the autoscaler looks at the arrival rate of the bucket that just ended and
asks for ``ceil(rate x (1 + headroom) / capacity) + k`` replicas. New replicas are billed from
the moment they are requested but serve only after ``cold_start_s`` (model load + warm-up);
surplus replicas are released after ``cooldown_s`` of lower demand. The result is compared
with static peak provisioning (the peak-sized fleet all the time) and with an oracle that
knows each bucket's demand in advance (a lower bound on cost).

Under-provisioned time (serving replicas x capacity < the bucket's actual rate) is where the
cold start costs SLO attainment; the routed replay with ``active(t)`` measures that effect.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True, slots=True)
class AutoscalePolicy:
    bucket_s: float = 60.0
    cold_start_s: float = 120.0
    cooldown_s: float = 300.0
    headroom: float = 0.0
    n_plus_k: int = 0
    min_replicas: int = 1


def needed(rate: float, capacity: float, pol: AutoscalePolicy) -> int:
    if capacity <= 0:
        return 0
    return max(pol.min_replicas, math.ceil(rate * (1 + pol.headroom) / capacity - 1e-9) + pol.n_plus_k)


def schedule(t: np.ndarray, rate: np.ndarray, capacity: float, pol: AutoscalePolicy) -> pd.DataFrame:
    """One row per bucket: demand, replicas wanted, serving, billed, oracle, and shortfall."""
    wanted = np.array([needed(r, capacity, pol) for r in rate], dtype=np.int64)
    serving = np.zeros(len(t), dtype=np.int64)
    billed = np.zeros(len(t), dtype=np.int64)
    # start times of replicas, serving or warming up; provisioned for the first bucket at t=0
    ready_at: list[float] = [-math.inf] * int(wanted[0] if len(t) else 0)
    low_since: float | None = None
    for i, now in enumerate(t):
        target = wanted[i - 1] if i else wanted[0]   # reacts to the bucket that just ended
        if target > len(ready_at):
            ready_at += [now + pol.cold_start_s] * (target - len(ready_at))
            low_since = None
        elif target < len(ready_at):
            low_since = now if low_since is None else low_since
            if now - low_since >= pol.cooldown_s:
                ready_at = sorted(ready_at)[:target]   # release the newest first
                low_since = None
        else:
            low_since = None
        billed[i] = len(ready_at)
        serving[i] = sum(1 for r in ready_at if r <= now)
    return pd.DataFrame({
        "t_s": t, "rate": rate, "wanted": wanted, "serving": serving, "billed": billed,
        "oracle": wanted, "short": (serving * capacity < rate).astype(np.int64),
    })


@dataclass(frozen=True, slots=True)
class AutoscaleCost:
    static_replicas: int
    static_cost: float        # $ over the trace
    autoscale_cost: float
    oracle_cost: float
    short_share: float        # share of buckets under-provisioned
    hours: float

    @property
    def saving(self) -> float:
        return 1 - self.autoscale_cost / self.static_cost if self.static_cost else 0.0


def costs(sched: pd.DataFrame, static_replicas: int, usd_per_replica_hour: float,
          bucket_s: float) -> AutoscaleCost:
    h = bucket_s / 3600
    hours = len(sched) * h
    return AutoscaleCost(
        static_replicas=static_replicas,
        static_cost=static_replicas * usd_per_replica_hour * hours,
        autoscale_cost=float(sched["billed"].sum()) * usd_per_replica_hour * h,
        oracle_cost=float(sched["oracle"].sum()) * usd_per_replica_hour * h,
        short_share=float(sched["short"].mean()) if len(sched) else 0.0,
        hours=hours)


def active_fn(sched: pd.DataFrame, bucket_s: float) -> Callable[[float], int]:
    """``active(t)``: replicas serving at time t (for the routed replay)."""
    serving = sched["serving"].to_numpy()

    def active(now: float) -> int:
        i = min(int(now // bucket_s), len(serving) - 1)
        return int(serving[max(i, 0)])

    return active
