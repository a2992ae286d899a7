"""xPyD splits in ``kvsim plan``: the unit whose capacity is searched is one xPyD group.

The planner's capacity search (:func:`sim.fleet.capacity.search_seed`) brackets and bisects the
rate one *unit* sustains within the SLO. For a unified candidate the unit is one replica; for a
:class:`~sim.fleet.candidate.Split` it is ``x`` prefill and ``y`` decode instances behind the
split's router, run on the P/D cluster runtime (:func:`sim.cluster.disagg.run_cluster`, the
same cluster mapping as the standalone study :mod:`sim.fleet.xpyd`). This module supplies the
two policies the planner plugs in for a split -- the probe at one rate, and the routed replay of
the full trace through ``N`` groups -- and the parser of ``--disagg``.

A split's probe reports, next to the replica metrics, the mean TTFT parts
(:mod:`sim.fleet.breakdown`), the busy share of each role, the busiest link's utilisation and
the pulls that waited for decode blocks; its diagnostics carry the tail's transfer and
receive-wait shares that :func:`sim.fleet.binding.classify` reads for ``link-bandwidth`` and
``decode-kv-receive``. Like a replica's, a P/D probe stops as soon as its SLO verdict can only
be "fail" (:mod:`sim.cluster.monitor` on the cluster runtime).
"""

from __future__ import annotations

import dataclasses
import re
import time
from typing import Any

import numpy as np
import pandas as pd

from sim.cluster.disagg import ClusterResult, run_cluster
from sim.cluster.links import link_kind
from sim.cluster.replay import FleetResult
from sim.cluster.router import POLICIES, parse_router
from sim.cluster.slo import Slo, SloEval, evaluate
from sim.cluster.spec import parse_cluster
from sim.errors import ConfigError
from sim.fleet.binding import Diagnostics, decode_pressure, diagnose
from sim.fleet.breakdown import tail_shares
from sim.fleet.candidate import Candidate, Kw, Split
from sim.fleet.capacity import Probe, SearchSpec, _metrics, _quantile
from sim.fleet.validate import ValidateTask
from sim.fleet.workload import at_qps, to_trace
from sim.fleet.xpyd import cluster_for
from sim.model.catalog import gpu_catalog
from sim.run.static import static_parts

_SPLIT = re.compile(r"^(\d+)P(\d+)D(?::([^/]+)/([^/]+))?$", re.IGNORECASE)
_ROLE = re.compile(r"^(.+)x(\d+)$")   # GPUxTP (mi300x at TP 2: mi300xx2)


def cluster(cand: Candidate, base: dict[str, Any], units: int = 1) -> dict[str, Any]:
    """The cluster mapping of ``units`` copies of ``cand``'s xPyD group (pools of ``units x``
    prefill and ``units x y`` decode instances)."""
    s = cand.split
    if s is None:
        raise ConfigError(f"{cand.label}: not an xPyD candidate")
    link: dict[str, Any] = {"kind": s.link, **({"bandwidth_gbps": s.link_gbps} if s.link_gbps else {})}
    roles = {r: cand.settings(base, r) for r in ("prefill", "decode")}
    return cluster_for(units * s.prefill, units * s.decode, {}, link, s.router, s.threshold, roles)


def run_split(cand: Candidate, base: dict[str, Any], df: pd.DataFrame, units: int = 1,
              where: str = "<window>", stop_on_fail: tuple[Slo, int] | None = None) -> ClusterResult:
    """``df`` (normalized trace columns) through ``units`` of ``cand``'s group; ``stop_on_fail``
    as :func:`sim.cluster.disagg.run_cluster`'s (stop once the SLO is certain to fail)."""
    spec = parse_cluster(cluster(cand, base, units), f"{cand.label}")
    return run_cluster(spec, to_trace(df, where), stop_on_fail=stop_on_fail)


