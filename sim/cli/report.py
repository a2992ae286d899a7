"""`kvsim report paper-fig2`: the vLLM paper's Fig. 2 as a Markdown report.

Only the command wiring; the experiment is :mod:`sim.experiments.paper_fig2`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sim.errors import ConfigError
from sim.experiments.paper_fig2 import write_report

app = typer.Typer(help="Reproduce figures of the vLLM paper as Markdown reports.", no_args_is_help=True,
                  add_completion=False)


@app.command("paper-fig2")
def paper_fig2(
    out: Annotated[Path, typer.Option("--out", help="Report directory.")] = Path("reports/paper-fig2"),
    requests: Annotated[int, typer.Option("--requests", help="Requests in the synthetic trace (>= 1).")] = 1000,
    rate: Annotated[float, typer.Option("--rate", help="Poisson arrival rate, req/s (> 0).")] = 2.0,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the synthetic trace (>= 0).")] = 0,
) -> None:
    """Fig. 2: KV memory by category for Orca Max/Pow2/Oracle (buddy slab) and vLLM (paged, 16)."""
    if requests < 1:
        raise ConfigError(f"--requests {requests}: must be >= 1")
    if not rate > 0 or rate == float("inf"):
        raise ConfigError(f"--rate {rate}: must be a finite number > 0 (requests per second)")
    if seed < 0:
        raise ConfigError(f"--seed {seed}: must be >= 0")
    tab = write_report(out, requests, rate, seed)
    typer.echo(tab[["system", "token_states", "token_states_saturated", "paper_token_states"]].round(1).to_string(index=False))
    typer.echo(f"wrote {out}/README.md, fig2.png, fig2.svg, fig2_table.csv")


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="report")
