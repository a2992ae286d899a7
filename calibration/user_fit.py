"""Fit a serving-stack profile on your own ``vllm bench serve`` runs (``kvsim calibrate fit --from``).

The stack's six terms (one set for every TP degree of the runs) enter every step time linearly (sim/cost/stack.py, CUDA-graph form)::

    t = eta t_fixed + eta_tok t_dense + eta_attn t_attn + cpu_s + per_seq_s B + prefill_s [prefill step]

so, with one replay's schedule held, each stage's mean E2E, TTFT and decode time per token are
linear in theta = (eta, eta_tok, eta_attn, cpu_s, per_seq_s, prefill_s) (``replay.StageResult``).
Every stage of every file is fitted at once: replay all of them under theta, solve the bounded
linear least squares on their relative errors, take a damped step, repeat until theta settles, and
keep the iterate whose replays (not their linearization) fit best.

Physical bounds: kernel multipliers >= 1 (an isolated kernel timing is a lower bound inside an
engine), overheads >= 0. A term the data would push past a bound is reported as a finding
(:mod:`calibration.user_findings`), not shipped. Weak priors (multipliers 1, overheads near
vLLM V1's) settle what the data leave open; with one stage that is most of the split, and the fit
says so. The band is the fit's own leave-one-stage-out error: refit without stage i, replay stage i.

Replays go through :func:`calibration.replay.replay_stages`, the path of ``calibrate check``, and
the reported in-sample errors are replays of the very profile written (its rounded coefficients),
so ``calibrate check`` with the profile prints the same numbers.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import lsq_linear

from calibration.replay import StageResult, replay_stages
from calibration.serving_runs import Stage
from calibration.v1_fit import Layout, stack_entry, write_profile

NAMES = ("eta", "eta_tok", "eta_attn", "cpu_s", "per_seq_s", "prefill_s")
LO = np.array([1.0, 1.0, 1.0, 0.0, 0.0, 0.0])
HI = np.array([10.0, 10.0, 10.0, 0.5, 0.01, 0.5])
SCALE = np.array([1.0, 1.0, 1.0, 1e-3, 1e-5, 1e-3])     # columns of order one for the solver
X0 = np.array([1.0, 1.0, 1.0, 2e-3, 1e-6, 1e-3])        # start and prior: about vLLM V1's CPU terms
PRIOR = np.array([0.05, 0.05, 0.05, 0.01, 0.01, 0.01])  # weak pulls to X0 (relative): a tie-breaker
W_E2E, W_TTFT, W_DTPT = 1.0, 0.3, 1.0
DAMP, MAX_MOVE = 0.7, np.log(1.6)   # part of the linear step taken; at most x1.6 per iteration
FLOOR = np.array([0.05, 0.05, 0.05, 1e-4, 1e-7, 1e-4])   # a term's smallest scale for relative moves
ITERS, LOSO_ITERS, SETTLED = 12, 6, 0.005


@dataclass(frozen=True, slots=True)
class Iterate:
    theta: np.ndarray
    results: tuple[StageResult, ...]
    loss: float
    iterations: int


@dataclass(frozen=True, slots=True)
class UserFit:
    stages: tuple[Stage, ...]
    theta: np.ndarray                    # as written (the profile's digits)
    results: tuple[StageResult, ...]     # replays of the written profile: what `calibrate check` prints
    heldout: tuple[float, ...]           # each stage's mean E2E replayed under its leave-one-out refit
    iterations: int
    free: np.ndarray                     # the linear solution at the final schedules without the bounds


def _rows(res: Sequence[StageResult], theta0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A theta = b: weighted relative residuals of every stage's E2E, TTFT, decode time per token,
    then the priors."""
    A, b = [], []
    for r in res:
        st = r.stage
        ge, gt = r.grad_e2e, r.grad_ttft
        e0, t0 = r.e2e_mean - ge @ theta0, r.ttft_mean - gt @ theta0
        n1 = max(1.0, r.out_mean - 1)
        A += [W_E2E * ge / st.e2e_mean, W_TTFT * gt / st.ttft_mean, W_DTPT * (ge - gt) / n1 / st.dtpt()]
        b += [W_E2E * (1 - e0 / st.e2e_mean), W_TTFT * (1 - t0 / st.ttft_mean),
              W_DTPT * (1 - (e0 - t0) / n1 / st.dtpt())]
    for i in range(len(NAMES)):
        row = np.zeros(len(NAMES))
        row[i] = PRIOR[i] / X0[i]
        A.append(row)
        b.append(PRIOR[i])
    return np.array(A), np.array(b)


