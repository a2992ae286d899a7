"""Links share their bandwidth fairly (processor sharing), by hand (sim/cluster/links.py)."""

from __future__ import annotations

import pytest
import simpy

from sim.cluster.links import Link, link_kinds, make_link
from sim.errors import ConfigError

MB = 1e6


def run(starts: list[tuple[float, float]], bw: float = 1e9, latency: float = 0.0) -> tuple[list[float], Link]:
    """Transfers ``(start time, bytes)`` on one link; their completion times."""
    env = simpy.Environment()
    link = Link(env, "l", bw, latency)
    ends = [0.0] * len(starts)

    def go(i: int, t0: float, n: float):  # type: ignore[no-untyped-def]
        yield env.timeout(t0)
        link.transfer(n, lambda t: ends.__setitem__(i, t))

    for i, (t0, n) in enumerate(starts):
        env.process(go(i, t0, n))
    env.run()
    return ends, link


def test_a_transfer_alone_takes_latency_plus_bytes_over_bandwidth() -> None:
    ends, _ = run([(0.0, 10 * MB)], latency=0.002)
    assert ends == [pytest.approx(0.002 + 0.010)]


def test_unequal_transfers_share_then_the_big_one_runs_alone() -> None:
    """10 MB and 5 MB from t=0 on 1 GB/s: both at 0.5 GB/s until the small one ends at 10 ms
    (5 MB moved each), then the big one's last 5 MB alone: 15 ms."""
    ends, link = run([(0.0, 10 * MB), (0.0, 5 * MB)])
    assert ends == [pytest.approx(0.015), pytest.approx(0.010)]
    assert link.bytes_moved == pytest.approx(15 * MB)


def test_a_late_joiner_slows_the_first_transfer_down() -> None:
    """A (10 MB) alone for 5 ms moves 5 MB; B (5 MB) joins: both have 5 MB at 0.5 GB/s -> both
    end at 15 ms. The link is busy 15 ms of 20."""
    ends, link = run([(0.0, 10 * MB), (0.005, 5 * MB)])
    assert ends == [pytest.approx(0.015), pytest.approx(0.015)]
    assert link.utilisation(0.020) == pytest.approx(0.75)


def test_lanes_multiply_the_per_gpu_bandwidth_and_kinds_carry_sources() -> None:
    env = simpy.Environment()
    link = make_link(env, "p->d", {"kind": "nvlink4"}, lanes=2)
    assert link.bandwidth == pytest.approx(2 * 450e9)
    assert link.latency == pytest.approx(10e-6)
    assert all(k.source for k in link_kinds().values())
    with pytest.raises(ConfigError, match="bandwidth must be > 0"):
        Link(env, "bad", 0.0, 0.0)
