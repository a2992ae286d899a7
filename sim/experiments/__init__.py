"""Reproductions of published results, each a plain module the CLI's ``report`` group calls.

- :mod:`sim.experiments.paper_fig2` -- the vLLM paper's Fig. 2 (KV memory waste per system).
"""
