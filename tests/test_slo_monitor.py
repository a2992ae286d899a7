"""The SLO monitor's running counts equal a recount of the whole trace at every check.

The monitor keeps its miss counts as the replay goes and reads only open requests; the model
here recounts every request from scratch at each check (the monitor's definition of a certain
miss, written for reading). Runs cover passing and failing rates, one replica and a live router,
and SLOs on TTFT, TPOT, e2e and joint attainment. The planner's window check, which shares the
monitor's normal quantile, is here too.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, ClassVar

import numpy as np
import pytest

import sim.cluster.replay as replay_mod
from sim.cluster.monitor import SloMonitor
from sim.cluster.replay import replay_fleet
from sim.cluster.slo import Slo, SloTarget, wilson_lower
from sim.errors import ConfigError
from sim.fleet.candidate import Candidate
from sim.fleet.planner import check_window
from sim.fleet.spec import PlanSpec
from sim.fleet.workload import at_qps, draw_window, to_trace
from sim.request import Status
from tests.helpers import req
from workloads.schema import Trace

BASE = {"model": "llama-3.1-8b", "max_num_seqs": 64, "kv_memory": "4GiB", "max_model_len": 8192}
SLOS = {
    "ttft+tpot": Slo((SloTarget("ttft", 0.99, 1.0), SloTarget("tpot", 0.9, 0.05))),
    "e2e+joint": Slo((SloTarget("e2e", 0.9, 20.0), SloTarget("ttft", 0.5, 0.5)), attainment=0.8),
    "tpot two levels": Slo((SloTarget("tpot", 0.99, 0.012), SloTarget("tpot", 0.5, 0.008))),
}


def recount(mon: SloMonitor, now: float) -> tuple[dict[str, int], int]:
    """Certain misses at ``now``, every request read again."""
    reqs = mon.reqs
    ft = np.array([r.first_token_s for r in reqs], dtype=np.float64)
    fin = np.array([r.finish_s for r in reqs], dtype=np.float64)
    rej = np.array([r.status == Status.REJECTED for r in reqs], dtype=bool)
    arrived = mon.arrival <= now
    counts, joint = {}, np.zeros(len(reqs), dtype=bool)
    for metric, thr in mon.slo.thresholds().items():
        first = np.where(ft >= 0, ft, now)
        last = np.where(fin >= 0, fin, now)
        if metric == "ttft":
            m = first - mon.arrival > thr
        elif metric == "e2e":
            m = last - mon.arrival > thr
        else:
            m = (ft >= 0) & (mon.out > 1) & ((last - first) / np.maximum(mon.out - 1, 1) > thr)
        m = arrived & (m | rej)
        counts[metric] = int(m.sum())
        joint |= m
    return counts, int(joint.sum())


class Checked(SloMonitor):
    """The monitor, compared with the recount at each of its checks."""

    checks: ClassVar[list[tuple[dict[str, int], int, dict[str, int], int]]] = []
    verdicts: ClassVar[list[bool]] = []

    def failing(self, now: float) -> tuple[str, ...]:
        out = super().failing(now)
        counts, joint = recount(self, now)
        Checked.checks.append((dict(self.count), self.joint_count, counts, joint))
        n = len(self.reqs)
        expect = any(wilson_lower(n - counts[t.metric], n, self.slo.confidence) < t.quantile
                     for t in self.slo.targets if t.seconds == self.slo.thresholds()[t.metric])
        if self.slo.attainment is not None:
            expect |= wilson_lower(n - joint, n, self.slo.confidence) < self.slo.attainment
        Checked.verdicts.append(bool(out) == expect)
        return out


@pytest.mark.parametrize("slo_name", sorted(SLOS))
@pytest.mark.parametrize("replicas,router", [(1, "round-robin"), (2, "least-outstanding-tokens")])
def test_running_counts_equal_a_full_recount_at_every_check(
        bundled_trace: Trace, monkeypatch: Any, slo_name: str, replicas: int, router: str) -> None:
    monkeypatch.setattr(replay_mod, "SloMonitor", Checked)
    Checked.checks, Checked.verdicts = [], []
    cfg = Candidate("h100", 1).config(BASE)
    window = draw_window(bundled_trace.df, 0, 0, 400, keep=1.0)
    aborted = []
    for qps in (2.0, 8.0, 32.0):
        trace = to_trace(at_qps(window, qps * replicas), "<window>")
        res = replay_fleet([cfg] * replicas, trace, router, stop_on_fail=(SLOS[slo_name], 40), checks=25)
        aborted.append(res.aborted)
    assert len(Checked.checks) >= 10
    for mine, joint, counts, joint_all in Checked.checks:
        assert (mine, joint) == (counts, joint_all)
    assert all(Checked.verdicts)
    assert not aborted[0] and aborted[-1], aborted  # the runs cover a pass and a stop
    assert any(c[2] != dict.fromkeys(c[2], 0) for c in Checked.checks), "some check must count misses"


def test_misses_are_kept_and_late_rejections_still_count() -> None:
    """By hand: a miss stays counted when the late first token comes; a rejection is counted
    when it comes, even for a request no other metric could miss yet (one output token)."""
    slo = Slo((SloTarget("ttft", 0.5, 1.0), SloTarget("tpot", 0.5, 0.1)))
    slow, quick, single = req(0, 8, 4, arrival=0.0), req(1, 8, 4, arrival=0.5), req(2, 8, 1, arrival=0.6)
    late = req(3, 8, 4, arrival=5.0)
    mon = SloMonitor(slo, [slow, quick, single, late])
    assert mon.failing(0.9) == () and mon.count == {"ttft": 0, "tpot": 0}
    quick.first_token_s, quick.finish_s = 0.8, 0.9  # ends within both targets
    mon.update(1.2)
    assert mon.count == {"ttft": 1, "tpot": 0}  # slow: no first token 1.2 s after its arrival
    slow.first_token_s = 1.5  # the late first token does not undo the miss
    single.status = Status.REJECTED
    mon.update(1.6)
    assert mon.count == {"ttft": 2, "tpot": 1} and mon.joint_count == 2
    assert [int(i) for i in mon.open] == [0]  # quick and single ended; slow still runs; late not arrived
    assert recount(mon, 1.6) == (mon.count, mon.joint_count)


def test_a_window_too_small_for_the_quantile_is_refused_and_the_one_it_names_is_enough() -> None:
    """The planner's up-front check (the Wilson bound of n/n hits): one line naming the least
    window, and that window passes the check (the quantile is the monitor's cached one)."""
    spec = PlanSpec(gpus=["h100"], tps=[1], slo=Slo((SloTarget("ttft", 0.99, 1.0),)), base={}, prices={}, window=50)
    with pytest.raises(ConfigError) as e:
        check_window(spec, 10_000)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("--window 50: ")
    least = int(re.search(r"--window >= (\d+)", msg).group(1))  # type: ignore[union-attr]
    check_window(dataclasses.replace(spec, window=least), 10_000)
    with pytest.raises(ConfigError):
        check_window(dataclasses.replace(spec, window=least - 1), 10_000)
