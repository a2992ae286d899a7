"""Autoscaler schedule: cold-start lag, cooldown, and cost vs static peak."""

from __future__ import annotations

import numpy as np

from sim.fleet.autoscale import AutoscalePolicy, active_fn, costs, schedule


def test_cold_start_delays_serving_and_costs_less_than_static_peak() -> None:
    t = np.arange(10) * 60.0
    rate = np.array([5, 5, 20, 20, 20, 20, 5, 5, 5, 5], dtype=float)    # one replica = 5 QPS
    pol = AutoscalePolicy(bucket_s=60, cold_start_s=120, cooldown_s=60)
    s = schedule(t, rate, 5.0, pol)
    assert list(s["wanted"]) == [1, 1, 4, 4, 4, 4, 1, 1, 1, 1]
    # reacts at t=180 to the bucket that ended; new replicas serve 120 s later
    assert list(s["billed"][:6]) == [1, 1, 1, 4, 4, 4]
    assert list(s["serving"][:6]) == [1, 1, 1, 1, 1, 4]
    assert s["short"].sum() == 3                                      # t=120..240 under-provisioned
    c = costs(s, static_replicas=4, usd_per_replica_hour=3.0, bucket_s=60)
    assert c.oracle_cost < c.autoscale_cost < c.static_cost
    assert active_fn(s, 60)(250.0) == 1 and active_fn(s, 60)(300.0) == 4
