"""The report's tables for the current-era stacks (``vllm-v1``, ``vllm-0.6``), read from the committed
``calibration/data/stacks.yaml`` (``kvsim calibrate fit`` writes them; nothing is refitted here)."""

from __future__ import annotations

from statistics import median as med
from typing import Any


def _e(pred: float, meas: float) -> str:
    return "-" if pred != pred else f"{100 * (pred / meas - 1):+.1f}%"


def v1_tables(s: dict[str, Any]) -> list[str]:
    rows = s["stages"]
    out = ["| stage (model, TP, rate) | E2E measured | fitted | err | held out | err | TTFT measured | fitted | err "
           "| held out | err | decode ms/token measured | fitted |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(
            f"| {r['stage'].split('-', 2)[-1]} | {r['e2e_measured_s']:.3f} s | {r['e2e_fitted_s']:.3f} s | "
            f"{_e(r['e2e_fitted_s'], r['e2e_measured_s'])} | {r['e2e_heldout_s']:.3f} s | "
            f"{_e(r['e2e_heldout_s'], r['e2e_measured_s'])} | {r['ttft_measured_s'] * 1e3:.1f} ms | "
            f"{r['ttft_fitted_s'] * 1e3:.1f} ms | {_e(r['ttft_fitted_s'], r['ttft_measured_s'])} | "
            f"{r['ttft_heldout_s'] * 1e3:.1f} ms | {_e(r['ttft_heldout_s'], r['ttft_measured_s'])} | "
            f"{r['dtpt_measured_ms']:.2f} | {r['dtpt_fitted_ms']:.2f} |")
    fe = [abs(r["e2e_fitted_s"] / r["e2e_measured_s"] - 1) * 100 for r in rows]
    he = [abs(r["e2e_heldout_s"] / r["e2e_measured_s"] - 1) * 100 for r in rows]
    ft = [abs(r["ttft_fitted_s"] / r["ttft_measured_s"] - 1) * 100 for r in rows]
    ht = [abs(r["ttft_heldout_s"] / r["ttft_measured_s"] - 1) * 100 for r in rows]
    out += ["", f"Median |error| over the {len(rows)} stages: E2E {med(fe):.1f}% fitted, {med(he):.1f}% held out "
                f"(max {max(fe):.1f}% / {max(he):.1f}%); TTFT {med(ft):.1f}% fitted, {med(ht):.1f}% held out "
                f"(max {max(ft):.1f}% / {max(ht):.1f}%)."]
    if all("e2e_nofit_s" in r for r in rows):
        ne = [abs(r["e2e_nofit_s"] / r["e2e_measured_s"] - 1) * 100 for r in rows]
        nt = [abs(r["ttft_nofit_s"] / r["ttft_measured_s"] - 1) * 100 for r in rows]
        out += ["", f"Leave the source out (nothing fitted on it: the kernel tables at multiplier 1, no stack "
                    f"overheads, the API server's priors): median |error| E2E {med(ne):.1f}% (max {max(ne):.1f}%), "
                    f"TTFT {med(nt):.1f}% (max {max(nt):.1f}%)."]
    out += _v1_regimes(s)
    over = s.get("overloaded") or []
    if over:
        out += ["", "| overloaded stage | sent | failed (measured) | served / offered req/s (measured) | "
                    "simulated: overloaded? | simulated queue wait, last quarter of arrivals |", "|---|---:|---:|---:|---|---:|"]
        for o in over:
            out.append(f"| {o['stage'].split('-', 2)[-1]} | {o['sent']} | {o['measured_failures']} | "
                       f"{o['measured_served_rate']:.2f} / {o['rate']:g} | {'yes' if o['sim_overloaded'] else 'no'} | "
                       f"{o['sim_queue_wait_last_quarter_s']:.1f} s |")
    return out


