"""Fit a serving-stack profile end to end: replay measured stages, match their per-stage means.

The stack's few coefficients enter every step time linearly (sim/cost/stack.py, CUDA-graph form)::

    t = eta t_gpu + cpu_s + per_seq_s B + prefill_s [step has prefill tokens]

so with the schedule of one replay held fixed, each stage's mean E2E and TTFT are linear in
theta = (eta[tp] for each TP degree, cpu_s, per_seq_s, prefill_s) (``replay.StageResult.grad_*``).
``eta[tp]`` is the kernel efficiency relative to the operator fits at that TP: it takes up what
Vidur's NCCL all-reduce profile (the all-reduce term) misses of vLLM's custom all-reduce and of
the engine's own kernels; the CPU terms are one set for every TP (multiprocessing workers, no Ray). One fit iteration:
replay every stage with the current theta, solve the bounded linear least squares on relative
errors of mean E2E, TTFT and decode time per token, repeat (the schedule moves with theta) until
theta moves less than 0.5 % (at most ``iters`` times; each step damped, see DAMP and MAX_MOVE), and
keep the iterate whose replays (not their linearization) have the lowest loss. Deterministic: fixed
seeds, no random starts.

Overloaded stages (``Stage.overloaded``) are never fitted, only predicted.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from scipy.optimize import lsq_linear

from calibration.replay import StageResult, replay
from calibration.serving_runs import Stage
from sim.cost.stack import SCHEMA

CPU0 = np.array([1.0, 1.0, 2e-3, 0.0, 2e-3])     # eta_tok, eta_attn, cpu_s, per_seq_s, prefill_s
ETA0 = 1.0
# a weak pull of the kernel efficiencies toward 1 (the operator fits as measured): the data pin down
# eta t_fixed + cpu_s together far better than either alone; this picks the physical split
W_PRIOR = 0.05
DAMP = 0.6            # fraction of the linear step taken per iteration (the schedule moves with theta)
MAX_MOVE = np.log(1.6)  # at most x1.6 (or /1.6) per coefficient per iteration, in log space
# kernel multipliers >= 1 (an isolated kernel timing is a lower bound inside an engine), overheads >= 0
CPU_LO, CPU_HI = np.array([1.0, 1.0, 0, 0, 0]), np.array([3.0, 3.0, 0.05, 1e-3, 0.05])
CPU_SCALE = np.array([1.0, 1.0, 1e-3, 1e-5, 1e-3])


class Layout:
    """theta = [eta at each TP degree (or one shared)] + [eta_tok, eta_attn, cpu_s, per_seq_s, prefill_s]."""

    def __init__(self, tps: Sequence[int], per_tp_eta: bool = False) -> None:
        self.all_tps = tuple(sorted(set(int(t) for t in tps)))
        self.tps = self.all_tps if per_tp_eta else self.all_tps[:1]

    def x0(self) -> np.ndarray:
        return np.r_[np.full(len(self.tps), ETA0), CPU0]

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        k = len(self.tps)
        return np.r_[np.full(k, 1.0), CPU_LO], np.r_[np.full(k, 3.0), CPU_HI]

    def scale(self) -> np.ndarray:
        return np.r_[np.ones(len(self.tps)), CPU_SCALE]

    def expand(self, g: np.ndarray, tp: int) -> np.ndarray:
        """A replay's gradients (replay.FEATURES) laid out on theta."""
        e = np.zeros(len(self.tps))
        e[self.tps.index(tp) if tp in self.tps else 0] = g[0]
        return np.r_[e, g[1:]]

    def eta(self, theta: np.ndarray) -> dict[int, float]:
        """eta at every TP degree of the data (one value repeated when shared)."""
        return {t: float(theta[self.tps.index(t) if t in self.tps else 0]) for t in self.all_tps}

    def cpu(self, theta: np.ndarray) -> np.ndarray:
        return theta[len(self.tps):]
