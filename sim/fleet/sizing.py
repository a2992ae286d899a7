"""Replicas for a demand: ``N = ceil(peak x (1 + headroom) / capacity)``.

One rule, used by the planner (to size the fleet it validates) and by the table (the
"replicas_math" column), so the two can never disagree.
"""

from __future__ import annotations

import math


def size(peak_qps: float, capacity: float, headroom: float = 0.0) -> int:
    """Replicas so that ``replicas x capacity >= peak x (1 + headroom)`` (0 if capacity is 0)."""
    if capacity <= 0:
        return 0
    return max(1, math.ceil(peak_qps * (1 + headroom) / capacity - 1e-9))
