"""Fit the step-cost model to a harness run: ``calibration/data/<gpu>/*.csv`` -> ``fit.yaml``.

Attention: NNLS on relative error over the decode/prefill grid, separately for PAGED=True (all
block sizes together; ``c_pg`` carries the block-size effect) and PAGED=False (no page term).
The random mixed batches are held out and never fitted: their MAPE / p95 is the reported error.
GEMM / KV write: NNLS with a random 20 % held out. Copy: measured GB/s of the largest transfer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from calibration.nnls_fit import ape, fit_terms
from sim.cost.features import ATTN_TERMS, GEMM_TERMS, attention_features, gemm_features

SCHEMA = "kvsim-calibration/1"
# Datasheet peaks for the c_roof feature (sim/specs/gpus.yaml; 'cpu' = arbitrary, tests only).
PEAKS = {"h200": (4.8e12, 989e12), "h100": (3.35e12, 989e12), "a100-80gb": (2.039e12, 312e12),
         "a100-40gb": (1.555e12, 312e12), "l40s": (0.864e12, 362e12), "l4": (0.3e12, 121e12),
         "b200": (8.0e12, 2250e12), "mi300x": (5.3e12, 1307e12), "cpu": (50e9, 1e12)}


def _dtype_bytes(s: pd.Series) -> np.ndarray:
    return np.where(s.astype(str).str.contains("32"), 4, 2)


def attention_x(df: pd.DataFrame) -> np.ndarray:
    return attention_features(df["n_seqs"], df["sum_q"], df["sum_ctx"], df["sum_pairs"],
                              df["pages_touched"], q_heads=df["q_heads"], kv_heads=df["kv_heads"],
                              head_dim=df["head_dim"], dtype_bytes=_dtype_bytes(df["dtype"]))


def fit_attention(df: pd.DataFrame) -> dict[str, Any]:
    out: dict[str, Any] = {}
    df = df.assign(t_s=df["t_us_median"] / 1e6, paged=df["paged"].astype(str) == "True")
    for name, paged in (("paged", True), ("contiguous", False)):
        d = df[df["paged"] == paged].reset_index(drop=True)
        if len(d) < len(ATTN_TERMS) + 2:
            continue
        terms = ATTN_TERMS if paged else ATTN_TERMS[:-1]
        x = attention_x(d)[:, : len(terms)]
        hold = (d["kind"] == "mixed").to_numpy()
        r = fit_terms(x, d["t_s"].to_numpy(float), terms, heldout=hold if hold.any() else None)
        entry: dict[str, Any] = {**r.as_dict(), "heldout": "random mixed batches" if hold.any()
                                 else "random 20% of rows"}
        if paged and hold.any():
            c = np.array([r.coef[t] for t in terms])
            per_bs = {}
            for bs, g in d[hold].groupby("block_size"):
                e = ape(attention_x(g)[:, : len(terms)] @ c, g["t_s"].to_numpy(float))
                per_bs[int(bs)] = {"mape_pct": round(float(e.mean()), 2),
                                   "p95_pct": round(float(np.percentile(e, 95)), 2), "n": len(g)}
            entry["heldout_by_block_size"] = per_bs
        out[name] = entry
    out["paging_overhead"] = paging_overhead(df)
    return out


def paging_overhead(df: pd.DataFrame) -> dict[int, float]:
    """Median of t(PAGED)/t(slab) - 1 per block size, over points measured both ways."""
    key = ["kind", "q_heads", "kv_heads", "head_dim", "n_seqs", "sum_q", "sum_ctx", "max_ctx"]
    d = df[df["page_order"] == "random"]
    slab = d[~d["paged"]].groupby(key)["t_s"].median().rename("slab")
    paged = d[d["paged"]].join(slab, on=key, how="inner")
    return {int(bs): round(float((g["t_s"] / g["slab"] - 1).median()), 4)
            for bs, g in paged.groupby("block_size")}


def fit_gemm(df: pd.DataFrame, gpu: str) -> dict[str, Any]:
    bw, fl = PEAKS.get(gpu, PEAKS["cpu"])
    x = gemm_features(df["n"], df["k"], df["m"], bandwidth_bps=bw, flops=fl,
                      dtype_bytes=_dtype_bytes(df["dtype"]))
    return fit_terms(x, (df["t_us_median"] / 1e6).to_numpy(float), GEMM_TERMS).as_dict()


def fit_kv_write(df: pd.DataFrame) -> dict[str, Any]:
    nbytes = df["n"] * 2 * df["kv_heads"] * df["head_dim"] * _dtype_bytes(df["dtype"])
    x = np.stack([np.ones(len(df)), nbytes.to_numpy(float)], axis=-1)
    return fit_terms(x, (df["t_us_median"] / 1e6).to_numpy(float), ("c0", "c_b")).as_dict()


def copy_bandwidth(df: pd.DataFrame) -> dict[str, float]:
    big = df.loc[df.groupby("kind")["bytes"].idxmax()]
    return {f"{k}_gbps": round(float(g), 2) for k, g in zip(big["kind"], big["gbps"], strict=True)}


def fit_dir(data_dir: Path) -> dict[str, Any]:
    """Fit everything a harness run wrote into ``data_dir``; returns the YAML document."""
    meta = json.loads((data_dir / "meta.json").read_text())
    gpu = str(meta.get("gpu", data_dir.name))
    cpu = gpu == "cpu"
    doc: dict[str, Any] = {
        "schema": SCHEMA, "gpu": gpu, "source": "cpu" if cpu else "measured",
        "label": "cpu test run (NOT GPU data)" if cpu else f"{gpu}, measured",
        "provenance": {k: meta.get(k) for k in ("device_name", "driver", "torch", "triton", "date",
                                                  "git_commit", "git_dirty", "timing")},
    }
    doc["provenance"]["units"] = "seconds per feature unit (sim/cost/features.py)"
    files = {p.stem: pd.read_csv(p) for p in data_dir.glob("*.csv")}
    if "attention" in files:
        doc["attention"] = fit_attention(files["attention"])
    if "gemm" in files:
        doc["gemm"] = fit_gemm(files["gemm"], gpu)
    if "kv_write" in files:
        doc["kv_write"] = fit_kv_write(files["kv_write"])
    if "copy" in files:
        doc["copy"] = copy_bandwidth(files["copy"])
    return doc


def write_fit(data_dir: Path, out: Path | None = None) -> tuple[Path, dict[str, Any]]:
    doc = fit_dir(data_dir)
    out = out or data_dir / "fit.yaml"
    header = "# kvsim step-cost calibration. Regenerate: kvsim calibrate fit " + str(data_dir) + "\n"
    out.write_text(header + yaml.safe_dump(doc, sort_keys=False))
    return out, doc


def summary_lines(doc: dict[str, Any]) -> list[str]:
    lines = [f"{doc['label']}"]
    for name, e in doc.get("attention", {}).items():
        if name == "paging_overhead":
            lines.append("paging overhead vs slab (median, by block size): "
                         + ", ".join(f"{bs}: {v:+.1%}" for bs, v in e.items()))
            continue
        lines.append(f"attention {name}: held-out MAPE {e['heldout_mape_pct']:.1f}%, "
                     f"p95 {e['heldout_p95_pct']:.1f}% (n={e['n_heldout']}, {e.get('heldout', 'random 20% of rows')})")
    for k in ("gemm", "kv_write", "elementwise"):
        if k in doc:
            e = doc[k]
            lines.append(f"{k}: held-out MAPE {e['heldout_mape_pct']:.1f}%, p95 {e['heldout_p95_pct']:.1f}%"
                         f" (n={e['n_heldout']})")
    if "copy" in doc:
        lines.append("copy GB/s: " + ", ".join(f"{k[:-5]} {v:g}" for k, v in doc["copy"].items()))
    return lines
