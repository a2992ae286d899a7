"""What every reader provides: a content sniffer and a chunk iterator of normalized rows."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from workloads.rows import BadRows


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """Format-specific knobs. Unused ones are ignored by readers that don't need them.

    Attributes:
        models: BurstGPT: keep only these ``Model`` values (empty = all).
        log_types: BurstGPT: keep only these ``Log Type`` values (empty = all).
        rate: length-only tables: Poisson arrival rate in req/s; ``None`` puts every request
            at t=0 (an offline batch, as Vidur/Sarathi use these files).
        seed: seed of the arrival process for length-only tables.
        servegen: keyword arguments for the ServeGen builder (see ``workloads.servegen``).
    """

    models: tuple[str, ...] = ()
    log_types: tuple[str, ...] = ()
    rate: float | None = None
    seed: int = 0
    servegen: dict[str, object] = field(default_factory=dict)


@dataclass(slots=True)
class ReadContext:
    """Per-read state handed to a reader: where to report bad rows and notes for the user."""

    path: Path
    bad: BadRows
    opts: ReadOptions
    notes: list[str] = field(default_factory=list)


ChunkReader = Callable[[ReadContext], Iterator[pd.DataFrame]]


@dataclass(frozen=True, slots=True)
class Reader:
    """A trace format.

    Attributes:
        name: the ``--format`` name.
        sniff: ``sniff(first_line)`` is True when the file looks like this format.
        read: yields chunks with normalized columns plus ``source_line``.
        rebase: arrival times are absolute; shift them so the first request arrives at 0.
        columns: the columns (CSV) or keys (JSON) the format needs; detection names the
            missing ones when a header resembles this format but ``sniff`` rejects it.
    """

    name: str
    sniff: Callable[[str], bool]
    read: ChunkReader
    rebase: bool = False
    columns: tuple[str, ...] = ()
