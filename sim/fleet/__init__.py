"""Fleet sizing (``kvsim plan``): per-replica capacity, routed validation, autoscaling, cost.

Modules, one concept each:

- :mod:`sim.cluster.slo` -- SLO targets and attainment with a Wilson lower bound.
- :mod:`sim.fleet.workload` -- trace windows per seed, rate scaling, peak demand.
- :mod:`sim.fleet.capacity` -- max QPS one replica sustains (bisection over seeds, CI).
- :mod:`sim.fleet.binding` -- what limits a candidate (KV memory, batch cap, decode, prefill).
- :mod:`sim.cluster.replay` -- many replicas behind a router in one SimPy environment.
- :mod:`sim.fleet.autoscale` -- replicas over time with a cold-start delay vs static peak.
- :mod:`sim.fleet.prices` -- $/GPU-hour from the catalog or a user YAML.
- :mod:`sim.fleet.spec` -- what a plan is asked for and the demand measured on the trace.
- :mod:`sim.fleet.sizing` -- replicas for a demand, given one replica's capacity.
- :mod:`sim.fleet.table` -- the ranked plan table, cheapest passing row first.
- :mod:`sim.fleet.planner` -- the whole pipeline, run on :mod:`sim.run.executor` (local or Ray).
- :mod:`sim.fleet.tuning` -- the batch-limit search every shape gets under ``--disagg`` (a fair baseline).
- :mod:`sim.fleet.xpyd_plan` -- xPyD groups as planner units (``--disagg``): probe, replay, parser.
- :mod:`sim.fleet.breakdown` -- TTFT in parts (queue, prefill, KV wait, transfer, first decode), busy shares.
- :mod:`sim.fleet.disagg_report` -- plan.md's section: where disaggregation wins and why.
- :mod:`sim.fleet.xpyd` -- the standalone unified-vs-xPyD study on a fixed GPU count.
"""