W_E2E, W_TTFT, W_DTPT = 1.0, 0.3, 1.0
# scheduler CPU per step, hidden behind the GPU under async scheduling: not identifiable from
# runs with async scheduling on, so stated, not fitted (about vLLM V0's measured schedule time,
# Vidur's a100_cpu_overheads.csv, an upper bound for V1's leaner scheduler)
SCHED_S, SCHED_PER_SEQ_S = 3e-4, 5e-6


@dataclass(frozen=True, slots=True)
class V1Fit:
    layout: Layout
    theta: np.ndarray
    results: tuple[StageResult, ...]       # replays with the final theta (fit stages)
    iterations: int


def stack_entry(layout: Layout, theta: np.ndarray, *, description: str, engine: str, fitted_on: dict[str, Any],
                launch_s: float = 4.5e-4, sched: tuple[float, float] = (SCHED_S, SCHED_PER_SEQ_S),
                kernels: str = "tables") -> dict[str, Any]:
    """A ``stacks.yaml`` entry for theta (eta per TP; one cpu_s for every TP: no Ray term)."""
    eta_tok, eta_attn, cpu, per_seq, pf = (float(f"{x:.5g}") for x in layout.cpu(theta))
    return {"description": description, "engine": engine, "cuda_graphs": True, "kernels": kernels, "fitted_on": fitted_on,
            "coef": {"launch_s": launch_s, "per_seq_s": per_seq, "prefill_s": pf, "prefill_n2_s": 0.0, "eta_tok": eta_tok, "eta_attn": eta_attn,
                     "sched_s": sched[0], "sched_per_seq_s": sched[1]},
            "by_tp": {t: {"cpu_s": cpu, "eta": float(f"{e:.5g}")} for t, e in layout.eta(theta).items()}}


def write_profile(path: Path, name: str, entry: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# Serving-stack profile fitted by `kvsim calibrate fit` (sim/cost/stack.py)\n"
                    + yaml.safe_dump({"schema": SCHEMA, "stacks": {name: entry}}, sort_keys=False, width=120))
    return path


def _grads(lay: Layout, r: StageResult) -> tuple[np.ndarray, np.ndarray]:
    return lay.expand(r.grad_e2e, r.stage.tp), lay.expand(r.grad_ttft, r.stage.tp)


def _rows(lay: Layout, res: Sequence[StageResult], theta0: np.ndarray, outputs: str) -> tuple[np.ndarray, np.ndarray]:
    """A theta = b: relative residuals of every stage's E2E, TTFT, decode time per token."""
    A, b = [], []
    for r in res:
        st = r.stage
        ge, gt = _grads(lay, r)
        e0, t0 = r.e2e_mean - ge @ theta0, r.ttft_mean - gt @ theta0
        n1 = max(1.0, r.out_mean - 1)
        A += [W_E2E * ge / st.e2e_mean, W_TTFT * gt / st.ttft_mean, W_DTPT * (ge - gt) / n1 / st.dtpt(outputs)]
        b += [W_E2E * (1 - e0 / st.e2e_mean), W_TTFT * (1 - t0 / st.ttft_mean),
              W_DTPT * (1 - (e0 - t0) / n1 / st.dtpt(outputs))]
    for i in range(len(lay.tps) + 2):  # eta[tp]..., eta_tok, eta_attn
        row = np.zeros(len(theta0))
        row[i] = W_PRIOR
        A.append(row)
        b.append(W_PRIOR)
    return np.array(A), np.array(b)


def solve(lay: Layout, res: Sequence[StageResult], theta0: np.ndarray, outputs: str = "auto") -> np.ndarray:
    A, b = _rows(lay, res, theta0, outputs)
    scale = lay.scale()  # columns scaled to order one so the solver's tolerance treats them alike
    lo, hi = lay.bounds()
    keep = np.abs(A).sum(axis=0) > 0  # a TP degree with no stage left keeps its value
    x = theta0.copy()
    sol = lsq_linear((A * scale)[:, keep], b, bounds=((lo / scale)[keep], (hi / scale)[keep]), method="bvls")
    x[keep] = sol.x * scale[keep]
    return x


