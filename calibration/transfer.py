"""How well do A100 fits transfer to a GPU they never saw? Measured on Vidur's H100 operators.

No end-to-end H100 step times are in the operator profiles (``$KVSIM_DATA/gpu_profiles``) (the Splitwise table there keeps
its A100 rows only), so the transfer is measured where H100 data exists: Vidur's H100 profiles
of every dense-layer operator (QKV, O, up, down GEMMs + norms, rope, activation, residual adds;
Llama-2-7B and -70B at TP 1/2/4/8) and of NCCL all-reduce on a DGX-H100. The prediction is the
**A100** fit scaled the way the simulator extrapolates (bandwidth terms by the datasheet
bandwidth ratio, FLOP terms by the FLOP/s ratio, the roofline term at the H100's peaks,
all-reduce bytes by the NVLink ratio). Regimes follow the token count of the step: <= 8 tokens
(decode, small batch), 16-256 (decode, large batch), >= 512 (prefill-bound).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from calibration.nnls_fit import ape
from calibration.vidur_profiles import ELEM_OPS, GEMM_OPS, PEAKS, allreduce_table, gemm_shapes
from calibration.vidur_profiles import _ms as op_seconds
from sim.cost.features import GEMM_TERMS, gemm_features, predict, scale_coefficients
from sim.cost.sources import committed_calibrations

NVLINK_GBPS = {"a100": 600.0, "h100": 900.0}


def _a100() -> dict[str, Any]:
    src = [s for s in committed_calibrations() if s.gpu == "a100-80gb" and "gemm" in s.doc]
    if not src:
        raise FileNotFoundError("calibration/data/vidur/a100.yaml is missing; run kvsim calibrate fit")
    return src[0].doc


def token_regime(n: np.ndarray) -> np.ndarray:
    return np.where(n <= 8, "decode, small batch (B <= 8)",
                    np.where(n <= 256, "decode, large batch (B >= 16)", "prefill-bound"))


def dense_layer_transfer(root: Path) -> pd.DataFrame:
    """One row per Vidur H100 mlp.csv row: measured vs A100-extrapolated dense layer (s)."""
    a100 = _a100()
    bw_a, fl_a = PEAKS["a100"]
    bw_h, fl_h = PEAKS["h100"]
    gc = scale_coefficients(a100["gemm"]["coef"], "gemm", bw_a / bw_h, fl_a / fl_h)
    ec = scale_coefficients(a100["elementwise"]["coef"], "elementwise", bw_a / bw_h, fl_a / fl_h)
    out = []
    for p in sorted((root / "compute" / "h100").glob("*/*/mlp.csv")):
        m = pd.read_csv(p)
        n = m["num_tokens"].to_numpy(float)
        meas = sum(op_seconds(m, op) for op in (*GEMM_OPS, *ELEM_OPS)).to_numpy(float)
        pred = np.zeros(len(m))
        for k, mm in gemm_shapes(m).values():
            pred += predict(gc, GEMM_TERMS, gemm_features(n, k, mm, bandwidth_bps=bw_h, flops=fl_h))
        ffn = (m["n_expanded_embd"] // m["num_tensor_parallel_workers"]).to_numpy(float)
        pred += ec["c0"] + ec["c_h"] * n * m["n_embd"].to_numpy(float) * 2 + ec["c_f"] * n * ffn * 2
        out.append(pd.DataFrame({"model": p.parent.name, "tp": m["num_tensor_parallel_workers"], "n": n,
                                 "measured_s": meas, "predicted_s": pred}))
    d = pd.concat(out, ignore_index=True)
    return d.assign(regime=token_regime(d["n"].to_numpy()))


def allreduce_transfer(root: Path) -> pd.DataFrame:
    a100 = next(s for s in committed_calibrations() if s.gpu == "a100-80gb" and "allreduce" in s.doc).doc
    h = allreduce_table(root, "h100")
    ratio = NVLINK_GBPS["a100"] / NVLINK_GBPS["h100"]
    pred = []
    for w, b in zip(h["num_workers"], h["bytes"], strict=True):
        c = a100["allreduce"]["by_tp"][int(w)]["coef"]
        pred.append(c["c0"] + c["c_b"] * ratio * b)
    return h.assign(measured_s=h["t_s"], predicted_s=pred)


def summary(d: pd.DataFrame, by: str) -> dict[str, dict[str, float]]:
    out = {}
    for k, g in d.groupby(by):
        e = ape(g["predicted_s"].to_numpy(), g["measured_s"].to_numpy())
        r = g["measured_s"] / g["predicted_s"] - 1
        out[str(k)] = {"mape_pct": round(float(e.mean()), 1), "p90_ape_pct": round(float(np.percentile(e, 90)), 1),
                       "ratio_p10": round(float(r.quantile(0.1)), 4), "ratio_p90": round(float(r.quantile(0.9)), 4),
                       "n": len(g)}
    return out


def h100_transfer(root: Path) -> dict[str, Any]:
    """``root``: the gpu_profiles directory (holds vidur/)."""
    dense = dense_layer_transfer(root / "vidur")
    ar = allreduce_transfer(root / "vidur")
    r = dense["measured_s"] / dense["predicted_s"] - 1
    return {"data": "vidur H100 profiles (compute/h100/*/mlp.csv, network/h100_dgx/all_reduce.csv); "
                    "no end-to-end H100 step times are in the shared data",
            "prediction": "A100 fits scaled by datasheet ratios (bandwidth 2.039 -> 3.35 TB/s, "
                          "bf16 312 -> 989 TFLOP/s, NVLink 600 -> 900 GB/s)",
            "dense_layer_by_regime": summary(dense, "regime"),
            "dense_layer_all": summary(dense.assign(all="all"), "all")["all"],
            "allreduce_by_tp": summary(ar, "num_workers"),
            "ratio_p10": round(float(r.quantile(0.1)), 4), "ratio_p90": round(float(r.quantile(0.9)), 4)}
