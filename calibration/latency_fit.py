"""``kvsim calibrate fit`` on the public sources: operator fits + serving-stack profiles.

    rows   = public end-to-end step times (public_rows.py), with the held-out split
    t_gpu  = each row's kernel time through the simulator's own model (stack_fit.gpu_columns)
    stack  = fit_stack(training rows of that stack's source)      -> calibration/data/stacks.yaml
    errors = held-out rows per regime and TP; leave-one-TP-out; band = held-out p10 / p90

The committed ``stacks.yaml`` records, for every stack, the rows it was fitted on (file, lines
or coefficients, in ``fitted_on``), its coefficients, and the errors below.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from calibration import public_rows as pr
from calibration.era_fit import fit_vllm_06, fit_vllm_v1
from calibration.stack_fit import STACKS, fit_stack, gpu_columns, predict_rows
from calibration.stack_fit import band as make_band
from calibration.transfer import h100_transfer
from sim.cost.stack import SCHEMA, STACKS_PATH, ServingStack

DESCRIPTIONS = {
    "vllm-2023": "vLLM as measured in 2023-24 (CUDA graphs for decode, Ray workers at TP >= 2): DistServe's "
            "vLLM step-time fits for OPT-13B/66B and Vidur's vLLM CPU profiles, DGX-A100",
    "lean": "a low-overhead engine: DistServe's own (C++ kernels and scheduler, no Ray), DistServe's "
            "step-time fits for OPT-13B/66B, DGX-A100",
    "splitwise": "the serving stack behind Splitwise's DGX-A100 table (not named by the source): "
                 "launch-bound, about 0.5 ms of kernel launches per layer; Llama-2-70B TP 2/4/8, BLOOM-176B TP 8",
}


def _mape(pred: np.ndarray, y: np.ndarray) -> float:
    return round(float(np.mean(np.abs(pred - y) / y) * 100), 1)


def errors(d: pd.DataFrame, pred: np.ndarray) -> dict[str, Any]:
    """Held-out MAPE per regime and per TP, p90 APE, n."""
    d = d.assign(pred=pred, ape=np.abs(pred - d["y_s"]) / d["y_s"] * 100)
    by_regime = {r: {"mape_pct": round(float(g["ape"].mean()), 1), "p90_ape_pct": round(float(g["ape"].quantile(0.9)), 1),
                     "n": len(g)} for r, g in d.groupby("regime")}
    by_tp = {int(t): {"mape_pct": round(float(g["ape"].mean()), 1), "n": len(g)} for t, g in d.groupby("tp")}
    return {"by_regime": by_regime, "by_tp": by_tp, "all": {"mape_pct": round(float(d["ape"].mean()), 1), "n": len(d)}}


def stack_doc(name: str, form_th: tuple[Any, np.ndarray], st: ServingStack, d: pd.DataFrame) -> dict[str, Any]:
    train = d[~d["heldout"]]
    return {
        "description": DESCRIPTIONS[name],
        "fitted_on": {"source": f"{STACKS[name]} ({', '.join(sorted(set(r.split(' ')[0] for r in train['ref'])))})",
                      "gpu": pr.GPU, "rows": len(train), "models": sorted(train["model"].unique()),
                      "tps": sorted(int(t) for t in train["tp"].unique()),
                      "refs": sorted(set(train["ref"]))},
        "coef": {"launch_s": float(f"{st.launch_s:.5g}"), "per_seq_s": float(f"{st.per_seq_s:.5g}"),
                 "prefill_s": float(f"{st.prefill_s:.5g}"), "prefill_n2_s": float(f"{st.prefill_n2_s:.5g}")},
        "by_tp": {t: {"cpu_s": float(f"{c:.5g}"), "eta": float(f"{e:.5g}")}
                  for (t, c), (_, e) in zip(st.cpu_s, st.eta, strict=True)},
    }


def leave_one_tp_out(d: pd.DataFrame, cpu: pd.DataFrame | None) -> dict[int, dict[str, Any]]:
    """Fit on every row of the other TP degrees; predict all rows of the one left out."""
    out = {}
    for t in sorted(int(x) for x in d["tp"].unique()):
        rest, left = d[d["tp"] != t], d[d["tp"] == t]
        if rest["tp"].nunique() == 0:
            continue
        form, th = fit_stack(rest, None if cpu is None else cpu[cpu["tp"] != t])
        pred = predict_rows(left, form.to_stack(th, "lotpo"))
        out[t] = {"mape_pct": _mape(pred, left["y_s"].to_numpy()), "n": len(left),
                  "by_regime": errors(left, pred)["by_regime"]}
    return out


def _transfer(root: Path) -> dict[str, Any]:
    """The A100 -> H100 operator transfer error: measured from Vidur's operator profiles when they
    are present ($KVSIM_DATA), else the figures committed with the last such fit."""
    if (root / "vidur" / "compute").is_dir():
        return h100_transfer(root)
    committed = yaml.safe_load(STACKS_PATH.read_text()) if STACKS_PATH.exists() else {}
    got = (committed or {}).get("h100_transfer")
    if not isinstance(got, dict):
        raise ValueError(f"{root}: no vidur/compute and no committed h100_transfer; set KVSIM_DATA")
    return got


def fit_public(root: Path = pr.PROFILES, *, v1_window_s: float | None = 150.0,
               log: Callable[[str], None] | None = None) -> tuple[dict[str, Any], pd.DataFrame]:
    """Fit every stack; returns the stacks.yaml document and the (older stacks') rows with predictions."""
    rows = gpu_columns(pr.end_to_end_rows(root))
    cpu = pr.vidur_cpu_rows(root)
    transfer = _transfer(root)
    doc: dict[str, Any] = {"schema": SCHEMA, "form": "t = eta[tp] t_fixed + eta_tok t_dense + eta_attn t_attn "
                           "(each part >= its physics floor; max layers launch_s when launch-bound) + cpu_s[tp] + per_seq_s seqs + "
                           "[prefill] (prefill_s + prefill_n2_s sum_i chunk_i^2) (+ sched_s + sched_per_seq_s seqs, "
                           "hidden under async scheduling)",
                           "split": "held-out = every other point along each sweep (calibration/public_rows.py)",
                           "stacks": {}, "h100_transfer": transfer}
    if log:
        log("vllm-v1: replaying the vllm-0.15.1-h100 stages")
    doc["stacks"]["vllm-v1"], _ = fit_vllm_v1(window_s=v1_window_s, log=log)
    if log:
        log("vllm-0.6: simulating the LLM-Inference-Bench static batches")
    doc["stacks"]["vllm-0.6"], _ = fit_vllm_06()
    older, preds = fit_older(root, rows, cpu, transfer)
    doc["stacks"].update(older)
    return doc, preds


def fit_older(root: Path = pr.PROFILES, rows: pd.DataFrame | None = None, cpu: pd.DataFrame | None = None,
              transfer: dict[str, Any] | None = None) -> tuple[dict[str, Any], pd.DataFrame]:
    """The stacks of the step-time tables (vllm-2023, lean, splitwise) and their rows' predictions."""
    rows = gpu_columns(pr.end_to_end_rows(root)) if rows is None else rows
    cpu = pr.vidur_cpu_rows(root) if cpu is None else cpu
    transfer = _transfer(root) if transfer is None else transfer
    tband = (transfer["ratio_p10"], transfer["ratio_p90"])
    stacks: dict[str, Any] = {}
    preds = []
    for name, source in STACKS.items():
        d = rows[rows["source"] == source]
        c = cpu if name == "vllm-2023" else None
        form, th = fit_stack(d[~d["heldout"]], c)
        st = form.to_stack(th, name, DESCRIPTIONS[name], source, pr.GPU)
        pred = predict_rows(d, st)
        held = d["heldout"].to_numpy()
        entry = stack_doc(name, (form, th), st, d)
        if name == "vllm-2023":
            entry["engine"] = "vLLM of 2023-24 (eager decode, Ray workers at TP >= 2), as DistServe and Vidur measured it"
        elif name == "lean":
            entry["engine"] = "DistServe's own engine (2024)"
        else:
            entry["engine"] = "the serving stack of Splitwise's DGX-A100 table (not named by the source)"
        if c is not None:
            entry["fitted_on"]["cpu_rows"] = (f"vidur/a100_cpu_overheads.csv, {len(c)} rows (TP "
                                              f"{', '.join(map(str, sorted(c['tp'].unique())))}): CPU time per step")
        entry["heldout"] = errors(d[held], pred[held])
        entry["train"] = errors(d[~held], pred[~held])["all"]
        entry["leave_one_tp_out"] = leave_one_tp_out(d, c)
        ratio = d["y_s"].to_numpy()[held] / pred[held] - 1
        b = make_band(ratio, tband, int(held.sum()))
        entry["band"] = {"optimistic": b.optimistic, "pessimistic": b.pessimistic,
                         "optimistic_extrapolated": b.optimistic_extrapolated,
                         "pessimistic_extrapolated": b.pessimistic_extrapolated, "basis": b.basis}
        stacks[name] = entry
        preds.append(d.assign(pred_s=pred))
    return stacks, pd.concat(preds)


def write_stacks(doc: dict[str, Any], path: Path) -> Path:
    header = ("# Serving-stack profiles fitted on public end-to-end step times (not ours; see each fitted_on).\n"
              "# Regenerate: kvsim calibrate fit   (sim/cost/stack.py reads this file)\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header + yaml.safe_dump(doc, sort_keys=False, width=120))
    return path