def _scheduled_on_prefill(req: pd.DataFrame) -> pd.DataFrame:
    """Requests as the replica diagnostics read them: a P/D request is first scheduled on its
    prefill instance (the decode side only schedules it once its KV has landed)."""
    if "prefill_start_s" not in req.columns:
        return req
    start = req["prefill_start_s"].to_numpy(np.float64)
    return req.assign(first_scheduled_s=np.where(np.isfinite(start), start, req["first_scheduled_s"]))


def probe_split(cand: Candidate, spec: SearchSpec, window: pd.DataFrame, qps: float
                ) -> tuple[Probe, dict[str, float], Diagnostics]:
    """One xPyD group at one rate (the split counterpart of :func:`sim.fleet.capacity.probe_replica`),
    stopped as soon as the SLO can no longer pass (a stopped probe is ``stopped_early``; its
    failing targets are the monitor's, its latency quantiles those of the finished requests)."""
    t0 = time.perf_counter()
    scaled = at_qps(window, qps)
    skip = int(len(scaled) * spec.warmup)
    res = run_split(cand, spec.base, scaled, stop_on_fail=(spec.slo, skip))
    req = _scheduled_on_prefill(res.requests).iloc[skip:]
    ev = evaluate(req, spec.slo)
    b = static_parts(cand.config(spec.base, "decode"))[1]
    pre = int(res.requests["num_preemptions"].sum())
    failing = res.failing if res.aborted else ev.failing
    diag = diagnose(res.steps, len(res.requests), pre, b.max_num_seqs, b.max_num_batched_tokens, failing, req)
    xfer, recv = tail_shares(req)
    pulls = int((res.requests["prefill_instance"] >= 0).sum())
    dec = [k for k, r in enumerate(res.roles) if r == "decode"]
    short, full = decode_pressure(res.steps[res.steps["instance"].isin(dec)], b.max_num_seqs)
    diag = dataclasses.replace(diag, kv_blocked_share=res.decode_kv_blocked / max(pulls, 1),
                               transfer_share=xfer, recv_wait_share=recv, decode_kv_short_share=short,
                               decode_seq_full_share=full)
    assert cand.split is not None
    m = _metrics(req, res.steps, pre, b.pool_slots * cand.split.decode, ev, tuple(res.roles))
    m["link_util"] = max((lk.utilisation(res.end_s) for lk in res.links.values()), default=0.0)
    m["kv_blocked_per_1k"] = 1000.0 * res.decode_kv_blocked / max(len(res.requests), 1)
    observed = tuple((t, _quantile(req, f"{t.metric}_s", t.quantile)) for t in spec.slo.targets)
    probe = Probe(qps, ev.passed, ev.attainment, ev.attainment_lower, m["ttft_p99"], m["tpot_p99"],
                  time.perf_counter() - t0, res.aborted, observed)
    return probe, m, diag


def as_fleet(res: ClusterResult) -> FleetResult:
    """A cluster run in the shape of a routed replay (requests with ``replica`` = instance,
    steps and preemptions per instance), for the planner's validation."""
    req = res.requests
    n = len(res.names)
    inst = req["instance"].to_numpy(np.int64)
    ok = inst >= 0
    pre = np.bincount(inst[ok], weights=req["num_preemptions"].to_numpy(np.float64)[ok], minlength=n)
    steps = [res.steps[res.steps["instance"] == k].drop(columns="instance").reset_index(drop=True)
             for k in range(n)]
    return FleetResult(req, steps, [int(p) for p in pre])


def replay_split(task: ValidateTask, n: int, df: pd.DataFrame) -> tuple[SloEval, FleetResult, float]:
    """The full trace through ``n`` xPyD groups (the split counterpart of the routed replay)."""
    t0 = time.perf_counter()
    fleet = as_fleet(run_split(task.candidate, task.base, df, n, "<full trace>"))
    return evaluate(_scheduled_on_prefill(fleet.requests), task.slo), fleet, time.perf_counter() - t0


