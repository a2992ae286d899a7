"""Stop a replay as soon as its SLO verdict can only be "fail".

A request's miss is certain before the run ends: TTFT (e2e) is missed once ``now - arrival``
passes the threshold without a first (last) token, and TPOT once ``(now - first_token) /
(output - 1)`` passes it -- finishing right now could not bring it below. Misses only grow, and
the Wilson lower bound falls with them, so once ``wilson_lower(n - misses, n)`` is below a
target the verdict is fixed and the rest of the replay is wasted work. Overloaded probes are
the slowest runs of a capacity search (queues make long runs), so this roughly halves it.

The counts are kept as the run goes: a miss stays a miss (a first or last token not yet set can
only come later, so the quantity that passed its threshold only grows), and a finished or
rejected request is settled for good. Each check reads only the requests that have arrived
and are still open, not the whole trace (a validation replays all of it, checked about 40 times).
"""

from __future__ import annotations

import numpy as np

from sim.cluster.slo import Slo, wilson_lower
from sim.request import Request, Status


class SloMonitor:
    """``monitor(now) -> True`` when ``slo`` is certain to fail on ``reqs[skip:]``."""

    def __init__(self, slo: Slo, reqs: list[Request], skip: int = 0) -> None:
        self.slo, self.reqs = slo, reqs[skip:]
        n = len(self.reqs)
        self.arrival = np.array([r.arrival_s for r in self.reqs], dtype=np.float64)
        self.out = np.array([r.output_tokens for r in self.reqs], dtype=np.float64)
        self.order = np.argsort(self.arrival, kind="stable")  # requests in arrival order
        self.arrived_s = self.arrival[self.order]
        self.thresholds = slo.thresholds()  # the strictest per metric
        self.missed = {m: np.zeros(n, dtype=bool) for m in self.thresholds}
        self.joint = np.zeros(n, dtype=bool)  # a miss of any metric
        self.count = dict.fromkeys(self.thresholds, 0)
        self.joint_count = 0
        self.open = np.zeros(0, dtype=np.int64)  # arrived, neither ended nor missing everything
        self.taken = 0  # requests of ``order`` taken into ``open``

    def update(self, now: float) -> None:
        """Count the misses certain at ``now`` (requests arrived by then)."""
        k = int(np.searchsorted(self.arrived_s, now, side="right"))
        idx = np.concatenate((self.open, self.order[self.taken:k])) if k > self.taken else self.open
        self.taken = max(k, self.taken)
        if not idx.size:
            return
        sub = [self.reqs[i] for i in idx.tolist()]
        ft = np.fromiter((r.first_token_s for r in sub), np.float64, len(sub))
        fin = np.fromiter((r.finish_s for r in sub), np.float64, len(sub))
        rej = np.fromiter((r.status == Status.REJECTED for r in sub), bool, len(sub))
        arrival, out = self.arrival[idx], self.out[idx]
        ft_end, fin_end = np.where(ft >= 0, ft, now), np.where(fin >= 0, fin, now)
        every = np.ones(len(sub), dtype=bool)  # missing every metric: nothing left to count
        anym = np.zeros(len(sub), dtype=bool)
        for metric, thr in self.thresholds.items():
            if metric == "ttft":
                m = ft_end - arrival > thr
            elif metric == "e2e":
                m = fin_end - arrival > thr
            else:
                started = ft >= 0
                tpot = (fin_end - ft_end) / np.maximum(out - 1, 1)
                m = started & (out > 1) & (tpot > thr)
            m |= rej
            seen = self.missed[metric]
            self.count[metric] += int((m & ~seen[idx]).sum())
            seen[idx] |= m
            every &= m
            anym |= m
        self.joint_count += int((anym & ~self.joint[idx]).sum())
        self.joint[idx] |= anym
        self.open = idx[~(every | rej | (fin >= 0))]

    def failing(self, now: float) -> tuple[str, ...]:
        """Names of the targets (as in ``SloEval.failing``) already certain to fail."""
        n = len(self.reqs)
        if n == 0:
            return ()
        self.update(now)
        conf, strictest = self.slo.confidence, self.thresholds
        out = [t.name for t in self.slo.targets
               # the counts use the strictest threshold per metric: only sound for that target
               if t.seconds == strictest[t.metric]
               and wilson_lower(n - self.count[t.metric], n, conf) < t.quantile]
        if self.slo.attainment is not None and wilson_lower(n - self.joint_count, n, conf) < self.slo.attainment:
            out.append(f"joint>={self.slo.attainment:g}")
        return tuple(out)

    def __call__(self, now: float) -> bool:
        return bool(self.failing(now))
