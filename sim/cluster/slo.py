"""Latency SLOs and their attainment, judged on a lower confidence bound.

``--slo-ttft-p99 0.5`` means "at least 99 % of requests have TTFT <= 0.5 s". Each such target
is checked on the Wilson lower bound of the share of requests that meet it, not on the point
estimate, so a rate passes only when we are ~95 % sure it meets the target. ``--attainment A``
adds a joint target: the share of requests meeting *every* threshold must be >= A (DistServe's
goodput definition). Requests that did not finish (rejected, unfinished) count as misses.

Caveat: requests in one run are not independent (they queue behind each other), so the Wilson
bound is somewhat optimistic; seeds (independent windows) and the routed replay on the full
trace are the other guards.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import Literal

import numpy as np
import pandas as pd
from scipy.stats import norm

from sim.errors import ConfigError

Metric = Literal["ttft", "tpot", "e2e"]
METRICS: tuple[Metric, ...] = ("ttft", "tpot", "e2e")
QUANTILES = {"p50": 0.50, "p90": 0.90, "p99": 0.99}


@dataclass(frozen=True, slots=True)
class SloTarget:
    metric: Metric
    quantile: float      # 0.99 for p99: this share of requests must meet ``seconds``
    seconds: float

    @property
    def name(self) -> str:
        return f"{self.metric}_p{round(self.quantile * 100):d}<={self.seconds:g}s"


@dataclass(frozen=True, slots=True)
class Slo:
    targets: tuple[SloTarget, ...]
    attainment: float | None = None   # joint share meeting every threshold
    confidence: float = 0.95          # one-sided level of the Wilson lower bound

    def __post_init__(self) -> None:
        if not self.targets:
            raise ConfigError("no SLO given: pass at least one of --slo-ttft-p99, --slo-tpot-p99, --slo-e2e-p99 (or p50/p90)")
        for t in self.targets:
            if not (t.seconds > 0 and math.isfinite(t.seconds)):
                raise ConfigError(f"--slo-{t.metric}-p{round(t.quantile * 100)} {t.seconds!r}: must be > 0 seconds")
        if self.attainment is not None and not 0 < self.attainment < 1:
            raise ConfigError(f"--attainment {self.attainment!r}: must be in (0, 1), e.g. 0.99")

    def thresholds(self) -> dict[Metric, float]:
        """Strictest threshold per metric (for the joint attainment)."""
        out: dict[Metric, float] = {}
        for t in self.targets:
            out[t.metric] = min(out.get(t.metric, math.inf), t.seconds)
        return out

    def describe(self) -> str:
        s = ", ".join(t.name for t in self.targets)
        return s + (f", joint attainment >= {self.attainment:g}" if self.attainment else "")


def wilson_lower(hits: int, n: int, confidence: float = 0.95) -> float:
    """One-sided Wilson score lower bound of a binomial proportion (0 when ``n == 0``)."""
    if n <= 0:
        return 0.0
    z = normal_quantile(confidence)
    p = hits / n
    den = 1 + z * z / n
    centre = p + z * z / (2 * n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, (centre - half) / den)


@cache
def normal_quantile(confidence: float) -> float:
    """The one-sided normal quantile z of ``confidence`` (scipy's ``ppf`` costs about 0.1 ms a
    call; the SLO monitor asks at every check)."""
    return float(norm.ppf(confidence))


@dataclass(frozen=True, slots=True)
class SloEval:
    n: int
    passed: bool
    attainment: float          # joint share meeting every threshold
    attainment_lower: float    # its Wilson lower bound
    failing: tuple[str, ...]   # names of targets whose lower bound misses
    shares: dict[str, float]   # per target name: share meeting it

    @property
    def failing_metrics(self) -> set[str]:
        return {f.split("_")[0] for f in self.failing}


def _ok(req: pd.DataFrame, metric: Metric, seconds: float) -> np.ndarray:
    done = (req["status"] == "finished").to_numpy()
    v = req[f"{metric}_s"].to_numpy(np.float64)
    if metric == "tpot":  # one-token outputs have no TPOT: they meet any TPOT target
        v = np.where(np.isnan(v) & done, 0.0, v)
    return done & (v <= seconds)


def evaluate(req: pd.DataFrame, slo: Slo) -> SloEval:
    """Check every target of ``slo`` on a request frame (``sim.run.simulate.request_frame`` columns)."""
    n = len(req)
    failing: list[str] = []
    shares: dict[str, float] = {}
    joint = np.ones(n, dtype=bool)
    for metric, sec in slo.thresholds().items():
        joint &= _ok(req, metric, sec)
    for t in slo.targets:
        hits = int(_ok(req, t.metric, t.seconds).sum())
        shares[t.name] = hits / n if n else 0.0
        if wilson_lower(hits, n, slo.confidence) < t.quantile:
            failing.append(t.name)
    jh = int(joint.sum())
    lower = wilson_lower(jh, n, slo.confidence)
    if slo.attainment is not None and lower < slo.attainment:
        failing.append(f"joint>={slo.attainment:g}")
    return SloEval(n=n, passed=not failing and n > 0, attainment=jh / n if n else 0.0,
                   attainment_lower=lower, failing=tuple(failing), shares=shares)
