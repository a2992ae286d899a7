"""Warnings for input kvsim accepts but a user should hear about: one ``warning:`` line each."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import typer

from sim.config.schema import block_size_warning


def warn(message: str) -> None:
    typer.secho(f"warning: {message}", err=True, fg="yellow")


def check_block_sizes(sizes: Iterable[object]) -> None:
    """Warn once per block size vLLM 0.33 would refuse (kvsim still simulates it)."""
    for bs in dict.fromkeys(sizes):
        msg = block_size_warning(bs) if isinstance(bs, int) and not isinstance(bs, bool) else None
        if msg:
            warn(msg)


def check_servegen_rate(trace: Any, rate_scale: float = 1.0, total_rate: float | None = None) -> None:
    """A ServeGen archive built without ``--total-rate`` runs at its published units taken as req/s
    (an undocumented scale: 792 req/s for language_m-large): say so, with the flags that fix it."""
    if trace.format != "servegen" or total_rate is not None or rate_scale != 1.0:
        return
    df = trace.df
    span = float(df["arrival_s"].max() - df["arrival_s"].min()) if len(df) > 1 else 0.0
    rate = f"{len(df) / span:,.1f} req/s" if span > 0 else "its published rate"
    warn(f"{trace.path}: a ServeGen archive replays its published rates as absolute ({rate}, "
         f"{len(df):,} requests); pass --total-rate REQ_PER_S (or --rate-scale) for the load you serve")
