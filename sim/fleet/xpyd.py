"""Unified fleets vs xPyD splits: goodput per GPU-dollar under TTFT/TPOT SLOs.

For one trace, model and GPU, each candidate -- ``unified N`` or ``xPyD`` (``x`` prefill and
``y`` decode instances, ``x + y = N`` at the same TP) -- is replayed on the cluster runtime
(:mod:`sim.cluster.disagg`) at increasing request rates (the trace's arrivals compressed). Its
**goodput** is the highest rate whose joint attainment (share of requests meeting every SLO
threshold, DistServe's definition) is at least ``attainment``; per GPU-dollar it is requests per dollar:
``goodput x 3600 / (N x TP x price per GPU-hour)``. The binding constraint of the first failing rate names what broke:
``ttft``/``tpot`` for the SLO, ``link-bandwidth`` when transfers take more than a quarter of
the p90 TTFT, ``decode-kv-receive`` when some pulls waited for free decode blocks while the
decode pool was short (``seq-cap`` when its batch was full instead).

Every candidate, unified and each split, searches the same knob grid as ``plan --disagg``
(:mod:`sim.fleet.tuning`: ``max_num_batched_tokens`` in {2,048, 8,192} x ``max_num_seqs`` in
{default, 2x}, applied to every instance of both roles): a split measured at its best knobs
against a unified fleet at vLLM's defaults overstates the split (issue 50). A candidate's
goodput is the best over its settings, and its row names the winning setting and the goodput
at the defaults beside it.

Caveats (also in reports/disaggregation.md): rates on a grid (``--rates``), not a bisection;
one seed; link latencies are unverified estimates; both roles share one knob setting; the
step-cost model of the GPU applies to both roles.

    python -m sim.fleet.xpyd TRACE --model llama-3.1-8b --gpu h200 --gpus 4 [--out CSV] [--grid-out CSV]
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sim.cluster.disagg import ClusterResult, run_cluster
from sim.cluster.spec import parse_cluster
from sim.config.schema import make_config
from sim.errors import ConfigError
from sim.fleet.binding import SHARE, decode_pressure
from sim.fleet.tuning import tuned_knobs
from sim.fleet.workload import scale_rate, to_trace
from sim.fleet.xpyd_table import markdown
from sim.model.catalog import resolve_gpu
from sim.run.static import static_parts
from workloads import load_trace
from workloads.schema import Trace


@dataclass(frozen=True, slots=True)
class SloPair:
    name: str
    ttft_s: float
    tpot_s: float
    attainment: float = 0.9


TIGHT = SloPair("tight", 0.3, 0.03)
LOOSE = SloPair("loose", 2.0, 0.15)


def splits(n: int) -> list[tuple[int, int]]:
    """(0, n) = unified n; (x, n - x) for x = 1..n-1 prefill instances."""
    return [(0, n), *((x, n - x) for x in range(1, n))]


def cluster_for(x: int, y: int, base: dict[str, Any], link: str | dict[str, Any], router: str, threshold: int,
                roles: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The cluster mapping (:func:`sim.cluster.spec.parse_cluster`) of ``unified y`` (x = 0) or
    ``xPyD``; ``link`` a links.yaml kind or a link mapping; ``roles``: config per role over ``base``."""
    roles = roles or {}
    if x == 0:
        inst = [{"name": "u", "role": "unified", "count": y, "config": roles.get("unified", {})}]
    else:
        inst = [{"name": "p", "role": "prefill", "count": x, "config": roles.get("prefill", {})},
                {"name": "d", "role": "decode", "count": y, "config": roles.get("decode", {})}]
    return {"router": router, "prefill_router": "least-outstanding-tokens", "flow": "decode-first",
            "threshold": threshold, "defaults": base, "instances": inst,
            "links": {"default": {"kind": link} if isinstance(link, str) else link}}


def attainment(req: pd.DataFrame, slo: SloPair) -> float:
    done = (req["status"] == "finished").to_numpy()
    tpot = req["tpot_s"].to_numpy(np.float64)
    ok = done & (req["ttft_s"].to_numpy(np.float64) <= slo.ttft_s) & (np.nan_to_num(tpot, nan=0.0) <= slo.tpot_s)
    return float(ok.mean()) if len(ok) else 0.0


