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

Caveats (also in reports/disaggregation.md): rates on a grid (factor 2 apart), not a bisection;
one seed; link latencies are unverified estimates; prefill instances run with their own
default batch limits; the step-cost model of the GPU applies to both roles.

    python -m sim.fleet.xpyd TRACE --model llama-3.1-8b --gpu h200 --gpus 4 [--out DIR]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sim.cluster.disagg import ClusterResult, run_cluster
from sim.cluster.spec import parse_cluster
from sim.config.schema import make_config
from sim.fleet.binding import SHARE, decode_pressure
from sim.fleet.workload import scale_rate, to_trace
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


def study(trace: Trace, base: dict[str, Any], n: int, slos: Sequence[SloPair], rates: Sequence[float],
          link: str = "rdma-ndr", router: str = "kv-aware", threshold: int = 0) -> pd.DataFrame:
    """One row per (candidate, SLO): goodput (rate factor x the trace's rate), per GPU-dollar,
    the TTFT breakdown at the goodput rate and the binding constraint just above it."""
    gpu = resolve_gpu(str(base.get("gpu", "h100")))
    tp = int(base.get("tensor_parallel_size", 1))
    base_rate = (len(trace.df) - 1) / float(trace.df["arrival_s"].iloc[-1] - trace.df["arrival_s"].iloc[0])
    mns = static_parts(make_config("study", **base))[1].max_num_seqs
    rows = []
    for x, y in splits(n):
        runs = []
        for f in rates:
            res = run_cluster(parse_cluster(cluster_for(x, y, base, link, router, threshold)),
                              to_trace(scale_rate(trace.df, f)))
            runs.append((f, res))
        for slo in slos:
            best, best_res, fail = 0.0, None, ""
            for f, res in runs:
                if attainment(res.requests, slo) >= slo.attainment:
                    best, best_res = f, res
                else:
                    fail = binding(res, slo, mns)
                    break
            qps = best * base_rate
            usd_h = n * tp * gpu.price.typical
            row: dict[str, Any] = {"candidate": "unified" if x == 0 else f"{x}P{y}D", "slo": slo.name,
                                   "goodput_qps": qps, "requests_per_gpu_dollar": qps * 3600 / usd_h,
                                   "binding": fail or "none in grid"}
            if best_res is not None:
                ok = best_res.requests[best_res.requests["status"] == "finished"]
                row.update(ttft_p90_s=ok["ttft_s"].quantile(0.9), tpot_p90_s=ok["tpot_s"].quantile(0.9),
                           transfer_p90_s=ok["transfer_s"].quantile(0.9) if ok["transfer_s"].notna().any() else 0.0,
                           kv_wait_p90_s=ok["kv_wait_s"].quantile(0.9) if ok["kv_wait_s"].notna().any() else 0.0)
            rows.append(row)
    return pd.DataFrame(rows)


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
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    tr = load_trace(a.trace)
    if a.head:
        tr = to_trace(tr.df.head(a.head).reset_index(drop=True))
    base = {"model": a.model, "gpu": a.gpu, "max_model_len": a.max_model_len}
    slos = [SloPair(n, float(t), float(p)) for n, t, p in (x.split(":") for x in a.slos.split(","))]
    df = study(tr, base, a.gpus, slos, [float(r) for r in a.rates.split(",")])
    print(df.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        df.to_csv(a.out, index=False)


if __name__ == "__main__":
    main()
