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


def compiled_switches() -> list[tuple[str, Any, str, Any]]:
    """Each optional C twin as ``(name, owner, attribute, off)``: the attribute of a module (or
    class) that holds it, and what it holds where it was not built or ``KVSIM_PURE_PYTHON`` is
    set (None, or the Python reference itself). The modules compiled by Cython
    (:func:`cython_modules`) have no switch: a process runs them compiled or not."""
    from sim.kv import paged_prefix

    return [("tables", paged_prefix, "TABLE_LOOPS", None)]


def cython_modules() -> list[tuple[str, Any]]:
    """The modules compiled by Cython from their own source (``setup.py``), as ``(name, module)``."""
    from sim.cost import decode_time
    from sim.engine import step_batch
    from sim.engine.fastforward import decoders, quiet_steps, run_layout, steps
    from sim.io import fill, step_fold
    from sim.kv import block_pool, free_queue
    from sim.sched import waiting_pass

    return [("pool", block_pool), ("free_queue", free_queue), ("step_fold", step_fold), ("run_layout", run_layout),
            ("decode_time", decode_time), ("admit", waiting_pass), ("fill", fill), ("quiet_steps", quiet_steps),
            ("land", steps), ("batch", step_batch), ("leave", decoders)]


def compiled_loops() -> list[str]:
    """The optional compiled loops this process runs: the same results, another speed."""
    from sim.compiled import is_compiled

    return [*(name for name, owner, attr, off in compiled_switches() if not _is(vars(owner)[attr], off)),
            *(name for name, module in cython_modules() if is_compiled(module))]


def _is(held: Any, off: Any) -> bool:
    """``held`` is the reference ``off`` (a staticmethod compared by the function it wraps)."""
    return _unwrap(held) is _unwrap(off)


def _unwrap(x: Any) -> Any:
    return x.__func__ if isinstance(x, staticmethod) else x


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
