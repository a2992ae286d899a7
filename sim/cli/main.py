"""Entry point: ``kvsim``. Errors caused by user input print one line, never a traceback."""

from __future__ import annotations

import importlib
import sys
from typing import Annotated

import typer

from sim import __version__
from sim.cli.group import KvsimGroup

# rich_markup_mode=None: plain click help, which wraps instead of cutting long flag names at 80
# columns and shows `KEY: [values]` literally. KvsimGroup prints user errors as one line.
app = typer.Typer(
    name="kvsim",
    help="KV-cache memory simulator and GPU capacity planner for LLM serving.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    cls=KvsimGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)


def _version(show: bool) -> None:
    if show:
        typer.echo(f"kvsim {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Print the kvsim version and exit.")] = False) -> None:
    """KV-cache memory simulator and GPU capacity planner for LLM serving."""


# Sub-command modules. Each exposes either `register(app)` (top-level commands) or
# `app` (a command group named by GROUPS[module]).
COMMAND_MODULES = ("sim.cli.simulate", "sim.cli.budget", "sim.cli.sweep", "sim.cli.plot",
                   "sim.cli.report", "sim.cli.plan")
GROUPS = {"sim.cli.trace": "trace", "sim.cli.calibrate": "calibrate", "sim.cli.cost": "cost"}


# command name -> module, so `kvsim trace info` does not import matplotlib, scipy or Ray
COMMANDS = {"simulate": "sim.cli.simulate", "budget": "sim.cli.budget", "sweep": "sim.cli.sweep",
            "plot": "sim.cli.plot", "report": "sim.cli.report", "plan": "sim.cli.plan",
            "trace": "sim.cli.trace", "calibrate": "sim.cli.calibrate", "cost": "sim.cli.cost"}
_loaded: set[str] = set()


def _load(only: tuple[str, ...] | None = None) -> None:
    for mod in only or (*COMMAND_MODULES, *GROUPS):
        if mod in _loaded:
            continue
        _loaded.add(mod)
        try:
            m = importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name == mod:
                continue  # optional module not present in this build
            raise
        if mod in GROUPS:
            app.add_typer(m.app, name=GROUPS[mod])
        else:
            m.register(app)


def main() -> None:
    first = next((a for a in sys.argv[1:] if not a.startswith("-")), None)
    _load((COMMANDS[first],) if first in COMMANDS else None)
    app()  # KvsimGroup.main: one-line errors, exit codes


if __name__ == "__main__":
    main()
