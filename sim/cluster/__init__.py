"""The multi-replica runtime: replicas behind a router in one SimPy environment, the fleet
replay, the SLO monitor. The planner (:mod:`sim.fleet`) sizes fleets on top of it."""
