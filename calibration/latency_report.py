"""reports/latency-model.md: how well the step-time model predicts public measurements.

    kvsim calibrate report [--out reports]     (after kvsim calibrate fit)

Re-fits nothing that is committed: it re-runs the public fit in memory (deterministic, the same
numbers as calibration/data/stacks.yaml) to get every row's prediction, and compares three
models on the same held-out rows: ``roofline``, the calibrated model as it was before issue 10
(fixed 2 ms CPU per step, every MLP gated, no stack terms) and the new default.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from calibration.latency_fit import fit_public
from calibration.public_rows import PROFILES, REGIMES
from calibration.stack_fit import LEGACY, STACKS, predict_rows, roofline_rows

COLORS = dict(zip(REGIMES, ("tab:orange", "tab:blue", "tab:green"), strict=True))


def _pct(x: float) -> str:
    return f"{x:+.0f}%" if abs(x) >= 0.5 else "0%"


def comparison(rows: pd.DataFrame) -> pd.DataFrame:
    """Held-out rows with predictions of the three models."""
    held = rows[rows["heldout"]].copy()
    held["roofline_s"] = roofline_rows(held)
    held["before_s"] = predict_rows(held, LEGACY, legacy=True)
    return held


def _side_by_side(held: pd.DataFrame) -> list[str]:
    lines = ["| source (stack) | regime | n | roofline MAPE | (mean signed) | calibrated before | (signed) | new | (signed) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for (src, reg), g in held.groupby(["source", "regime"], sort=False):
        y = g["y_s"].to_numpy()
        cells = []
        for col in ("roofline_s", "before_s", "pred_s"):
            e = g[col].to_numpy() / y - 1
            cells += [f"{100 * np.abs(e).mean():.1f}%", _pct(100 * e.mean())]
        lines.append(f"| {src} ({g['stack'].iloc[0]}) | {reg} | {len(g)} | " + " | ".join(cells) + " |")
    return lines


def _heldout_tables(doc: dict[str, Any]) -> list[str]:
    lines = ["| stack (fitted on) | " + " | ".join(REGIMES) + " | all held-out | train |",
             "|---|" + "---:|" * (len(REGIMES) + 2)]
    for name, s in doc["stacks"].items():
        h = s["heldout"]["by_regime"]
        cells = [f"{h[r]['mape_pct']:.1f}% (p90 {h[r]['p90_ape_pct']:.0f}%, n={h[r]['n']})" if r in h else "-"
                 for r in REGIMES]
        lines.append(f"| {name} ({STACKS[name]}) | " + " | ".join(cells)
                     + f" | {s['heldout']['all']['mape_pct']:.1f}% | {s['train']['mape_pct']:.1f}% |")
    tps = sorted({int(t) for s in doc["stacks"].values() for t in s["heldout"]["by_tp"]})
    lines += ["", "Per TP degree (held-out rows), and leave-one-TP-out (fit on the other degrees, predict "
              "every row of this one):", "",
              "| stack | " + " | ".join(f"TP {t}" for t in tps) + " |", "|---|" + "---:|" * len(tps)]
    for name, s in doc["stacks"].items():
        h, lo = s["heldout"]["by_tp"], s["leave_one_tp_out"]
        lines.append(f"| {name}, held-out | " + " | ".join(f"{h[t]['mape_pct']:.1f}%" if t in h else "-" for t in tps) + " |")
        lines.append(f"| {name}, leave-one-TP-out | "
                     + " | ".join(f"{lo[t]['mape_pct']:.1f}%" if t in lo else "-" for t in tps) + " |")
    return lines


def _coefficients(doc: dict[str, Any]) -> list[str]:
    lines = ["| stack | launch / layer | per sequence | prefill step | prefill N² | TP: cpu per step, eta | band (fitted) | band (extrapolated) |",
             "|---|---:|---:|---:|---:|---|---|---|"]
    for name, s in doc["stacks"].items():
        c, b = s["coef"], s["band"]
        tp = "; ".join(f"{t}: {v['cpu_s'] * 1e3:.2f} ms, {v['eta']:.2f}" for t, v in s["by_tp"].items())
        lines.append(f"| {name} | {c['launch_s'] * 1e6:.0f} µs | {c['per_seq_s'] * 1e6:.0f} µs | "
                     f"{c['prefill_s'] * 1e3:.2f} ms | {c['prefill_n2_s']:.2g} s | {tp} | "
                     f"{_pct(100 * b['optimistic'])} / {_pct(100 * b['pessimistic'])} | "
                     f"{_pct(100 * b['optimistic_extrapolated'])} / {_pct(100 * b['pessimistic_extrapolated'])} |")
    return lines


def _transfer(t: dict[str, Any]) -> list[str]:
    lines = ["| H100 measurement (Vidur) | regime / TP | n | MAPE | p90 APE | measured/predicted - 1, p10 … p90 |",
             "|---|---|---:|---:|---:|---|"]
    for reg, e in t["dense_layer_by_regime"].items():
        lines.append(f"| dense layer (4 GEMMs + elementwise) | {reg} | {e['n']} | {e['mape_pct']:.1f}% | "
                     f"{e['p90_ape_pct']:.1f}% | {_pct(100 * e['ratio_p10'])} … {_pct(100 * e['ratio_p90'])} |")
    e = t["dense_layer_all"]
    lines.append(f"| dense layer | all | {e['n']} | {e['mape_pct']:.1f}% | {e['p90_ape_pct']:.1f}% | "
                 f"{_pct(100 * e['ratio_p10'])} … {_pct(100 * e['ratio_p90'])} |")
    for tp, e in t["allreduce_by_tp"].items():
        lines.append(f"| NCCL all-reduce (DGX-H100) | TP {tp} | {e['n']} | {e['mape_pct']:.1f}% | "
                     f"{e['p90_ape_pct']:.1f}% | {_pct(100 * e['ratio_p10'])} … {_pct(100 * e['ratio_p90'])} |")
    return lines


def _plots(held: pd.DataFrame, doc: dict[str, Any], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    sources = list(STACKS.values())
    fig, axes = plt.subplots(2, len(sources), figsize=(5 * len(sources), 9.5))
    for j, src in enumerate(sources):
        g = held[held["source"] == src]
        for i, (col, label, basis) in enumerate((("pred_s", "new calibrated (default)", "fitted"),
                                                 ("roofline_s", "roofline", "uncalibrated"))):
            ax = axes[i, j]
            for reg, gg in g.groupby("regime"):
                ax.scatter(gg["y_s"] * 1e3, gg[col] * 1e3, s=14, alpha=0.8, color=COLORS[str(reg)], label=str(reg))
            lo, hi = g["y_s"].min() * 1e3 * 0.5, g["y_s"].max() * 1e3 * 2
            ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
            ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="grey", alpha=0.15, lw=0)
            ax.set(xscale="log", yscale="log", xlabel="measured step (ms)", ylabel="predicted step (ms)",
                   title=f"{src}: {label}\n(held-out rows, A100-80GB; basis: {basis})")
            ax.legend(fontsize=7)
    fig.tight_layout()
    paths = [out / "predicted_vs_measured.png"]
    fig.savefig(paths[0], dpi=100)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 4))
    names = list(doc["stacks"])
    tps = sorted({int(t) for s in doc["stacks"].values() for t in s["leave_one_tp_out"]})
    w = 0.8 / len(names)
    for k, name in enumerate(names):
        lo = doc["stacks"][name]["leave_one_tp_out"]
        ax.bar([i + k * w for i, t in enumerate(tps)], [lo.get(t, {}).get("mape_pct", np.nan) for t in tps],
               width=w, label=name)
    ax.axhline(10, color="k", ls="--", lw=0.8)
    ax.set(xticks=[i + w for i in range(len(tps))], xticklabels=[f"TP {t}" for t in tps],
           ylabel="MAPE of the left-out TP (%)", title="Leave-one-TP-out (A100-80GB; the left-out TP is extrapolated)")
    ax.legend()
    fig.tight_layout()
    paths.append(out / "leave_one_tp_out.png")
    fig.savefig(paths[1], dpi=100)
    plt.close(fig)
    return paths


def _reading(doc: dict[str, Any]) -> list[str]:
    v, sw = doc["stacks"]["vllm"], doc["stacks"]["splitwise"]
    pf = sw["heldout"]["by_regime"][REGIMES[0]]["mape_pct"]
    lo = max(e["mape_pct"] for s in doc["stacks"].values() for e in s["leave_one_tp_out"].values())
    return [
        "## Reading it, and what it does not show", "",
        "- **Inside the measured range the target holds but for one cell**: held-out MAPE is at most 10 % per "
        f"regime for `vllm` and `lean`; Splitwise's prefill rows miss it narrowly ({pf:.1f} %), driven by its "
        "batched prefills (8 x 512 tokens: 12-26 % too fast): in that table a batch of prompts costs more "
        "per token than one prompt of the same total length, which per-sequence attention cannot follow.",
        f"- **Across TP degrees it is weaker**: leaving a whole TP degree out costs up to {lo:.0f} % MAPE, worst "
        "at the ends (TP 1 and TP 8 are extrapolated, not interpolated). The per-TP `cpu` and `eta` values trade "
        "against each other (two models per source cannot separate them); their sum is what the fit pins down, "
        "so read them together, not one by one.",
        f"- **The default `vllm` profile is vLLM as these sources measured it (2024)**: the fit reads DistServe's "
        f"vLLM steps as launch-bound at {v['coef']['launch_s'] * 1e6:.0f} µs per layer (an eager-mode floor) "
        "plus Vidur's measured Ray overhead at TP >= 2. A current vLLM (V1 engine, CUDA graphs, no Ray) is "
        "likely faster at small batches and closer to `lean`; no public measurement of it is in the shared "
        "data, so none is claimed. Use `--serving-stack lean` to bound that case.",
        "- **DistServe rows are fits, not raw timings**; at B = 95 their vLLM large-batch fit lies up to 57 % "
        "above their small-batch fit (TP >= 2), a step no smooth model follows: most of `vllm`'s large-batch error.",
        "- **GPU transfer**: the A100 dense-layer fit lands within the issue's 15 % goal on H100's measured "
        "operators; NCCL all-reduce does not (the A100 per-call latency overstates the H100's by ~35 %), so "
        "TP >= 2 on an extrapolated GPU carries more error than its band says. The end-to-end H100 error is "
        "not measured here (no H100 step times in the shared data).",
        "- **Not modelled**: MoE (an expert model is timed as one dense MLP of the expert's width: routing, "
        "active experts and expert weights streamed are missing) and MLA attention; "
        "pipeline parallelism; the paper's figures were not used for any fit.",
        "",
    ]


def write_report(out: Path, root: Path = PROFILES) -> list[Path]:
    doc, rows = fit_public(root)
    held = comparison(rows)
    plots = _plots(held, doc, out / "latency-model")
    t = doc["h100_transfer"]
    md = [
        "# Latency you can plan with: the step-time model vs public measurements",
        "",
        "Generated by `kvsim calibrate report` (after `kvsim calibrate fit`, which writes "
        "`calibration/data/stacks.yaml` and `calibration/data/vidur/*.yaml`). Data: measurements published "
        "by others on DGX-A100 machines (`../shared/gpu_profiles`, see `calibration/public_rows.py` for "
        "the sources, licences and how rows are built); nothing here was measured by us.",
        "",
        "**Model.** GPU kernels from Vidur's A100 operator fits (attention, the four dense GEMMs with the "
        "MLP gated or not, elementwise, NCCL all-reduce per call fitted per TP), plus a named serving-stack "
        "profile: `t = max(eta[tp] t_gpu, layers x launch) + cpu[tp] + per_seq x B + [prefill] (prefill + "
        "prefill_n2 x N^2)`. The stack terms are the only ones fitted on end-to-end rows.",
        "",
        "**Split.** Held-out rows are every other point along each sweep (prompt size, batch size, output "
        "length), never fitted; a sweep's ends are always fitted, so this measures interpolation inside the "
        "measured range. Leave-one-TP-out removes every row of one TP degree and extrapolates it.",
        "",
        "## Held-out error of the new model (A100-80GB rows not used in fitting)",
        "", *_heldout_tables(doc), "",
        "## Roofline vs calibrated (before) vs new, same held-out rows",
        "",
        "MAPE and mean signed error (predicted / measured - 1: negative = the model is too fast). "
        "`calibrated before` = the pre-issue-10 form with today's operator fits: fixed 2 ms CPU per step, "
        "every MLP gated, no stack terms (TP 3 all-reduce interpolated instead of the old analytic fallback).",
        "", *_side_by_side(held), "",
        "![predicted vs measured](latency-model/predicted_vs_measured.png)",
        "![leave one TP out](latency-model/leave_one_tp_out.png)",
        "",
        "## Transfer to a GPU the fit never saw (H100)",
        "",
        f"{t['data']}. Prediction: {t['prediction']}. The end-to-end H100 error is therefore **not "
        "measured here**; what is measured is the error of the GPU-side terms that extrapolation rescales.",
        "", *_transfer(t), "",
        "## Fitted stack profiles and the error band",
        "",
        "The band is the 10th / 90th percentile of measured / predicted - 1 over a stack's held-out rows; "
        "for an extrapolated GPU it is compounded with the dense-layer transfer error above. `kvsim plan` "
        "sizes fleets at the band's pessimistic edge next to the central estimate.",
        "", *_coefficients(doc), "",
        *_reading(doc),
    ]
    path = out / "latency-model.md"
    path.write_text("\n".join(md) + "\n")
    return [path, *plots]
