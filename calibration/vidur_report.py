"""Predicted-vs-measured plots and per-phase errors for the Vidur fits (reports/calibration-vidur.md).

    python -m calibration.vidur_report [--out reports]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from calibration.nnls_fit import ape
from calibration.vidur_profiles import (
    DEFAULT_ROOT,
    PEAKS,
    attention_table,
    attention_x,
    fit_gpu,
    mlp_tables,
)
from sim.cost.features import ATTN_TERMS, GEMM_TERMS, gemm_features, predict


def _row(name: str, e: np.ndarray) -> str:
    return f"| {name} | {len(e)} | {e.mean():.1f} | {np.percentile(e, 50):.1f} | {np.percentile(e, 95):.1f} |"


def main(out: Path, root: Path = DEFAULT_ROOT) -> list[str]:
    out.mkdir(parents=True, exist_ok=True)
    lines = ["| subset (all rows, fitted coefficients) | n | MAPE % | median APE % | p95 APE % |",
             "|---|---:|---:|---:|---:|"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    doc = fit_gpu(root, "a100")
    att = attention_table(root, "a100")
    pred = predict(doc["attention"]["paged"]["coef"], ATTN_TERMS, attention_x(att))
    y = att["t_s"].to_numpy(float)
    for phase, color in (("decode", "tab:blue"), ("prefill", "tab:orange")):
        m = (att["phase"] == phase).to_numpy()
        lines.append(_row(f"a100 attention {phase}", ape(pred[m], y[m])))
        axes[0].scatter(y[m] * 1e3, pred[m] * 1e3, s=2, alpha=0.3, color=color, label=phase)
    axes[0].set_title("A100 attention (Vidur, Llama-2-70B TP2, FlashAttention bs16)")
    for ax_i, gpu in ((1, "a100"), (2, "h100")):
        g = doc if gpu == "a100" else fit_gpu(root, gpu)
        gem, _ = mlp_tables(root, gpu)
        bw, fl = PEAKS[gpu]
        x = gemm_features(gem["n"], gem["k"], gem["m"], bandwidth_bps=bw, flops=fl)
        p = predict(g["gemm"]["coef"], GEMM_TERMS, x)
        yy = gem["t_s"].to_numpy(float)
        lines.append(_row(f"{gpu} dense GEMMs (QKV, O, up, down)", ape(p, yy)))
        axes[ax_i].scatter(yy * 1e3, p * 1e3, s=2, alpha=0.3, color="tab:green")
        axes[ax_i].set_title(f"{gpu.upper()} dense GEMMs (Vidur, Llama-2/3 shapes, TP1-8)")
    for ax in axes:
        lo, hi = ax.get_xlim()
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("measured (ms)")
        ax.set_ylabel("predicted (ms)")
    axes[0].legend(markerscale=5)
    fig.tight_layout()
    fig.savefig(out / "calibration-vidur.png", dpi=110)
    return lines


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("reports"))
    print("\n".join(main(ap.parse_args().out)))
