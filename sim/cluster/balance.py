"""Is the whole fleet used? Per-instance load and the warnings every cluster run prints.

A router can look fine on fleet-wide percentiles while leaving replicas idle (issue 50: the
default ``kv-aware`` sent 0 of 12,031 Mooncake requests to 3 of 8 replicas, silently). After
each cluster run every instance gets a row -- requests, its share of its pool, busy share, KV
use, prefix hit rate, preemptions, queue peak and the load verdict of :mod:`sim.io.overload`
on its own arrivals -- and a warning names:

- an instance that received under :data:`FAIR_SHARE_FLOOR` of its fair share (its pool's
  requests / the pool's size);
- an instance whose queue peaked above :data:`QUEUE_MULTIPLE` times its pool's median (the
  median taken as at least one request, so an idle pool does not flag a queue of two).

An instance's arrivals are its own: a prefill instance's at the request's arrival (first step:
its prefill's start), a decode instance's at the hand-off from prefill (or the arrival, for a
prompt it prefills locally).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from sim.io.overload import Load, offered_load
from sim.io.results import MEM_CATS

FAIR_SHARE_FLOOR = 0.25
QUEUE_MULTIPLE = 4.0


@dataclass(frozen=True, slots=True)
class InstanceLoad:
    name: str
    role: str
    requests: int          # routed to it (prefill instances: prefills)
    fair_share: float      # requests / (its pool's requests / pool size); 1 = an even split
    busy: float            # share of the run's time it was stepping
    kv_use: float          # time-weighted share of its KV pool held
    hit_rate: float | None  # prefix hit tokens / prompt tokens it prefilled (None: it prefilled none)
    preemptions: int
    load: Load


def _arrivals(req: pd.DataFrame, k: int, role: str) -> pd.DataFrame:
    """The requests instance ``k`` served, as its own requests table (module docstring)."""
    if role == "prefill":
        mine = req[req["prefill_instance"] == k]
        done = mine["prefill_done_s"]
        return pd.DataFrame({"arrival_s": mine["arrival_s"], "first_scheduled_s": mine["prefill_start_s"],
                             "finish_s": done, "ttft_s": done - mine["arrival_s"],
                             "status": np.where(done.notna(), "finished", mine["status"]),
                             "prompt_tokens": mine["prompt_tokens"], "hit": mine["prefill_hit_tokens"].clip(lower=0)})
    mine = req[req["instance"] == k]
    here = mine["prefill_done_s"].where(mine["prefill_instance"] >= 0, mine["arrival_s"]) \
        if "prefill_done_s" in mine else mine["arrival_s"]
    return pd.DataFrame({"arrival_s": here, "first_scheduled_s": mine["first_scheduled_s"],
                         "finish_s": mine["finish_s"], "ttft_s": mine["first_token_s"] - here,
                         "status": mine["status"], "prompt_tokens": mine["prompt_tokens"],
                         "hit": hits(mine),  # (a pulled prompt's KV is no hit: only local prefills count)
                         "num_preemptions": mine["num_preemptions"]})


def hits(req: pd.DataFrame, prefill_side: bool = False) -> pd.Series:
    """Prefix-cache hit tokens of the instance that computed each prompt: a request's own, NaN
    for one whose prompt KV was pulled from a prefill instance (that is a transfer, not a hit)
    or, ``prefill_side``, that prefill instance's hit instead."""
    own = req["prefix_hit_tokens"].clip(lower=0).astype("float64")
    if "prefill_instance" not in req:
        return own
    remote = req["prefill_instance"] >= 0
    return own.where(~remote, req["prefill_hit_tokens"].clip(lower=0) if prefill_side else np.nan)


def _kv_use(steps: pd.DataFrame) -> float:
    if not len(steps):
        return 0.0
    total = steps[list(MEM_CATS)].sum(axis=1).to_numpy(np.float64)
    used = 1.0 - steps["free_slots"].to_numpy(np.float64) / np.where(total > 0, total, 1.0)
    w = steps["duration_s"].to_numpy(np.float64)
    return float((used * w).sum() / w.sum()) if w.sum() > 0 else float(used.mean())


def instance_loads(req: pd.DataFrame, steps: pd.DataFrame, names: Sequence[str], roles: Sequence[str],
                   end_s: float) -> list[InstanceLoad]:
    """One row per instance of a cluster run (``req``, ``steps``: the run's tables)."""
    frames = [_arrivals(req, k, role) for k, role in enumerate(roles)]
    pools = {role: [k for k, r in enumerate(roles) if r == role] for role in set(roles)}
    out = []
    for k, (name, role) in enumerate(zip(names, roles, strict=True)):
        f, pool = frames[k], pools[role]
        even = sum(len(frames[j]) for j in pool) / len(pool)
        st = steps[steps["instance"] == k]
        prompt = int(f["prompt_tokens"][f["hit"].notna()].sum()) if "prompt_tokens" in f else 0
        out.append(InstanceLoad(
            name, role, len(f), len(f) / even if even else 1.0,
            float(st["duration_s"].sum()) / end_s if end_s > 0 else 0.0, _kv_use(st),
            float(f["hit"].sum()) / prompt if prompt else None,
            int(f["num_preemptions"].sum()) if "num_preemptions" in f else 0, offered_load(f)))
    return out


def balance_warnings(rows: Sequence[InstanceLoad]) -> list[str]:
    """The warning lines (module docstring); empty when every instance pulls its weight."""
    out = []
    for role in dict.fromkeys(r.role for r in rows):
        pool = [r for r in rows if r.role == role]
        if len(pool) < 2:
            continue
        med = max(float(np.median([r.load.queue_peak for r in pool])), 1.0)
        for r in pool:
            if r.fair_share < FAIR_SHARE_FLOOR:
                out.append(f"{role} instance {r.name} received {r.requests:,} requests, {100 * r.fair_share:.0f}% "
                           f"of its fair share (under {100 * FAIR_SHARE_FLOOR:.0f}%): the router leaves it idle")
            if r.load.queue_peak > QUEUE_MULTIPLE * med:
                out.append(f"{role} instance {r.name} queued up to {r.load.queue_peak:,} requests, over "
                           f"{QUEUE_MULTIPLE:g}x its pool's median ({med:g}): the router overloads it")
    return out
