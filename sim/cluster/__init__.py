"""The multi-replica runtime: instances behind a router in one SimPy environment.

- routing: :mod:`~sim.cluster.policies` (round-robin, least-outstanding-tokens, prefix-affinity),
  :mod:`~sim.cluster.scorers` (llm-d's weighted scorers, Dynamo's KV cost), the router's view of
  each cache :mod:`~sim.cluster.view` from KV events :mod:`~sim.cluster.events`, and the live
  router process :mod:`~sim.cluster.router` (decisions at each arrival; fast-forward stays on);
- replays: :mod:`~sim.cluster.replay` (a fleet of unified replicas), :mod:`~sim.cluster.whatif`
  (fleet prefix reuse between a floor and a ceiling; ``kvsim trace prefix``),
  :mod:`~sim.cluster.balance` (per-instance load, idle- and queue-replica warnings);
- disaggregation: :mod:`~sim.cluster.spec` (a cluster file; every key and default in
  :mod:`~sim.cluster.schema`), :mod:`~sim.cluster.disagg` (the
  runtime), :mod:`~sim.cluster.pd` (P/D as KV connectors), :mod:`~sim.cluster.links` (shared links);
- SLOs: :mod:`~sim.cluster.slo`, :mod:`~sim.cluster.monitor`.

The planner (:mod:`sim.fleet`) sizes fleets on top of it.
"""