def solve(res: Sequence[StageResult], theta0: np.ndarray, bounded: bool = True) -> np.ndarray:
    """The linear least-squares theta at ``res``' schedules, within the physical bounds (or free)."""
    A, b = _rows(res, theta0)
    bounds = (LO / SCALE, HI / SCALE) if bounded else (-np.inf, np.inf)
    return np.asarray(lsq_linear(A * SCALE, b, bounds=bounds, method="bvls").x * SCALE)


def loss_of(res: Sequence[StageResult], theta: np.ndarray) -> float:
    """Sum of squared weighted relative errors of the replays themselves (and the priors at theta)."""
    A, b = _rows(res, theta)
    return float(np.sum((A @ theta - b) ** 2))


class Replayer:
    """Replays stages under theta, each theta written to its own profile file."""

    def __init__(self, folder: Path, tps: Sequence[int], window_s: float | None, seed: int) -> None:
        self.folder, self.layout, self.window_s, self.seed, self.count = folder, Layout(tps), window_s, seed, 0

    def profile(self, theta: np.ndarray, path: Path | None = None, name: str = "fit") -> Path:
        self.count += 1
        e = stack_entry(self.layout, theta, description="fit", engine="", fitted_on={})
        return write_profile(path or self.folder / f"theta-{self.count}.yaml", name, e)

    def __call__(self, stages: Sequence[Stage], theta: np.ndarray) -> list[StageResult]:
        return replay_stages(stages, str(self.profile(theta)), window_s=self.window_s, seed=self.seed)


def iterate(stages: Sequence[Stage], theta: np.ndarray, run: Replayer, iters: int,
            log: Callable[[str], None] | None = None) -> Iterate:
    """Replay, solve, step (damped), until theta settles; the best replayed iterate."""
    best: Iterate | None = None
    for it in range(1, iters + 2):
        res = run(stages, theta)
        loss = loss_of(res, theta)
        if best is None or loss < best.loss:
            best = Iterate(theta.copy(), tuple(res), loss, it)
        if it > iters:
            break
        target = solve(res, theta)
        base = np.maximum(theta, FLOOR)
        new = np.clip(theta + DAMP * (target - theta), base * np.exp(-MAX_MOVE), base * np.exp(MAX_MOVE))
        new = np.clip(new, LO, HI)
        if log:
            log(f"  iteration {it}: loss {loss:.5f}; next " + ", ".join(f"{n} {fmt_term(n, v)}" for n, v in zip(NAMES, new, strict=True)))
        moved = float(np.max(np.abs(new - theta) / base))
        theta = new
        if moved < SETTLED:
            iters = it  # one more replay, at the settled theta
    assert best is not None
    return best


def fmt_term(name: str, v: float) -> str:
    if name.startswith("eta"):
        return f"{v:.3f}"
    return f"{v * 1e6:.2f} us" if name == "per_seq_s" else f"{v * 1e3:.3f} ms"


def leave_one_stage_out(stages: Sequence[Stage], theta: np.ndarray, run: Replayer,
                        log: Callable[[str], None] | None = None) -> list[float]:
    """Each stage's mean E2E replayed under a refit on the other stages (from the full fit's theta)."""
    out = []
    for i, st in enumerate(stages):
        rest = [s for j, s in enumerate(stages) if j != i]
        fit = iterate(rest, theta, run, LOSO_ITERS)
        out.append(run([st], fit.theta)[0].e2e_mean)
        if log:
            log(f"  left out {st.key}: refit in {fit.iterations} iteration(s), replayed E2E {out[-1]:.3f} s "
                f"vs {st.e2e_mean:.3f} s measured")
    return out


def fit_user(stages: Sequence[Stage], *, out: Path, name: str, window_s: float | None = None, seed: int = 0,
             log: Callable[[str], None] | None = None) -> UserFit:
    """Fit every stage at once, refit leaving each out, write the profile to ``out`` and replay it."""
    with tempfile.TemporaryDirectory() as tmp:
        run = Replayer(Path(tmp), [s.tp for s in stages], window_s, seed)
        best = iterate(stages, X0.copy(), run, ITERS, log)
        if log:
            log(f"  kept iteration {best.iterations} (lowest replayed loss {best.loss:.5f})")
        held = leave_one_stage_out(stages, best.theta, run, log) if len(stages) > 1 else []
        free = solve(best.results, best.theta, bounded=False)
        run.profile(best.theta, out, name=name)
    theta = np.array([float(f"{x:.5g}") for x in best.theta])  # the digits stack_entry writes
    res = replay_stages(stages, str(out), window_s=window_s, seed=seed)
    return UserFit(tuple(stages), theta, tuple(res), tuple(held), best.iterations, free)
