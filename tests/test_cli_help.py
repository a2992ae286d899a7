"""``--help`` as a newcomer reads it at 80 columns: full flag names, help for every flag, the
aliases users type (``--tp``, ``-tp``), ``-h`` and ``--version``."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import sim.cli.main as cli_main
from sim import __version__

cli_main._load()
runner = CliRunner()
SLICE = "workloads/data/azure_conv_slice.csv"


def kvsim(*args: str) -> tuple[int, str]:
    res = runner.invoke(cli_main.app, list(args), env={"COLUMNS": "80", "TERMINAL_WIDTH": "80"})
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    return res.exit_code, res.output


def commands(cmd: Any = None, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    cmd = cmd or typer.main.get_command(cli_main.app)
    subs = getattr(cmd, "commands", None)
    if not subs:
        yield path, cmd
        return
    for name, sub in subs.items():
        yield from commands(sub, (*path, name))


ALL = list(commands())


def test_every_command_is_walked() -> None:
    names = {" ".join(p) for p, _ in ALL}
    assert {"simulate", "budget", "sweep", "plan", "plot heatmap", "report paper-fig2", "trace info"} <= names


@pytest.mark.parametrize("path,cmd", ALL, ids=[" ".join(p) for p, _ in ALL])
def test_help_at_80_columns_shows_every_flag_in_full_with_help(path: tuple[str, ...], cmd: Any) -> None:
    code, out = kvsim(*path, "--help")
    assert code == 0
    assert "…" not in out, "a flag name or help text was cut off"
    assert max(len(line) for line in out.splitlines()) <= 100
    for p in cmd.params:
        for name in (*p.opts, *p.secondary_opts):
            if name.startswith("-"):
                assert re.search(rf"(^|[\s,/]){re.escape(name)}([\s,/]|$)", out, re.M), f"{name} missing"
        assert p.help, f"{' '.join(path)} {p.opts[0]} has no help text"


@pytest.mark.parametrize("flag,words", [
    ("--max-num-seqs", ["1,024", "256"]),
    ("--max-num-batched-tokens", ["16,384", "8,192"]),
    ("--max-model-len", ["context length"]),
    ("--seed", ["default 0"]),
    ("--block-size", ["default 16", "1, 8, 16, 32, 64, 128, 256"]),
])
def test_simulate_knobs_state_their_defaults(flag: str, words: list[str]) -> None:
    _, out = kvsim("simulate", "--help")
    text = " ".join(out.split())  # help wraps; compare with single spaces
    entry = text[text.index(flag):][:400]
    for w in words:
        assert w in entry, (flag, w)


def test_plan_slo_flags_and_trace_info_json_have_help() -> None:
    _, out = kvsim("plan", "--help")
    text = " ".join(out.split())
    for m in ("ttft", "tpot", "e2e"):
        for q in ("p50", "p90", "p99"):
            assert f"--slo-{m}-{q} <float> SLO: the {q}" in text
    assert "seconds" in text
    _, out = kvsim("trace", "info", "--help")
    assert "JSON object" in " ".join(out.split())


def test_sweep_grid_help_keeps_brackets() -> None:
    _, out = kvsim("sweep", "--help")
    assert "KEY: [values]" in " ".join(out.split())


def test_dash_h_and_version() -> None:
    code, out = kvsim("-h")
    assert code == 0 and "Usage: kvsim" in out and "--version" in out
    code, out = kvsim("trace", "info", "-h")
    assert code == 0 and "Usage: kvsim trace info" in out
    code, out = kvsim("--version")
    assert code == 0 and out.strip() == f"kvsim {__version__}"


@pytest.mark.parametrize("spelling", ["--tp", "-tp", "--tensor-parallel-size"])
def test_budget_and_plan_accept_every_tp_spelling(spelling: str) -> None:
    code, out = kvsim("budget", "--json", "--kv-memory", "10GiB", spelling, "2")
    assert code == 0, out
    assert json.loads(out)["tensor_parallel_size"] == 2
    # plan parses the flag; its own check refuses degree 0 before any simulation
    code, out = kvsim("plan", SLICE, spelling, "0", "--slo-ttft-p99", "1")
    assert code == 2 and "degrees must be >= 1" in out
