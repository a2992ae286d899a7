"""The two current-era stacks, fitted on shipped public data (``calibration/data/public``):

- ``vllm-v1``: vLLM v0.15.1 (V1 engine) end to end on H100 (:mod:`calibration.v1_fit` over the
  stages of ``vllm-0.15.1-h100/experiments.json``); step-time, E2E and TTFT bands from
  leave-one-run-out stage errors, and the regime its stages' replays covered (``regime:``,
  :mod:`calibration.fit_regime`), outside which a run is no longer "fitted";
- ``vllm-0.6``: vLLM 0.5.4-0.6.1 (V0, CUDA graphs, multiprocessing workers) on LLM-Inference-Bench
  static batches, A100-40GB and H100 (:mod:`calibration.static_bench`); band from held-out rows.

Each entry records the engine, the rows it was fitted on, and its errors, for the report.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from calibration import static_bench as sb
from calibration.bands import RUNS, band_of
from calibration.cross_band import cross_ratios, widen
from calibration.fit_regime import regime_block, stage_bands
from calibration.serving_runs import Stage, read_results
from calibration.v1_fit import V1Fit, fit_v1, leave_one_run_out, stack_entry

V1_ENGINE = "vLLM v0.15.1 (V1 engine: CUDA graphs, multiprocessing workers, async scheduling)"
V06_ENGINE = "vLLM 0.5.4-0.6.1 (V0 engine: CUDA graphs, multiprocessing workers)"


def stage_rows(fit: V1Fit, held: dict[str, tuple[float, float]], outputs: str = "auto") -> list[dict[str, Any]]:
    out = []
    for r in fit.results:
        s = r.stage
        he, ht = held.get(s.key, (np.nan, np.nan))
        out.append({"stage": s.key, "model": s.model, "tp": s.tp, "rate": s.rate,
                    "e2e_measured_s": round(s.e2e_mean, 4), "e2e_fitted_s": round(r.e2e_mean, 4),
                    "e2e_heldout_s": round(float(he), 4), "ttft_measured_s": round(s.ttft_mean, 5),
                    "ttft_fitted_s": round(r.ttft_mean, 5), "ttft_heldout_s": round(float(ht), 5),
                    "dtpt_measured_ms": round(s.dtpt(outputs) * 1e3, 3), "dtpt_fitted_ms": round(r.dtpt * 1e3, 3)})
    return out


def fit_vllm_v1(root: Path = RUNS, *, window_s: float | None = 150.0, stages: list[Stage] | None = None,
                log: Callable[[str], None] | None = None) -> tuple[dict[str, Any], V1Fit]:
    stages = stages if stages is not None else read_results(root)
    fit = fit_v1(stages, window_s=window_s, log=log)
    held = leave_one_run_out(fit)
    rows = stage_rows(fit, held)
    ratio = np.array([r["e2e_measured_s"] / r["e2e_heldout_s"] - 1 for r in rows])
    fitted_on = {"source": f"vllm-0.15.1-h100 ({root.name}/experiments.json: inference-sim/training@ed5c1d2, facts only)",
                 "gpu": "h100", "rows": len(rows), "models": sorted({s.model for s in stages}),
                 "tps": sorted({s.tp for s in stages}),
                 "refs": [r["stage"] for r in rows],
                 "targets": "per-stage mean E2E, TTFT, decode time per token; replayed through the simulator",
                 "not_fitted": [s.key for s in stages if s.overloaded]}
    entry = stack_entry(fit.layout, fit.theta, engine=V1_ENGINE, fitted_on=fitted_on,
                        description="a current vLLM (>= 0.10, V1 engine): CUDA-graph decode (a launch floor only "
                                    "with --enforce-eager), multiprocessing workers (no Ray term), scheduler CPU "
                                    "hidden behind the GPU under async scheduling; fitted end to end on vLLM v0.15.1, H100")
    entry["stages"] = rows
    entry["band"] = band_of(ratio, len(ratio), "stages (leave one run out, mean E2E)")
    entry["band_e2e"], entry["band_ttft"] = stage_bands(rows)
    entry["iterations"] = fit.iterations
    over = [s for s in stages if s.overloaded]
    import tempfile

    from calibration.replay import replay
    from calibration.v1_fit import write_profile
    with tempfile.TemporaryDirectory() as tmp:
        prof = write_profile(Path(tmp) / "v1.yaml", "vllm-v1", entry)
        entry["regime"] = regime_block([s for s in stages if not s.overloaded], str(prof), window_s=window_s)
        cross = cross_ratios(str(prof))
        what = "LLM-Inference-Bench's H100 prefill-bound static batches (vLLM 0.5.4-0.6.1; calibration/cross_band.py)"
        for k in ("band", "band_e2e", "band_ttft"):
            entry[k] = widen(entry[k], cross, what)
        bare = write_profile(Path(tmp) / "bare.yaml", "vllm-v1-bare", no_fit(entry))
        for row, res in zip(rows, fit.results, strict=True):
            r = replay(res.stage, str(bare), window_s=window_s)
            row["e2e_nofit_s"], row["ttft_nofit_s"] = round(r.e2e_mean, 4), round(r.ttft_mean, 5)
        if over:
            entry["overloaded"] = []
            for s in over:
                r = replay(s, str(prof), window_s=window_s)
                entry["overloaded"].append({
                    "stage": s.key, "measured_failures": s.failures, "sent": s.sent,
                    "measured_served_rate": round(s.served_rate, 3), "rate": s.rate,
                    "measured_e2e_s": round(s.e2e_mean, 2), "sim_overloaded": bool(r.overloaded),
                    "sim_queue_wait_last_quarter_s": round(r.wait_last_s, 2)})
    return entry, fit


def no_fit(entry: dict[str, Any]) -> dict[str, Any]:
    """The stack with nothing taken from its source: the kernel tables at multiplier 1 and no stack
    overheads (the API server keeps its priors). Its replays are the leave-one-source-out check."""
    out = {**entry, "coef": {**entry["coef"], "eta_tok": 1.0, "eta_attn": 1.0, "per_seq_s": 0.0, "prefill_s": 0.0,
                             "prefill_n2_s": 0.0},
           "by_tp": {t: {**v, "eta": 1.0, "cpu_s": 0.0} for t, v in entry["by_tp"].items()}}
    return out


def fit_vllm_06(rows: pd.DataFrame | None = None) -> tuple[dict[str, Any], pd.DataFrame]:
    d = rows if rows is not None else sb.with_features(sb.bench_rows(), "vllm-0.6")
    train = d[~d["heldout"]]
    th = sb.fit_static(train)
    pred = sb.predict_static(d, th)
    held = d["heldout"].to_numpy() & ~d["moe"].to_numpy()
    by = sb.mape_by(d[held], pred[held], ["gpu", "regime"])
    tr = sb.mape_by(d[~d["heldout"]], pred[~d["heldout"].to_numpy()], ["gpu", "regime"])
    moe = sb.mape_by(d[d["moe"]], pred[d["moe"].to_numpy()], ["gpu", "tp"])
    lomo = sb.leave_one_model_out(d)
    ratio = d["y_s"].to_numpy()[held] / pred[held] - 1
    def table(t: pd.DataFrame) -> list[dict[str, Any]]:
        return [{k: (round(float(v), 2) if isinstance(v, float) else (int(v) if isinstance(v, np.integer) else v))
                 for k, v in r.items()} for r in t.to_dict("records")]
    entry = {
        "description": "vLLM of mid 2024 (V0 engine with CUDA graphs, multiprocessing workers): fitted on "
                       "LLM-Inference-Bench static batches, A100-40GB and H100, TP 1-4",
        "engine": V06_ENGINE, "cuda_graphs": True,
        "fitted_on": {"source": "llm-inference-bench (argonne-lcf/LLM-Inference-Bench@4211f5d, BSD-3: vLLM rows)",
                      "gpu": "a100-40gb, h100", "rows": len(train), "models": sorted(train["model"].unique()),
                      "tps": sorted(int(t) for t in train["tp"].unique()),
                      "refs": ["llm-inference-bench/vllm_nvidia_results.csv, vllm_nvidia_ttft.csv: lengths 128, 512, 2048"],
                      "held_out": "lengths 256, 1024; Mixtral-8x7B (MoE) whole"},
        "coef": {"launch_s": 4.5e-4, "per_seq_s": float(f"{th[6]:.5g}"), "prefill_s": float(f"{th[7]:.5g}"),
                 "prefill_n2_s": 0.0, "eta_tok": float(f"{th[1]:.5g}"), "eta_attn": float(f"{th[2]:.5g}"),
                 "sched_s": 0.0, "sched_per_seq_s": 0.0},
        "by_tp": {t: {"cpu_s": float(f"{th[3 + i]:.5g}"), "eta": float(f"{th[0]:.5g}")} for i, t in enumerate(sb.TP_CPU)},
        "heldout": table(by), "train": table(tr), "moe_heldout": table(moe), "leave_one_model_out": table(lomo),
        "band": band_of(ratio, int(held.sum()), "static batches"),
    }
    return entry, d.assign(pred_s=pred)
