"""Fit the serving-stack profiles (sim/cost/stack.py) on public end-to-end step times.

The GPU side of every row comes from the operator fits (Vidur's A100 profiles) through the very
model the simulator runs (``CalibratedCost.gpu_time``); only the stack's few terms are fitted::

    t = max(eta[tp] t_gpu, L launch_s) + cpu_s[tp] + per_seq_s B + [prefill] (prefill_s + prefill_n2_s sum_i P_i^2)

with ``cpu_s`` and ``eta`` one value per TP degree present (a degree the data lacks is
interpolated in log2(TP) by ``ServingStack.at_tp``). Least squares on relative error with a soft-L1 loss
(scipy ``least_squares``, f_scale 0.05: a robust fit of MAPE), non-negative, several starts for
the launch term. For ``vllm`` the CPU terms are also fitted to vLLM's measured CPU time per step
(Vidur's CPU profiles), so they stay what vLLM's host actually spends.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from sim.cost.batch import StepBatch
from sim.cost.calibrated import CalibratedCost, build_calibrated
from sim.cost.predict import batch_for
from sim.cost.roofline import RooflineCost
from sim.cost.sources import committed_calibrations
from sim.cost.stack import Band, ServingStack
from sim.model.catalog import resolve_gpu, resolve_model

NULL = ServingStack("none", "GPU kernels only", 0.0, 0.0, 0.0, 0.0, ((1, 0.0),), ((1, 1.0),))
# the calibrated model as it was before issue 10: a fixed 2 ms per step, every MLP gated
LEGACY = ServingStack("legacy", "fixed 2 ms CPU per step", 0.0, 0.0, 0.0, 0.0, ((1, 2e-3),), ((1, 1.0),))
LAUNCH_STARTS = (1e-5, 2e-4, 4e-4, 6e-4)
STACKS = {"vllm-2023": "distserve-vllm", "lean": "distserve-lean", "splitwise": "splitwise"}


def row_batch(r: pd.Series) -> StepBatch:
    if r["kind"] == "prefill":
        return batch_for(prefill_tokens=int(r["prompt"]), batch=int(r["batch"]))
    return batch_for(batch=int(r["batch"]), context=int(r["context"]), decode=True)


def cost_for(model: str, gpu: str, tp: int, stack: ServingStack, legacy: bool = False) -> CalibratedCost:
    m = resolve_model(model)
    if legacy:
        m = dataclasses.replace(m, gated_mlp=True)
    return build_calibrated(m, resolve_gpu(gpu), tp, committed_calibrations(), stack)


def gpu_columns(rows: pd.DataFrame) -> pd.DataFrame:
    """Add the per-row inputs of the stack terms: t_gpu, layers, sequences, prefill tokens."""
    g, layers = [], []
    cache: dict[tuple[str, str, int], CalibratedCost] = {}
    for _, r in rows.iterrows():
        key = (str(r["model"]), str(r["gpu"]), int(r["tp"]))
        if key not in cache:
            cache[key] = cost_for(*key, NULL)
        g.append(cache[key].gpu_time(row_batch(r)))
        layers.append(cache[key].model.layers)
    pre = rows["kind"] == "prefill"
    # the squared (attention) prefill term is per sequence: B prompts of P tokens give B P^2
    return rows.assign(t_gpu=g, layers=layers, seqs=rows["batch"],
                       ptok=np.where(pre, rows["batch"] * rows["prompt"], 0),
                       sq=np.where(pre, rows["batch"] * rows["prompt"].astype(float) ** 2, 0.0))


class Form:
    """Parameter vector <-> ServingStack for one stack's training TPs.

    th = [launch_s, per_seq_s, prefill_s, prefill_n2_s, cpu_s[tp] for each tp, eta[tp] for each tp]
    """

    def __init__(self, tps: list[int]) -> None:
        self.tps = tps
        k = len(tps)
        self.scale = np.r_[5e-4, 1e-4, 1e-2, 1e-8, np.full(k, 5e-3), np.ones(k)]
        self.x0 = np.r_[2e-4, 1e-4, 1e-3, 1e-9, np.full(k, 5e-3), np.ones(k)]

    def _per_tp(self, th: np.ndarray, tp: np.ndarray, offset: int) -> np.ndarray:
        k = len(self.tps)
        idx = np.searchsorted(self.tps, tp)
        return np.asarray(th[offset: offset + k])[idx]

    def cpu(self, th: np.ndarray, tp: np.ndarray) -> np.ndarray:
        return self._per_tp(th, tp, 4)

    def predict(self, th: np.ndarray, d: pd.DataFrame) -> np.ndarray:
        tp = d["tp"].to_numpy()
        eta = self._per_tp(th, tp, 4 + len(self.tps))
        pre, sq = d["ptok"].to_numpy(float), d["sq"].to_numpy(float)
        t = np.maximum(eta * d["t_gpu"].to_numpy(), d["layers"].to_numpy() * th[0])
        return t + self.cpu(th, tp) + th[1] * d["seqs"].to_numpy() + np.where(pre > 0, th[2] + th[3] * sq, 0.0)

    def to_stack(self, th: np.ndarray, name: str, description: str = "", source: str = "",
                 gpu: str = "") -> ServingStack:
        k = len(self.tps)
        return ServingStack(name, description, float(th[0]), float(th[1]), float(th[2]), float(th[3]),
                            tuple((t, float(c)) for t, c in zip(self.tps, th[4: 4 + k], strict=True)),
                            tuple((t, float(e)) for t, e in zip(self.tps, th[4 + k:], strict=True)),
                            source=source, gpu=gpu)


def fit_stack(train: pd.DataFrame, cpu_rows: pd.DataFrame | None = None) -> tuple[Form, np.ndarray]:
    """Fit one stack's terms on rows carrying :func:`gpu_columns`."""
    form = Form(sorted(int(t) for t in train["tp"].unique()))
    y = train["y_s"].to_numpy(float)
    extra: Callable[[np.ndarray], np.ndarray] = lambda th: np.zeros(0)  # noqa: E731
    if cpu_rows is not None and len(cpu_rows):
        c = cpu_rows[cpu_rows["tp"].isin(form.tps)]
        cy, ctp, cb = c["cpu_s"].to_numpy(float), c["tp"].to_numpy(), c["batch"].to_numpy(float)
        extra = lambda th: (form.cpu(th, ctp) + th[1] * cb - cy) / cy  # noqa: E731
    best = None
    for launch in LAUNCH_STARTS:
        x0 = form.x0.copy()
        x0[0] = launch
        r = least_squares(lambda th: np.r_[(form.predict(th, train) - y) / y, extra(th)], x0,
                          bounds=(0, np.inf), loss="soft_l1", f_scale=0.05, x_scale=form.scale)
        if best is None or r.cost < best.cost:
            best = r
    assert best is not None
    return form, best.x