def split_routers(text: str) -> list[str]:
    """``--router`` as a comma-separated list of router specs; a spec's own options (after its
    ``:``, comma-separated too) stay with it: ``round-robin,kv-aware:prefix=3,queue=2`` is two."""
    out: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if out and part.partition(":")[0] not in POLICIES and ":" in out[-1]:
            out[-1] += "," + part
        else:
            out.append(part)
    for r in out:
        parse_router(r)
    return out


def _role(text: str, part: str, role: str, spec: str, flag: str) -> Kw:
    """One role of ``xPyD:PREFILL/DECODE``: a TP (``2``), a catalog GPU (``h200``) or both
    (``h200x2``: that GPU at TP 2), as config overrides."""
    rp = spec.strip().lower()
    gpu, tp = None, None
    if rp.isdigit():
        tp = int(rp)
    elif rp in gpu_catalog():
        gpu = rp
    elif (m := _ROLE.match(rp)) and m[1] in gpu_catalog():
        gpu, tp = m[1], int(m[2])
    else:
        raise ConfigError(f"{flag} {text!r}: {part!r}: {role} {spec!r}: expected a TP (2), a catalog GPU (h200) or "
                          f"GPUxTP (h200x2); catalog: {', '.join(gpu_catalog())}")
    if tp is not None and tp < 1:
        raise ConfigError(f"{flag} {text!r}: {part!r}: needs >= 1 prefill and >= 1 decode instance, TP >= 1")
    return (*((("gpu", gpu),) if gpu else ()), *((("tensor_parallel_size", tp),) if tp is not None else ()))


def parse_splits(text: str, routers: list[str], link: str = "rdma-ndr", link_gbps: float | None = None,
                 flag: str = "--disagg", threshold: int = 0) -> list[Split]:
    """``--disagg`` items, comma-separated: ``xPyD`` (e.g. ``1P3D``: GPU and TP as the grid's),
    ``xPyD:P/D`` with each role a TP, a GPU or GPUxTP (``1P3D:2/1`` TP per role,
    ``1P3D:h200/h100`` a GPU per role, ``1P3D:h200x2/h100x1`` both), or ``N`` (every split of N
    instances, ``1P(N-1)D`` .. ``(N-1)P1D``); each once per router of ``routers``. ``threshold``:
    llm-d's PD threshold (uncached prompts shorter than it prefill on their decode instance)."""
    groups: list[tuple[int, int, Kw, Kw]] = []
    for part in (p.strip() for p in text.split(",")):
        if part.isdigit():
            n = int(part)
            if n < 2:
                raise ConfigError(f"{flag} {text!r}: {part!r}: an xPyD split needs at least 2 instances "
                                  "(1 prefill + 1 decode)")
            groups += [(x, n - x, (), ()) for x in range(1, n)]
            continue
        m = _SPLIT.match(part)
        if m is None:
            raise ConfigError(f"{flag} {text!r}: {part!r}: expected xPyD (e.g. 1P3D), xPyD:P/D with a TP, GPU or "
                              "GPUxTP per role (e.g. 1P3D:2/1, 1P3D:h200/h100, 1P3D:h200x2/h100x1) or an instance "
                              "count N >= 2")
        x, y = int(m[1]), int(m[2])
        if x < 1 or y < 1:
            raise ConfigError(f"{flag} {text!r}: {part!r}: needs >= 1 prefill and >= 1 decode instance, TP >= 1")
        kw = (_role(text, part, "prefill", m[3], flag), _role(text, part, "decode", m[4], flag)) if m[3] else ((), ())
        groups.append((x, y, *kw))
    if threshold < 0:
        raise ConfigError(f"--pd-threshold {threshold}: must be >= 0 (prompt tokens)")
    for r in routers:
        parse_router(r)  # a bad spec: one line naming --router
    try:
        link_kind(link)
    except ConfigError as e:
        raise ConfigError(f"--link {link!r}: {str(e).partition(': ')[2]}") from None
    return [Split(x, y, r, link, link_gbps, kw_p, kw_d, threshold)
            for x, y, kw_p, kw_d in dict.fromkeys(groups) for r in routers]
