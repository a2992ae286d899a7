"""Entry point: ``kvsim``. Errors caused by user input print one line, never a traceback."""

from __future__ import annotations

import importlib
import sys

import typer

from sim.errors import KvsimError

app = typer.Typer(
    name="kvsim",
    help="KV-cache memory simulator and GPU capacity planner for LLM serving.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

@app.callback()
def _root() -> None:
    """KV-cache memory simulator and GPU capacity planner for LLM serving."""


# Sub-command modules. Each exposes either `register(app)` (top-level commands) or
# `app` (a command group named by GROUPS[module]).
COMMAND_MODULES = ("sim.cli.simulate", "sim.cli.budget", "sim.cli.sweep", "sim.cli.plot",
                   "sim.cli.report", "sim.cli.plan")
GROUPS = {"sim.cli.trace": "trace", "sim.cli.calibrate": "calibrate"}


# command name -> module, so `kvsim trace info` does not import matplotlib, scipy or Ray
COMMANDS = {"simulate": "sim.cli.simulate", "budget": "sim.cli.budget", "sweep": "sim.cli.sweep",
            "plot": "sim.cli.plot", "report": "sim.cli.report", "plan": "sim.cli.plan",
            "trace": "sim.cli.trace", "calibrate": "sim.cli.calibrate"}
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
    try:
        app(standalone_mode=False)
    except KvsimError as e:
        typer.secho(f"error: {e}", err=True, fg="red")
        sys.exit(2)
    except typer.Abort:
        sys.exit(130)
    except Exception as e:  # click usage errors (typer may vendor its own click)
        show = getattr(e, "show", None)
        code = getattr(e, "exit_code", None)
        if callable(show) and isinstance(code, int):
            show()
            sys.exit(code)
        if type(e).__name__ == "Exit" and isinstance(code, int):
            sys.exit(code)
        raise


if __name__ == "__main__":
    main()