def predict_rows(rows: pd.DataFrame, stack: ServingStack, legacy: bool = False) -> np.ndarray:
    """Step times of the rows through the simulator's own cost model with ``stack``."""
    cache: dict[tuple[str, str, int], CalibratedCost] = {}
    out = []
    for _, r in rows.iterrows():
        key = (str(r["model"]), str(r["gpu"]), int(r["tp"]))
        if key not in cache:
            cache[key] = cost_for(*key, stack, legacy)
        out.append(cache[key].step_time(row_batch(r)))
    return np.array(out)


def roofline_rows(rows: pd.DataFrame) -> np.ndarray:
    return np.array([RooflineCost(resolve_model(r["model"]), resolve_gpu(r["gpu"]), int(r["tp"])).step_time(row_batch(r))
                     for _, r in rows.iterrows()])


def band(ratio: np.ndarray, transfer: tuple[float, float] = (0.0, 0.0), n: int = 0) -> Band:
    """p10 / p90 of measured / predicted - 1; the extrapolated pair compounds the GPU transfer's."""
    lo, hi = (float(np.percentile(ratio, q)) for q in (10, 90))
    tlo, thi = transfer
    return Band(round(lo, 4), round(hi, 4), round((1 + lo) * (1 + min(0.0, tlo)) - 1, 4),
                round((1 + hi) * (1 + max(0.0, thi)) - 1, 4),
                f"10th/90th percentile of measured/predicted - 1 on {n} held-out rows; extrapolated: "
                "compounded with the A100 -> H100 operator transfer error")
