"""The vLLM paper's Fig. 2 (KV memory waste per system), reproduced.

Setup (paper-baselines.md s1-s5): OPT-13B on one A100-40GB, 12 GiB of KV (15,728 slots),
ShareGPT-like lengths with the paper's Fig. 11 means, four systems: Orca Max/Pow2/Oracle on
the buddy slab and paged with block 16. The simulator is run as is; nothing is tuned here.

The experiment (workload, runs, table, Markdown) lives here, out of the CLI, so a notebook or
a test can run it; ``kvsim report paper-fig2`` (``sim/cli/report.py``) only wires the flags.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sim.config.schema import make_config
from sim.plots import breakdown_bars, save
from sim.plots.common import RunInfo
from sim.run.simulate import SimResult, simulate
from workloads import Trace

MEAN_IN, MEAN_OUT, MAX_LEN = 161.31, 337.99, 2048       # Fig. 11 ShareGPT; OPT max length
SIGMA_IN, SIGMA_OUT = 1.2, 1.0                          # log-std (assumption, see report)
BASE: dict[str, Any] = dict(model="opt-13b", gpu="a100-40gb", kv_memory="12GiB", max_model_len=MAX_LEN,
                            preset="paper-v0", cost_model="roofline")
# Slabs never share memory, but paper-v0's default ``sharing=fork-cow`` is refused with the slab
# allocator by sim.run.simulate.build, so the (inert) switch is set explicitly for the Orca systems.
_SLAB: dict[str, Any] = dict(allocator="slab", sharing="prefix-cache")
SYSTEMS: dict[str, dict[str, Any]] = {
    "Orca (Max)": dict(_SLAB, reservation="max"),
    "Orca (Pow2)": dict(_SLAB, reservation="pow2"),
    "Orca (Oracle)": dict(_SLAB, reservation="oracle"),
    "vLLM (paged, block 16)": dict(allocator="paged", block_size=16),
}
#: Fig. 2 labels (token states, reservation, internal, external & others), percent
PAPER: dict[str, tuple[float, float | None, float | None, float | None]] = {
    "Orca (Max)": (20.4, 13.3, 57.3, 8.9), "Orca (Pow2)": (26.8, 17.9, 13.6, 41.6),
    "Orca (Oracle)": (38.2, 25.2, None, 36.6), "vLLM (paged, block 16)": (96.3, None, None, None),
}


def _fit_mu(z: np.ndarray, sigma: float, target: float, cap: np.ndarray) -> np.ndarray:
    """Lengths ``clip(round(exp(mu + sigma z)), 1, cap)`` with mu bisected so the mean hits target."""
    lo, hi = -5.0, 12.0
    for _ in range(80):
        mu = (lo + hi) / 2
        x = np.clip(np.rint(np.exp(mu + sigma * z)), 1, cap)
        lo, hi = (mu, hi) if x.mean() < target else (lo, mu)
    return np.clip(np.rint(np.exp((lo + hi) / 2 + sigma * z)), 1, cap).astype(np.int64)


def sharegpt_like(n: int, rate: float, seed: int) -> Trace:
    """Seeded log-normal lengths with Fig. 11's means, prompt+output <= 2048, Poisson arrivals."""
    rng = np.random.default_rng(seed)
    z_in, z_out = rng.standard_normal(n), rng.standard_normal(n)
    prompt = _fit_mu(z_in, SIGMA_IN, MEAN_IN, np.full(n, MAX_LEN // 2))
    output = _fit_mu(z_out, SIGMA_OUT, MEAN_OUT, MAX_LEN - prompt)
    arrival = np.cumsum(rng.exponential(1.0 / rate, n))
    df = pd.DataFrame({"arrival_s": arrival - arrival[0], "prompt_tokens": prompt, "output_tokens": output,
                       "request_id": [str(i) for i in range(n)]})
    return Trace(df=df, path=f"sharegpt-like-synthetic(n={n},rate={rate:g},seed={seed})", format="synthetic")


def _saturated(res: SimResult) -> dict[str, float]:
    """Time-averaged shares over steps with a non-empty queue (the pool is the bottleneck)."""
    st = res.steps[res.steps["num_waiting"] > 0]
    if not len(st):
        return {}
    w = st["duration_s"].to_numpy()
    cols = ["token_state_slots", "reserved_slots", "internal_frag_slots", "external_frag_slots", "free_slots"]
    pool = st[cols].sum(axis=1).to_numpy()
    return {c.removesuffix("_slots"): float(np.average(st[c].to_numpy() / pool, weights=w)) for c in cols}


def _queue_share(res: SimResult) -> float:
    st = res.steps
    w = st["duration_s"].to_numpy()
    return float(w[st["num_waiting"].to_numpy() > 0].sum() / w.sum()) if w.sum() else 0.0


def run_fig2(n: int, rate: float, seed: int) -> tuple[Trace, dict[str, SimResult]]:
    tr = sharegpt_like(n, rate, seed)
    return tr, {name: simulate(make_config("paper-fig2", **BASE, **kw), tr) for name, kw in SYSTEMS.items()}


def _pct(x: float | None) -> str:
    return "n/a" if x is None or not np.isfinite(x) else f"{x:.1f}"


def table(results: dict[str, SimResult]) -> pd.DataFrame:
    rows = []
    for name, res in results.items():
        m, sat = res.summary.memory, _saturated(res)
        p = PAPER[name]
        rows.append({
            "system": name, "token_states": 100 * m["token_state"], "reservation": 100 * m["reserved"],
            "internal_frag": 100 * m["internal_frag"], "external_frag": 100 * m["external_frag"],
            "free": 100 * m["free"], "token_states_saturated": 100 * sat.get("token_state", np.nan),
            "external_frag_saturated": 100 * sat.get("external_frag", np.nan),
            "free_saturated": 100 * sat.get("free", np.nan),
            "paper_token_states": p[0], "paper_reservation": p[1], "paper_internal_frag": p[2],
            "paper_external_and_others": p[3], "throughput_rps": res.summary.throughput.requests_per_s,
            "queue_time_share": 100 * _queue_share(res), "preemptions": res.summary.preemptions, "num_rejected": res.summary.num_rejected,
        })
    return pd.DataFrame(rows)


def markdown(tr: Trace, results: dict[str, SimResult], tab: pd.DataFrame, rate: float, seed: int) -> str:
    df = tr.df
    any_res = next(iter(results.values()))
    budget = any_res.summary.budget
    lines = [
        "# vLLM paper Fig. 2, reproduced with kvsim",
        "",
        "Generated by `kvsim report paper-fig2`. Nothing in the simulator was tuned toward these numbers.",
        "",
        "## Setup",
        "",
        f"- Model OPT-13B on 1x A100-40GB, `--kv-memory 12GiB`: {budget['available_kv_bytes'] // budget['bytes_per_token']:,} "
        f"token slots ({budget['bytes_per_token'] // 1024} KiB per token), `max_model_len` {MAX_LEN}, preset `paper-v0` "
        "(no chunked prefill, FCFS, recompute preemption), cost model `" + any_res.summary.cost_model + "`.",
        f"- Trace: **synthetic**, made by this command with a seeded `numpy.random.Generator` (seed {seed}); the "
        "workloads generators and the ShareGPT length file were not used. "
        f"{len(df):,} requests, Poisson arrivals at {rate:g} req/s. Log-normal lengths, log-std {SIGMA_IN} (prompt) "
        f"and {SIGMA_OUT} (output) -- an assumption, since the paper gives only means -- with the location fitted so the "
        f"means match Fig. 11: prompt mean **{df['prompt_tokens'].mean():.2f}** (paper 161.31), output mean "
        f"**{df['output_tokens'].mean():.2f}** (paper 337.99); prompt <= 1024 and prompt + output <= 2048.",
        "- Systems: Orca Max / Pow2 / Oracle = `allocator=slab, reservation=max|pow2|oracle` (buddy placement; the "
        "15,728-slot pool split into power-of-two buddy trees), vLLM = `allocator=paged, block_size=16`.",
        "- Shares are time-averaged over the whole run (step durations as weights). kvsim's five categories map to "
        "the paper's four as: external fragmentation & others = buddy rounding + holes + free pool. A hole is free "
        "memory that cannot be used for the request at the head of the queue (a free buddy block smaller than the "
        "chunk it needs, `sim/kv/slab.py`); while nothing waits there are no holes.",
        "",
        "![Fig. 2 reproduced](fig2.png)",
        "",
        "## Our numbers beside the paper's (% of the KV pool)",
        "",
        "| system | token states (ours) | token states, queue non-empty (ours) | token states (paper) | reservation ours / paper "
        "| internal frag. ours / paper | external frag. ours, run / queue non-empty | external & others ours / paper "
        "| time with a queue (ours, %) | throughput (req/s) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for _, r in tab.iterrows():
        lines.append(
            f"| {r['system']} | **{r['token_states']:.1f}** | {r['token_states_saturated']:.1f} | "
            f"**{r['paper_token_states']:.1f}** | {r['reservation']:.1f} / {_pct(r['paper_reservation'])} | "
            f"{r['internal_frag']:.1f} / {_pct(r['paper_internal_frag'])} | "
            f"{r['external_frag']:.1f} / {_pct(r['external_frag_saturated'])} | "
            f"{r['external_frag'] + r['free']:.1f} / {_pct(r['paper_external_and_others'])} | "
            f"{r['queue_time_share']:.0f} | {r['throughput_rps']:.3f} |")
    lines += ["", "## The gaps, explained", "", *GAPS, *measured_gaps(tab), ""]
    return "\n".join(lines)


GAPS = [
    "- **The workload is not the paper's.** Only the Fig. 11 means are published; our lengths are log-normal with "
    "assumed spreads. Buddy rounding and Pow2 reservation depend on the whole length distribution (where lengths "
    "fall relative to powers of two), not on the mean, so Pow2's and Oracle's reservation/internal/external split "
    "can move by several points with another spread at the same means.",
    "- **Load and the time window.** The paper does not state the request rate or the averaging window behind Fig. 2. "
    "Whenever the queue is empty (start-up, the drain after the last arrival, or a light load), the unused pool is "
    "counted as free, which lowers every category except external & others. The column 'queue non-empty' shows the "
    "share while requests are waiting, i.e. while the allocator is the bottleneck; it is the closer analogue of the "
    "paper's setting.",
    "- **What counts as a token state.** kvsim counts a slot as a token state once its KV is computed (the prompt "
    "after prefill, plus generated tokens); slots for the request's not-yet-generated tokens are reservation. That "
    "follows the paper's definitions (s3, Fig. 3), but the paper does not say when it samples; we weight each step's "
    "end state by the step's duration.",
    "- **vLLM's remaining share.** Paged waste is the unfilled tail of each request's last block (at most 15 slots of "
    "~500) plus blocks left free because the next request does not fit (free, not holes: any block serves any "
    "request), and the free pool while the queue is empty. "
    "With `paper-v0`'s 1% watermark a few blocks also stay free by design. The paper itemizes only token states "
    "(96.3%); our whole-run number is lower because at this rate paged serving keeps up for much of the run (see 'time with a queue'): "
    "the pool is then partly free. The queue-non-empty number is the comparable figure.",
    "- **Cost model.** The roofline cost model is uncalibrated for A100; it changes how long each state lasts "
    "(prefill vs decode time), hence the time weights, but not the allocator's accounting.",
]


def measured_gaps(tab: pd.DataFrame) -> list[str]:
    """The gap bullets that quote this run's numbers."""
    t = tab.set_index("system")
    mx = t.loc["Orca (Max)"]
    free_q = " and ".join(f"{_pct(t.loc[n, 'free_saturated'])}%" for n in ("Orca (Pow2)", "Orca (Oracle)"))
    return [
        "- **Orca Max.** Reserving 2,048 slots per request admits at most 7 requests at a time (15,728 / 2,048); the "
        "buddy tree of 8,192 + 4,096 + 2,048 + ... slots leaves the 1,024-and-smaller trees (1,392 slots, 8.9% of the "
        "pool) unusable for a 2,048-slot chunk. They are holes only while a request waits for a chunk, so our external "
        f"share ({_pct(mx['external_frag'])}% over the run, {_pct(mx['external_frag_saturated'])}% while requests "
        "wait) is to be read against the paper's 8.9%.",
        "- **External fragmentation is measured against the waiting request.** A free region counts as a hole when the "
        "request at the head of the queue cannot use it; when the queue is empty it counts as free. While requests "
        f"wait, Pow2's and Oracle's free share is {free_q}; the rest of the memory no chunk holds is buddy rounding "
        "or blocks smaller than the chunk the head needs. The paper does not say against which request it measured.",
    ]


def write_report(out: Path, requests: int, rate: float, seed: int) -> pd.DataFrame:
    """Run the four systems and write README.md, fig2.png/.svg, fig2_table.csv and
    summaries.json under ``out``; return the table."""
    tr, results = run_fig2(requests, rate, seed)
    tab = table(results)
    out.mkdir(parents=True, exist_ok=True)
    entries: list[tuple[str, dict[str, float]]] = []
    for name, res in results.items():
        entries.append((f"{name}\nkvsim", res.summary.memory))
        p = PAPER[name]
        entries.append((f"{name}\npaper", {"token_state": p[0] / 100, "reserved": (p[1] or 0) / 100,
                                           "internal_frag": (p[2] or 0) / 100, "external_frag": (p[3] or 0) / 100,
                                           "free": (100 - sum(v or 0 for v in p)) / 100}))
    info = RunInfo("ShareGPT-like synthetic", "OPT-13B", "1x A100-40GB (12 GiB KV)", next(iter(results.values())).cost_model)
    fig = breakdown_bars(entries, info, what="vLLM paper Fig. 2: KV memory by category, kvsim vs paper "
                                            "(paper's vLLM remainder and 'others' shown as free/external)")
    save(fig, out / "fig2")
    tab.to_csv(out / "fig2_table.csv", index=False)
    (out / "summaries.json").write_text(json.dumps({k: {kk: v.summary.to_json()[kk] for kk in ("memory", "throughput",
                                                        "preemptions", "num_rejected", "config")}
                                                    for k, v in results.items()}, indent=2, default=str))
    (out / "README.md").write_text(markdown(tr, results, tab, rate, seed))
    return tab
