"""Stop a replay as soon as its SLO verdict can only be "fail".

A request's miss is certain before the run ends: TTFT (e2e) is missed once ``now - arrival``
passes the threshold without a first (last) token, and TPOT once ``(now - first_token) /
(output - 1)`` passes it -- finishing right now could not bring it below. Misses only grow, and
the Wilson lower bound falls with them, so once ``wilson_lower(n - misses, n)`` is below a
target the verdict is fixed and the rest of the replay is wasted work. Overloaded probes are
the slowest runs of a capacity search (queues make long runs), so this roughly halves it.
"""

from __future__ import annotations

import numpy as np

from sim.cluster.slo import Slo, wilson_lower
from sim.request import Request, Status


class SloMonitor:
    """``monitor(now) -> True`` when ``slo`` is certain to fail on ``reqs[skip:]``."""

    def __init__(self, slo: Slo, reqs: list[Request], skip: int = 0) -> None:
        self.slo, self.reqs = slo, reqs[skip:]
        self.arrival = np.array([r.arrival_s for r in self.reqs])
        self.out = np.array([r.output_tokens for r in self.reqs], dtype=np.float64)

    def _state(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ft = np.fromiter((r.first_token_s for r in self.reqs), np.float64, len(self.reqs))
        fin = np.fromiter((r.finish_s for r in self.reqs), np.float64, len(self.reqs))
        rej = np.fromiter((r.status == Status.REJECTED for r in self.reqs), bool, len(self.reqs))
        return ft, fin, rej

    def misses(self, now: float) -> dict[str, np.ndarray]:
        """Per metric: a boolean mask of requests that certainly miss it (given ``now``)."""
        ft, fin, rej = self._state()
        arrived = self.arrival <= now
        ft_end = np.where(ft >= 0, ft, now)
        fin_end = np.where(fin >= 0, fin, now)
        out: dict[str, np.ndarray] = {}
        for metric, thr in self.slo.thresholds().items():
            if metric == "ttft":
                m = ft_end - self.arrival > thr
            elif metric == "e2e":
                m = fin_end - self.arrival > thr
            else:
                started = ft >= 0
                tpot = (fin_end - np.where(started, ft, now)) / np.maximum(self.out - 1, 1)
                m = started & (self.out > 1) & (tpot > thr)
            out[metric] = arrived & (m | rej)
        return out

    def failing(self, now: float) -> tuple[str, ...]:
        """Names of the targets (as in ``SloEval.failing``) already certain to fail."""
        n = len(self.reqs)
        if n == 0:
            return ()
        miss = self.misses(now)
        conf, strictest = self.slo.confidence, self.slo.thresholds()
        out = [t.name for t in self.slo.targets
               # misses() used the strictest threshold per metric: only sound for that target
               if t.seconds == strictest[t.metric]
               and wilson_lower(n - int(miss[t.metric].sum()), n, conf) < t.quantile]
        if self.slo.attainment is not None:
            joint = np.zeros(n, dtype=bool)
            for m in miss.values():
                joint |= m
            if wilson_lower(n - int(joint.sum()), n, conf) < self.slo.attainment:
                out.append(f"joint>={self.slo.attainment:g}")
        return tuple(out)

    def __call__(self, now: float) -> bool:
        return bool(self.failing(now))