def _damped(theta: np.ndarray, target: np.ndarray, floor: np.ndarray) -> np.ndarray:
    """Move part of the way to the linear solution, at most a factor MAX_MOVE per coefficient."""
    step = theta + DAMP * (target - theta)
    lo = np.maximum(theta, floor) * np.exp(-MAX_MOVE)
    hi = np.maximum(theta, floor) * np.exp(MAX_MOVE)
    return np.clip(step, lo, hi)


def linear_predict(lay: Layout, r: StageResult, theta: np.ndarray, theta0: np.ndarray) -> tuple[float, float]:
    """(E2E, TTFT) of a replayed stage moved to theta along its schedule."""
    d = theta - theta0
    ge, gt = _grads(lay, r)
    return r.e2e_mean + ge @ d, r.ttft_mean + gt @ d


def fit_v1(stages: Sequence[Stage], *, window_s: float | None = 150.0, seed: int = 0, iters: int = 10,
           outputs: str = "auto", per_tp_eta: bool = False, log: Callable[[str], None] | None = None) -> V1Fit:
    fit_stages = [s for s in stages if not s.overloaded]
    if not fit_stages:
        raise ValueError("no stage to fit: every stage is overloaded")
    lay = Layout([s.tp for s in fit_stages], per_tp_eta)
    theta = lay.x0()
    floor = np.r_[np.full(len(lay.tps), 0.05), 0.05, 0.05, 1e-4, 1e-6, 1e-4]
    best: tuple[float, np.ndarray, list[StageResult]] | None = None
    with tempfile.TemporaryDirectory() as tmp:

        def simulate_at(theta: np.ndarray) -> list[StageResult]:
            """Replay every stage under the profile ``theta``; keep it if its loss is the lowest."""
            nonlocal best
            prof = write_profile(Path(tmp) / "fit.yaml", "fit", stack_entry(lay, theta, description="fit", engine="",
                                                                          fitted_on={}))
            res = [replay(s, str(prof), seed=seed, window_s=window_s, outputs=outputs) for s in fit_stages]
            loss = simulated_loss(lay, res, theta, outputs)
            if best is None or loss < best[0]:
                best = (loss, theta.copy(), res)
            return res

        for it in range(1, iters + 1):
            res = simulate_at(theta)
            # a stage the simulator overloads has no useful gradient (its queue, not its steps,
            # sets the latency): leave it out of this iteration's linear step
            usable = [r for r in res if not r.overloaded] or res
            new = _damped(theta, solve(lay, usable, theta, outputs), floor)
            if log:
                c = lay.cpu(new)
                log(f"  iteration {it}: eta {lay.eta(new)}, eta_tok {c[0]:.3f}, eta_attn {c[1]:.3f}, "
                    f"cpu {c[2] * 1e3:.3f} ms, per seq {c[3] * 1e6:.1f} us, prefill {c[4] * 1e3:.3f} ms")
            moved = np.max(np.abs(new - theta) / np.maximum(np.abs(theta), floor))
            theta = new
            if moved < 0.005:
                break
        simulate_at(theta)
    assert best is not None
    if log:
        log(f"  kept the iterate with the lowest simulated loss ({best[0]:.5f})")
    return V1Fit(lay, best[1], tuple(best[2]), it)


def simulated_loss(lay: Layout, res: Sequence[StageResult], theta: np.ndarray, outputs: str = "auto") -> float:
    """Sum of squared weighted relative errors of the replays themselves (not linearized)."""
    A, b = _rows(lay, res, theta, outputs)
    return float(np.sum((A @ theta - b) ** 2))


def leave_one_run_out(fit: V1Fit, outputs: str = "auto") -> dict[str, tuple[float, float]]:
    """Refit without each run (linearized at the final schedule) and predict its stages:
    stage key -> (E2E, TTFT). The held-out figure of the end-to-end fit."""
    out = {}
    for run in sorted({r.stage.run for r in fit.results}):
        rest = [r for r in fit.results if r.stage.run != run]
        th = solve(fit.layout, rest, fit.theta, outputs) if rest else fit.theta
        for r in fit.results:
            if r.stage.run == run:
                out[r.stage.key] = linear_predict(fit.layout, r, th, fit.theta)
    return out
