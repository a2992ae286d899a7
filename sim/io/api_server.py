"""What a run's summary says about its API server (sim/frontend fills it in)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ApiServerInfo:
    """``summary.json``'s ``api_server``: empty ``profile`` when none is modelled (count 0)."""

    profile: str = ""
    source: str = ""
    count: int = 0
    endpoint: str = ""
