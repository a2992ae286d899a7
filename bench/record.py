"""One JSON record per benchmark run: what was measured, when, on what machine, with which cost model.

Every bench prints its figures for people and, through :func:`emit`, one line
``RECORD {...}`` for machines; ``--record FILE`` (every bench has it) appends that record to a
JSON-lines file. ``bench/speed_table.py`` renders the README's Speed section from such a file,
so the section is regenerated from runs, never typed in::

    KVSIM_DATA=DIR python bench/bench_engine.py --record bench/results/speed.jsonl
    python bench/speed_table.py bench/results/speed.jsonl --readme README.md

A record is flat: ``bench`` (the script's name), ``date`` (UTC, minutes), ``machine`` (host,
cores, Python, 1-minute load average at the end of the run, the compiled loops in use), ``cost_model`` (the name the
cost model gives itself, engine version and fit included), ``command`` (argv as run) and the
bench's own figures. Nothing here times anything.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import shlex
import sys
from pathlib import Path
from typing import Any

PREFIX = "RECORD "


def cython_modules() -> list[tuple[str, Any]]:
    """The modules compiled by Cython from their own source (pyproject.toml's ``[tool.kvsim]
    compiled``, which ``setup.py`` builds), as ``(name, module)``: the name without ``sim.``."""
    import importlib
    import tomllib

    names = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["tool"]["kvsim"]["compiled"]
    return [(n.removeprefix("sim."), importlib.import_module(n)) for n in names]


def compiled_loops() -> list[str]:
    """The optional compiled loops this process runs: the same results, another speed."""
    from sim.compiled import is_compiled

    return [name for name, module in cython_modules() if is_compiled(module)]


def machine() -> dict[str, Any]:
    return {"host": platform.node(), "cores": os.cpu_count(), "python": platform.python_version(),
            "system": f"{platform.system()} {platform.machine()}", "load_avg_1m": round(os.getloadavg()[0], 2),
            "compiled_loops": compiled_loops()}


def emit(bench: str, cost_model: str, figures: dict[str, Any], record: Path | None) -> dict[str, Any]:
    """Print the run's record on one line and append it to ``record`` (a JSON-lines file) if named."""
    rec = {"bench": bench, "date": f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC", "machine": machine(),
           "cost_model": cost_model, "command": shlex.join(["python", *sys.argv]), **figures}
    line = json.dumps(rec, sort_keys=False)
    print(PREFIX + line)
    if record is not None:
        record.parent.mkdir(parents=True, exist_ok=True)
        with record.open("a") as f:
            f.write(line + "\n")
    return rec


def read(path: Path) -> list[dict[str, Any]]:
    """The records of a JSON-lines file, in file order; a line that is not a record is an error
    naming the file and line."""
    out = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise SystemExit(f"{path}:{i}: not a JSON record ({e.msg})") from None
        if not isinstance(rec, dict) or "bench" not in rec or "date" not in rec:
            raise SystemExit(f"{path}:{i}: a record needs 'bench' and 'date'")
        out.append(rec)
    return out
