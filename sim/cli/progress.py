"""Progress for long commands: a rich bar on a terminal, plain lines every few seconds otherwise.

Logs, CI and ``| tee`` get ``simulating: 2,048/6,000 requests (34%)`` lines instead of nothing;
counters never read past their total (a stage that does more work than it announced grows its
total instead of printing ``9/6``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

PLAIN_EVERY_S = 5.0


class Stages:
    """``update(stage, done, total)`` for any number of named stages."""

    def __init__(self, console: Console, unit: str, every_s: float = PLAIN_EVERY_S,
                 bar: Progress | None = None) -> None:
        self.console, self.unit, self.every_s, self.bar = console, unit, every_s, bar
        self.tasks: dict[str, Any] = {}
        self.last: dict[str, float] = {}
        self.t0 = time.monotonic()

    def update(self, stage: str, done: int, total: int) -> None:
        total = max(total, done)  # never "9/6"
        if self.bar is not None:
            if stage not in self.tasks:
                self.tasks[stage] = self.bar.add_task(stage, total=total)
            self.bar.update(self.tasks[stage], completed=done, total=total)
            return
        now = time.monotonic()
        first = stage not in self.last
        if first or done >= total or now - self.last[stage] >= self.every_s:
            self.last[stage] = now
            pct = f" ({100 * done / total:.0f}%)" if total else ""
            unit = f" {self.unit}" if self.unit else ""
            self.console.print(f"{stage}: {done:,}/{total:,}{unit}{pct}, {now - self.t0:.0f} s", highlight=False)


@contextmanager
def progress(console: Console, unit: str = "", *, enabled: bool = True,
             every_s: float = PLAIN_EVERY_S) -> Iterator[Stages]:
    """A :class:`Stages` that draws a bar on a terminal and prints plain lines elsewhere."""
    if not enabled:
        yield Stages(Console(quiet=True), unit, every_s)
        return
    if console.is_terminal:
        with Progress(TextColumn("{task.description}"), BarColumn(),
                      TextColumn("{task.completed}/{task.total}" + (f" {unit}" if unit else "")),
                      TimeElapsedColumn(), console=console, transient=True) as bar:
            yield Stages(console, unit, every_s, bar)
    else:
        yield Stages(console, unit, every_s)