def binding(res: ClusterResult, slo: SloPair, max_num_seqs: int = 1 << 30) -> str:
    """The label of a failing run; pulls that waited name the decode pool only when it was short
    (``seq-cap`` when the decode batch sat at ``max_num_seqs`` instead, sim/fleet/binding.py)."""
    req = res.requests[res.requests["status"] == "finished"]
    if res.decode_kv_blocked > 0.05 * max(len(req), 1):
        dec = [k for k, r in enumerate(res.roles) if r == "decode"]
        short, full = decode_pressure(res.steps[res.steps["instance"].isin(dec)], max_num_seqs)
        if short >= SHARE:
            return "decode-kv-receive"
        if full >= SHARE:
            return "seq-cap"
    if req["transfer_s"].notna().any() and req["transfer_s"].quantile(0.9) > 0.25 * req["ttft_s"].quantile(0.9):
        return "link-bandwidth"
    ttft_ok = (req["ttft_s"] <= slo.ttft_s).mean()
    tpot_ok = (req["tpot_s"].fillna(0.0) <= slo.tpot_s).mean()
    return "ttft" if ttft_ok <= tpot_ok else "tpot"


def knob_grid(base: dict[str, Any], knobs: dict[str, list[Any]] | None = None) -> list[dict[str, int]]:
    """The batch-limit settings every candidate searches: ``plan --disagg``'s grid
    (:func:`sim.fleet.tuning.tuned_knobs`), one dict per (max_num_batched_tokens, max_num_seqs)."""
    grid = tuned_knobs(base, knobs or {}, str(base.get("gpu", "h100")))
    return [{"max_num_batched_tokens": int(t), "max_num_seqs": int(s)}
            for t, s in itertools.product(grid["max_num_batched_tokens"], grid["max_num_seqs"])]


def _runs(trace: Trace, cluster: dict[str, Any], slos: Sequence[SloPair], rates: Sequence[float]
          ) -> list[tuple[float, ClusterResult]]:
    """The runs at increasing rates, stopping once every SLO has failed at some rate (a higher
    rate cannot change any goodput: it is the highest rate below the first failure)."""
    runs, failed = [], set()
    for f in rates:
        res = run_cluster(parse_cluster(cluster), to_trace(scale_rate(trace.df, f)))
        runs.append((f, res))
        failed |= {s.name for s in slos if attainment(res.requests, s) < s.attainment}
        if len(failed) == len(slos):
            break
    return runs


def _row(runs: list[tuple[float, ClusterResult]], slo: SloPair, mns: int, qps_per_factor: float,
         usd_h: float) -> dict[str, Any]:
    """One (candidate, knobs, SLO) row: goodput, per GPU-dollar, the TTFT parts at the goodput
    rate, the binding label and joint attainment at the first failing rate (the tie-break)."""
    best, best_res, fail, above = 0.0, None, "", 1.0
    for f, res in runs:
        att = attainment(res.requests, slo)
        if att >= slo.attainment:
            best, best_res = f, res
        else:
            fail, above = binding(res, slo, mns), att
            break
    qps = best * qps_per_factor
    row: dict[str, Any] = {"goodput_qps": qps, "requests_per_gpu_dollar": qps * 3600 / usd_h,
                           "binding": fail or "none in grid", "attainment_above": above}
    if best_res is not None:
        ok = best_res.requests[best_res.requests["status"] == "finished"]
        row.update(ttft_p90_s=ok["ttft_s"].quantile(0.9), tpot_p90_s=ok["tpot_s"].quantile(0.9),
                   transfer_p90_s=ok["transfer_s"].quantile(0.9) if ok["transfer_s"].notna().any() else 0.0,
                   kv_wait_p90_s=ok["kv_wait_s"].quantile(0.9) if ok["kv_wait_s"].notna().any() else 0.0)
    return row


def search(trace: Trace, base: dict[str, Any], n: int, slos: Sequence[SloPair], rates: Sequence[float],
           link: str = "rdma-ndr", router: str = "kv-aware", threshold: int = 0,
           knobs: dict[str, list[Any]] | None = None) -> pd.DataFrame:
    """One row per (candidate, knob setting, SLO): every candidate, unified and each split, runs
    the same :func:`knob_grid` (the knobs apply to every instance of both roles)."""
    gpu = resolve_gpu(str(base.get("gpu", "h100")))
    usd_h = n * int(base.get("tensor_parallel_size", 1)) * gpu.price.typical
    qps_per_factor = (len(trace.df) - 1) / float(trace.df["arrival_s"].iloc[-1] - trace.df["arrival_s"].iloc[0])
    rows = []
    for x, y in splits(n):
        for kn in knob_grid(base, knobs):
            runs = _runs(trace, cluster_for(x, y, base | kn, link, router, threshold), slos, rates)
            for slo in slos:
                rows.append({"candidate": "unified" if x == 0 else f"{x}P{y}D", "slo": slo.name, **kn,
                             **_row(runs, slo, kn["max_num_seqs"], qps_per_factor, usd_h),
                             "lowest_qps": min(rates) * qps_per_factor})
    return pd.DataFrame(rows)