def _v1_regimes(s: dict[str, Any]) -> list[str]:
    """Per regime: the held-out and no-fit median |E2E| and |TTFT| errors, and how many held-out
    stages fell inside the stack's E2E band (coverage)."""
    rows, band = s["stages"], s.get("band_e2e") or {}
    if not band or not all("e2e_nofit_s" in r for r in rows):
        return []
    lo, hi = band["optimistic"], band["pessimistic"]
    groups = {"low load (<= 10 req/s)": [r for r in rows if r["rate"] <= 10],
              "high load (20 req/s)": [r for r in rows if r["rate"] > 10],
              "TP 1": [r for r in rows if r["tp"] == 1], "TP > 1": [r for r in rows if r["tp"] > 1]}
    out = ["", f"By regime (E2E band {100 * lo:+.1f}% / {100 * hi:+.1f}%; long uncached prompts and MoE: no "
               "vllm-v1 data, see vllm-0.6 below):", "",
           "| regime | stages | E2E held out | E2E no fit | TTFT held out | TTFT no fit | E2E band coverage |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for name, g in groups.items():
        if not g:
            continue
        err = {k: [abs(r[f"{k}_s"] / r[f"{k.split('_')[0]}_measured_s"] - 1) * 100 for r in g]
               for k in ("e2e_heldout", "e2e_nofit", "ttft_heldout", "ttft_nofit")}
        inside = sum(lo <= r["e2e_measured_s"] / r["e2e_heldout_s"] - 1 <= hi for r in g)
        out.append(f"| {name} | {len(g)} | {med(err['e2e_heldout']):.1f}% | {med(err['e2e_nofit']):.1f}% | "
                   f"{med(err['ttft_heldout']):.1f}% | {med(err['ttft_nofit']):.1f}% | {inside} / {len(g)} |")
    return out


def v06_tables(s: dict[str, Any]) -> list[str]:
    out = ["| GPU | regime | held-out MAPE | (mean signed) | n | train MAPE | n |", "|---|---|---:|---:|---:|---:|---:|"]
    train = {(r["gpu"], r["regime"]): r for r in s["train"]}
    for r in s["heldout"]:
        t = train.get((r["gpu"], r["regime"]))
        out.append(f"| {r['gpu']} | {r['regime']} | {r['mape']:.1f}% | {r['signed']:+.1f}% | {r['n']} | "
                   + (f"{t['mape']:.1f}% | {t['n']} |" if t else "- | 0 |"))
    out += ["", "Leave one model out (fit on every row of the other dense models' training lengths, predict all "
                "rows of this one):", "", "| model left out | MAPE | n |", "|---|---:|---:|"]
    out += [f"| {r['model']} | {r['mape']:.1f}% | {r['n']} |" for r in s["leave_one_model_out"]]
    moe = s.get("moe_heldout") or []
    if moe:
        out += ["", "MoE, never fitted (Mixtral-8x7B through the MoE path of `sim/cost/moe.py`):", "",
                "| GPU | TP | MAPE | (mean signed) | n |", "|---|---:|---:|---:|---:|"]
        out += [f"| {r['gpu']} | {r['tp']} | {r['mape']:.1f}% | {r['signed']:+.1f}% | {r['n']} |" for r in moe]
    return out


def coefficient_table(stacks: dict[str, Any]) -> list[str]:
    out = ["| stack | engine | eta (fixed) | eta_tok | eta_attn | cpu per step by TP | per seq | prefill step | "
           "CUDA graphs | band (coverage on held-out) |", "|---|---|---:|---:|---:|---|---:|---:|---|---|"]
    for name in ("vllm-v1", "vllm-0.6"):
        s = stacks[name]
        c, b = s["coef"], s["band"]
        by = ", ".join(f"TP {t}: {v['cpu_s'] * 1e3:.2f} ms" for t, v in s["by_tp"].items())
        eta = next(iter(s["by_tp"].values()))["eta"]
        out.append(f"| {name} | {s['engine']} | {eta:.3f} | {c['eta_tok']:.3f} | {c['eta_attn']:.3f} | {by} | "
                   f"{c['per_seq_s'] * 1e6:.1f} µs | {c['prefill_s'] * 1e3:.2f} ms | yes | "
                   f"{b['optimistic'] * 100:+.0f}% / {b['pessimistic'] * 100:+.0f}% ({b.get('coverage_pct', 0):.0f}%) |")
    return out
