"""``vllm bench serve --save-result`` results as replayable stages.

vLLM writes one JSON object per run (``--save-result``), or appends one per line to the same file
(``--append-result``). Each object holds the run's settings (``model_id``, ``num_prompts``,
``request_rate``, ``burstiness``, ``max_concurrency``), its totals (``completed``, ``duration``,
``total_input_tokens``, ``total_output_tokens``, ``request_throughput``) and its latency
statistics in ms (``mean_ttft_ms``, ``mean_tpot_ms``, ``mean_e2el_ms``, ...); with
``--save-detailed`` also each request's ``input_lens`` / ``output_lens`` (in send order), which
the replay then sends exactly instead of the mean lengths.

The client sends ``num_prompts`` requests open loop: the first at once, then gaps drawn from a
gamma distribution of shape ``burstiness`` at ``request_rate`` (``inf``: all at once), and waits
for every answer. A stage read here therefore *drains* (``Stage.drains``): the measured means
cover every completed request, and the replay sends the same count and measures all of them.

With ``--max-concurrency N`` the client is a closed loop: at most N requests in flight, the next
(in order) sent when one finishes, and not before its rate time. Its stage's ``arrival`` is
``"closed loop of N"`` (:func:`closed_loop_of`), which the replay sends through kvsim's own
closed-loop clients (:mod:`sim.run.clients`), behind the API server as ``vllm bench serve`` ran
(one, solved as the run goes: :mod:`sim.frontend.live`); the run's name says it is a closed loop.
What kvsim cannot replay is refused: a request-rate ramp.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from sim.errors import ConfigError

SUFFIXES = (".json", ".jsonl")
CLOSED_LOOP = "closed loop of "      # Stage.arrival of a --max-concurrency run, then N
CLOSED_NOTE = "closed loop {n}"  # in the run's name
#: (where, run, fields): one result, named by its file (and line), as ``Stage`` fields
# (``serving_runs`` makes the stage: this module knows vLLM's keys, not the stage)
Record = tuple[str, str, dict[str, Any]]


def json_objects(path: Path) -> list[tuple[int, Any]]:
    """(line, object) of a JSON file: one document (line 1), else JSON lines (blank lines skipped)."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read ({e})") from None
    try:
        return [(1, json.loads(text))]
    except json.JSONDecodeError:
        pass
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                out.append((i, json.loads(line)))
            except json.JSONDecodeError as e:
                raise ConfigError(f"{path}:{i}: not JSON ({e.msg}); expected a `vllm bench serve` "
                                  "result or one per line (--append-result)") from None
    if not out:
        raise ConfigError(f"{path}: empty")
    return out


def is_bench(d: Any) -> bool:
    return isinstance(d, dict) and "mean_ttft_ms" in d and "completed" in d


def closed_loop_of(arrival: str) -> int | None:
    """N of a stage sent by a closed loop of N clients (``--max-concurrency N``), else None."""
    return int(arrival.removeprefix(CLOSED_LOOP)) if arrival.startswith(CLOSED_LOOP) else None


def _slots(d: dict[str, Any], where: str) -> int | None:
    """The run's ``max_concurrency`` (None, 0 or "None": open loop), a whole number >= 1."""
    cap = d.get("max_concurrency")
    if cap in (None, 0, "None"):
        return None
    try:
        x = float(cap) if not isinstance(cap, bool) else 0.0
    except (TypeError, ValueError):
        x = 0.0
    n = int(x) if math.isfinite(x) and x == int(x) else 0
    if n < 1:
        raise ConfigError(f"{where}: max_concurrency {cap!r}: must be a whole number >= 1 (or null)")
    return n


def _refuse_unreplayable(d: dict[str, Any], where: str) -> None:
    if d.get("ramp_up_strategy") not in (None, "None"):
        raise ConfigError(f"{where}: ramp_up_strategy {d['ramp_up_strategy']!r}: kvsim replays one request "
                          "rate per run; calibrate on runs without --ramp-up-strategy")


def _lens(d: dict[str, Any], where: str) -> tuple[tuple[int, int], ...]:
    """(prompt, output) of each completed request in send order (a failed one has output 0)."""
    ins, outs = d.get("input_lens"), d.get("output_lens")
    if not ins or not outs:
        return ()
    if len(ins) != len(outs):
        raise ConfigError(f"{where}: input_lens ({len(ins)}) and output_lens ({len(outs)}) differ in length")
    return tuple((max(1, int(p)), int(o)) for p, o in zip(ins, outs, strict=True) if int(o) > 0)


def bench_record(d: dict[str, Any], where: str) -> dict[str, Any]:
    """One result object's facts: the replayed load, lengths (``lens``, or the mean lengths
    ``mean_in`` / ``mean_out``) and measured means, in seconds."""
    _refuse_unreplayable(d, where)
    try:
        done, dur = int(d["completed"]), float(d["duration"])
        n = int(d.get("num_prompts") or done)
        burst = float(d.get("burstiness") or 1.0)
        slots = _slots(d, where)
        mean_out = d["total_output_tokens"] / done
        e2e = float(d["mean_e2el_ms"]) / 1e3 if "mean_e2el_ms" in d else \
            (float(d["mean_ttft_ms"]) + float(d["mean_tpot_ms"]) * (mean_out - 1)) / 1e3
        rec = {"rate": float(d.get("request_rate", "inf")), "duration_s": dur, "sent": n, "ok": done,
               "failures": n - done, "arrival": f"{CLOSED_LOOP}{slots}" if slots else
               "poisson" if burst == 1.0 else f"gamma (burstiness {burst:g})",
               "burstiness": burst, "lens": _lens(d, where), "mean_in": d["total_input_tokens"] / done,
               "mean_out": mean_out, "e2e_mean": e2e, "ttft_mean": float(d["mean_ttft_ms"]) / 1e3,
               "served_rate": float(d["request_throughput"]), "model_id": str(d.get("model_id") or "")}
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as x:
        raise ConfigError(f"{where}: not a `vllm bench serve` result ({x!r})") from None
    if not (math.isfinite(e2e) and e2e > 0 and rec["ttft_mean"] > 0 and burst > 0 and rec["rate"] > 0):
        raise ConfigError(f"{where}: a `vllm bench serve` result needs positive mean E2E and TTFT, "
                          "request_rate and burstiness")
    return rec


def bench_file(path: Path, objs: list[tuple[int, Any]]) -> list[Record]:
    """Every result of one file: run ``stem`` for one object, ``stem:LINE`` for JSON lines."""
    out = []
    for line, d in objs:
        where = f"{path}:{line}" if len(objs) > 1 else str(path)
        if not is_bench(d):
            raise ConfigError(f"{where}: not a `vllm bench serve` result (no mean_ttft_ms / completed)")
        rec = bench_record(d, where)
        run = f"{path.stem}:{line}" if len(objs) > 1 else path.stem
        slots = closed_loop_of(rec["arrival"])
        out.append((where, run if slots is None else f"{run} ({CLOSED_NOTE.format(n=slots)})", rec))
    return out


def bench_folder(folder: Path) -> list[Record]:
    """Every ``vllm bench serve`` result in ``folder`` (``*.json``, ``*.jsonl``, by name); other
    JSON documents there (a server config, a summary) are not results and are passed over."""
    out = []
    for p in sorted(x for x in folder.iterdir() if x.is_file() and x.suffix in SUFFIXES):
        objs = json_objects(p)
        if any(is_bench(d) for _, d in objs):
            out += bench_file(p, objs)
    return out
