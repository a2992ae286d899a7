"""Warnings for input kvsim accepts but a user should hear about: one ``warning:`` line each."""

from __future__ import annotations

from collections.abc import Iterable

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
