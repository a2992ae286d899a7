"""A sweep point and its identity.

A point's key hashes its full resolved config (every SimConfig field, not only the swept ones)
plus the trace's content hash (:func:`workloads.schema.content_hash`), so the same simulation
gets the same key whatever grid it came from, and an edited trace gets new keys. Resume
(``store.py``) is nothing more than "skip keys already recorded". A closed loop's client count
(``max_concurrency``, no config field) is hashed too, so 4 and 8 clients are two points; an open
loop adds nothing, so a sweep recorded before clients existed resumes with its own keys.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Point:
    """One simulation to run: the resolved config, the trace, and the swept keys' values."""

    key: str
    config: dict[str, Any]
    trace_path: str
    trace_hash: str
    columns: dict[str, Any] = field(default_factory=dict)
    max_concurrency: int | None = None  # the closed loop's clients (sim/run/clients.py); None: open loop


def point_key(config: dict[str, Any], trace_hash: str, max_concurrency: int | None = None) -> str:
    blob = json.dumps(config, sort_keys=True, default=str) + "|" + trace_hash
    if max_concurrency is not None:
        blob += f"|max_concurrency={max_concurrency}"
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
