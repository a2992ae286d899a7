"""A decode-only step's time from its folded terms: the one scalar expression.

``t = dense + eta_attn (head + a_kv ctx + a_fl ctx + a_pg pages)``, raised to ``roof`` then
``floor``, plus ``tail``; plus ``sched`` (sync) or at least ``sched`` (async). The operations
and their order are ``step_time``'s (:mod:`sim.cost.bulk`, :class:`~sim.cost.bulk.DecodeTerms`),
so the float is the same bit for bit.

Compiled by Cython where a C compiler is (``decode_time.pxd``: C doubles, no fused
multiply-add), so that a compiled loop calls it as a C function
(:mod:`sim.engine.fastforward.run_layout`, :mod:`sim.engine.fastforward.quiet_steps`); else it
runs as this Python.
"""

from __future__ import annotations


def step_time(dense: float, eta_attn: float, head: float, a_kv: float, a_fl: float, a_pg: float, roof: float,
              floor: float, tail: float, sched: float, is_async: bool, ctx: int, pages: int) -> float:
    """The step time of ``ctx`` context tokens and ``pages`` pages read (module docstring)."""
    t = dense + eta_attn * (head + a_kv * ctx + a_fl * (0.0 + ctx) + a_pg * pages)
    if t < roof:
        t = roof
    if t < floor:
        t = floor
    t += tail
    if not is_async:
        return t + sched
    return t if t > sched else sched