def defaults(base: dict[str, Any]) -> dict[str, int]:
    """The batch limits ``base`` runs with untuned (as set, else vLLM's defaults for its GPU)."""
    kv = static_parts(make_config("study", **base))[1]
    return {"max_num_batched_tokens": kv.max_num_batched_tokens, "max_num_seqs": kv.max_num_seqs}


def best(rows: pd.DataFrame, untuned: dict[str, int]) -> pd.DataFrame:
    """Per (candidate, SLO) the searched setting with the highest goodput (ties, common on a
    rate grid: the higher attainment at the first failing rate, then ``untuned`` -- a knob that
    changes nothing is not reported as tuned -- then grid order), with the goodput at
    ``untuned`` beside it and how many settings were searched."""
    out = []
    is_untuned = (rows["max_num_batched_tokens"] == untuned["max_num_batched_tokens"]) & (
        rows["max_num_seqs"] == untuned["max_num_seqs"])
    for _, g in rows.assign(untuned=is_untuned).groupby(["candidate", "slo"], sort=False):
        top = g.sort_values(["goodput_qps", "attainment_above", "untuned"], ascending=False, kind="stable").iloc[0]
        at = g[g["untuned"]]["goodput_qps"]
        out.append(top.drop("untuned").to_dict() | {"settings": len(g),
                   "goodput_untuned_qps": float(at.iloc[0]) if len(at) else float("nan")})
    return pd.DataFrame(out)


def study(trace: Trace, base: dict[str, Any], n: int, slos: Sequence[SloPair], rates: Sequence[float],
          link: str = "rdma-ndr", router: str = "kv-aware", threshold: int = 0) -> pd.DataFrame:
    """One row per (candidate, SLO): goodput (rate factor x the trace's rate) at the candidate's
    best knob setting (named in the row), per GPU-dollar, the TTFT breakdown at the goodput
    rate and the binding constraint just above it."""
    return best(search(trace, base, n, slos, rates, link, router, threshold), defaults(base))


def _slos(text: str) -> list[SloPair]:
    """``--slos`` (``name:TTFT_S:TPOT_S,...``)."""
    try:
        return [SloPair(n, float(t), float(p)) for n, t, p in (x.split(":") for x in text.split(","))]
    except ValueError:
        raise ConfigError(f"--slos {text!r}: expected name:TTFT_S:TPOT_S,... (e.g. tight:0.3:0.03)") from None


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--gpus", type=int, default=4)
    ap.add_argument("--head", type=int, default=0, help="first N requests only")
    ap.add_argument("--rates", default="1,2,4,8,16,32")
    ap.add_argument("--max-model-len", type=int, default=8192)
    ap.add_argument("--slos", default="tight:0.3:0.03,loose:2:0.15", help="name:TTFT_S:TPOT_S,...")
    ap.add_argument("--out", type=Path, default=None, help="CSV: one row per candidate x SLO (tuned)")
    ap.add_argument("--grid-out", type=Path, default=None, help="CSV: every knob setting searched")
    a = ap.parse_args(argv)
    try:
        slos, rates = _slos(a.slos), [float(r) for r in a.rates.split(",")]
    except (ConfigError, ValueError) as e:
        ap.error(str(e))
    tr = load_trace(a.trace)
    if a.head:
        tr = to_trace(tr.df.head(a.head).reset_index(drop=True))
    base = {"model": a.model, "gpu": a.gpu, "max_model_len": a.max_model_len}
    print(f"cost model: {static_parts(make_config('study', **base))[2].name}")
    t0 = time.perf_counter()
    rows = search(tr, base, a.gpus, slos, rates)
    df = best(rows, defaults(base))
    print(f"wall time: {time.perf_counter() - t0:.1f} s ({len(rows) // len(slos)} candidate x knob settings)")
    print(df.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(markdown(df, defaults(base)))
    for path, frame in ((a.out, df), (a.grid_out, rows)):
        if path:
            path.parent.mkdir(parents=True, exist_ok=True)
            frame.to_csv(path, index=False)


if __name__ == "__main__":
    main()
