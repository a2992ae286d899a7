"""Measured serving benchmarks as stages kvsim can replay: what was sent, what came back.

Readers (``read_results``):

- the ``experiments.json`` layout of ``calibration/data/public/vllm-0.15.1-h100`` (inference-perf
  lifecycle metrics per stage, with the vLLM server arguments and the workload spec);
- a folder of inference-perf reports (``stage_*_lifecycle_metrics.json``, its ``successes`` /
  ``failures`` / ``load_summary`` blocks), with the server arguments given by the caller;
- ``vllm bench serve --save-result`` JSON, one object per file or, with ``--append-result``, one
  per line; a folder of them (:mod:`calibration.bench_serve`). Several paths: :func:`read_many`,
  which also reconciles the served model the files name (``model_id``) with ``--model``.

A stage is *overloaded* when the server did not keep up: more than 1 % of its requests failed, or
it served under 90 % of the offered rate. Those stages are predicted (kvsim must say "overloaded"),
never fitted: their latencies are set by client time-outs and queue length, not by step times. A
``vllm bench serve`` run *drains*: it sends a fixed number of prompts and waits for every answer,
so a slow server shows in its latencies (replayed whole), not in time-outs; only failures mark it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from calibration.bench_serve import Record, bench_file, bench_folder, is_bench, json_objects
from sim.errors import ConfigError

QUANTILES = (("min", 0.0), ("p1", 0.01), ("p5", 0.05), ("p10", 0.10), ("p25", 0.25), ("median", 0.5),
             ("p75", 0.75), ("p90", 0.90), ("p95", 0.95), ("p99", 0.99), ("max", 1.0))
MODELS = {"meta-llama/llama-2-7b-hf": "llama-2-7b", "codellama/codellama-34b-instruct-hf": "codellama-34b"}


@dataclass(frozen=True, slots=True)
class Stage:
    """One load stage of one run: the workload to replay and the measured per-stage means."""

    run: str
    index: int
    model: str                                   # kvsim catalog key (or a config.json path)
    tp: int
    gpu: str
    rate: float                                  # requests per second offered
    duration_s: float
    sent: int
    ok: int
    failures: int
    arrival: str                                 # "constant" | "poisson"
    prompt_q: tuple[tuple[float, float], ...]    # (quantile, tokens) of the requests served
    output_q: tuple[tuple[float, float], ...]
    requested_output: int | None                 # max_tokens asked for (ignore_eos: what the engine generated)
    ignore_eos: bool
    groups: int                                  # shared system prompts (0: none)
    system_prompt_len: int
    prompts_per_group: int = 0                   # distinct prompts per group, sent in a cycle (0: all unique)
    engine: dict[str, int] = field(default_factory=dict)  # max_num_batched_tokens, max_num_seqs, max_model_len
    e2e_mean: float = math.nan
    ttft_mean: float = math.nan
    served_rate: float = math.nan
    workload: str = ""
    drains: bool = False                         # a fixed number of prompts, all measured (bench serve)
    burstiness: float = 1.0                      # gamma shape of the inter-arrival times (1: Poisson)
    lens: tuple[tuple[int, int], ...] = ()       # (prompt, output) per request in send order, when saved
    source: str = ""                             # file (and line) the stage was read from
    model_id: str = ""                           # the served model as the results name it

    @property
    def key(self) -> str:
        return f"{self.run}#{self.index} ({self.rate:g} req/s)"

    @property
    def overloaded(self) -> bool:
        failed = self.failures > 0.01 * max(1, self.sent)
        if self.drains:
            return failed
        slow = not math.isnan(self.served_rate) and self.served_rate < 0.9 * self.rate
        return failed or slow

    def output_tokens(self, use: str = "auto") -> float:
        """Mean output tokens the engine generated. ``auto``: the requested max_tokens under
        ignore_eos (the engine generates exactly that; the measured quantiles count the tokens of
        the returned text re-tokenized, which drops special tokens), else the measured mean."""
        if use in ("auto", "requested") and self.ignore_eos and self.requested_output:
            return float(self.requested_output)
        if self.lens:  # each request's own count (bench serve, saved in detail): the exact mean
            return sum(o for _, o in self.lens) / len(self.lens)
        return _qmean(self.output_q)

    def dtpt(self, use: str = "auto") -> float:
        """Measured decode time per output token: (E2E - TTFT) / (output tokens - 1), means."""
        return (self.e2e_mean - self.ttft_mean) / max(1.0, self.output_tokens(use) - 1)


def _qmean(q: tuple[tuple[float, float], ...]) -> float:
    xs = [v for _, v in q]
    return sum(xs) / len(xs) if xs else math.nan


def _quantiles(d: dict[str, Any] | None, where: str) -> tuple[tuple[float, float], ...]:
    if not isinstance(d, dict):
        raise ConfigError(f"{where}: missing length quantiles")
    out = tuple((q, float(d[k])) for k, q in QUANTILES if d.get(k) is not None)
    if len(out) < 2:
        raise ConfigError(f"{where}: needs at least two of {', '.join(k for k, _ in QUANTILES)}")
    return out


def catalog_model(name: str) -> str:
    return MODELS.get(name.lower(), name)


def _experiments(doc: dict[str, Any], path: Path, gpu: str) -> list[Stage]:
    out = []
    for e_i, e in enumerate(doc["experiments"]):
        where = f"{path}: experiments[{e_i}]"
        try:
            cfg, data = e["exp_config"], e.get("data") or {}
            sp = data.get("shared_prefix") or {}
            engine = {k: int(cfg[k]) for k in ("max_num_batched_tokens", "max_num_seqs", "max_model_len") if k in cfg}
            for i, s in enumerate(e["stages"]):
                w = f"{where}.stages[{i}]"
                out.append(Stage(
                    run=str(e.get("experiment", f"run{e_i}")), index=i, model=catalog_model(str(cfg["model"])),
                    tp=int(cfg.get("tensor_parallelism", 1)), gpu=gpu, rate=float(s["rate"]),
                    duration_s=float(s["duration"]), sent=int(s["sent"]), ok=int(s["ok"]),
                    failures=int(s["failures"]), arrival="constant" if e.get("load_type") == "constant" else "poisson",
                    prompt_q=_quantiles(s.get("prompt_len"), f"{w}.prompt_len"),
                    output_q=_quantiles(s.get("output_len"), f"{w}.output_len"),
                    requested_output=int(sp["output_len"]) if sp.get("output_len") else None,
                    ignore_eos=bool(e.get("ignore_eos", False)), groups=int(sp.get("num_groups", 0)),
                    system_prompt_len=int(sp.get("system_prompt_len", 0)),
                    prompts_per_group=int(sp.get("num_prompts_per_group", 0)), engine=engine,
                    e2e_mean=float(s["e2e"]["mean"]), ttft_mean=float(s["ttft"]["mean"]),
                    served_rate=float((s.get("throughput") or {}).get("requests_per_sec", math.nan)),
                    workload=str(e.get("workload", ""))))
        except (KeyError, TypeError, ValueError) as x:
            raise ConfigError(f"{where}: malformed run ({x!r})") from None
    return out


def _lifecycle(path: Path, base: Stage) -> list[Stage]:
    """inference-perf ``stage_N_lifecycle_metrics.json`` files of one run."""
    out = []
    for i, p in enumerate(sorted(path.glob("stage_*_lifecycle_metrics.json"))):
        d = _load(p)
        try:
            ok, bad, load = d["successes"], d.get("failures") or {}, d.get("load_summary") or {}
            lat = ok["latency"]
            n_ok, n_bad = int(ok["count"]), int(bad.get("count", 0))
            out.append(replace(
                base, run=path.name, index=i, rate=float(load.get("requested_rate", base.rate)),
                duration_s=float(load.get("send_duration", base.duration_s)), sent=n_ok + n_bad, ok=n_ok,
                failures=n_bad, prompt_q=_quantiles(ok.get("prompt_len"), f"{p}: prompt_len"),
                output_q=_quantiles(ok.get("output_len"), f"{p}: output_len"),
                e2e_mean=float(lat["request_latency"]["mean"]), ttft_mean=float(lat["time_to_first_token"]["mean"]),
                served_rate=float((ok.get("throughput") or {}).get("requests_per_sec", math.nan))))
        except (KeyError, TypeError, ValueError) as x:
            raise ConfigError(f"{p}: not an inference-perf lifecycle report ({x!r})") from None
    return out


def _load(p: Path) -> dict[str, Any]:
    try:
        d = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{p}: cannot read JSON ({e})") from None
    if not isinstance(d, dict):
        raise ConfigError(f"{p}: expected a JSON object")
    return d


def quantiles_of(xs: list[int], mean: float) -> tuple[tuple[float, float], ...]:
    """QUANTILES of a sample (nearest rank), or a point mass at ``mean`` without one."""
    if not xs:
        return ((0.0, mean), (1.0, mean))
    s = sorted(float(x) for x in xs)
    return tuple((q, s[min(len(s) - 1, int(q * (len(s) - 1)))]) for _, q in QUANTILES)


def _bench(records: list[Record], base: Stage) -> list[Stage]:
    out = []
    for where, run, rec in records:
        f = dict(rec)
        mean_in, mean_out = f.pop("mean_in"), f.pop("mean_out")
        out.append(replace(base, run=run, index=0, source=where, drains=True,
                           prompt_q=quantiles_of([p for p, _ in f["lens"]], mean_in),
                           output_q=quantiles_of([o for _, o in f["lens"]], mean_out), **f))
    return out


def _read_one(path: Path, base: Stage, gpu: str) -> tuple[list[Stage], bool]:
    """(stages, whether the layout names each stage's model itself: experiments.json)."""
    if path.is_dir():
        if (path / "experiments.json").exists():
            return _experiments(_load(path / "experiments.json"), path / "experiments.json", gpu), True
        stages = _lifecycle(path, base) or _bench(bench_folder(path), base)
        if not stages:
            raise ConfigError(f"{path}: no experiments.json, no stage_*_lifecycle_metrics.json and no "
                              "`vllm bench serve` results (*.json, *.jsonl)")
        return stages, False
    objs = json_objects(path)
    d = objs[0][1]
    if len(objs) == 1 and isinstance(d, dict) and "experiments" in d:
        return _experiments(d, path, gpu), True
    if len(objs) == 1 and isinstance(d, dict) and "successes" in d:
        return _lifecycle(path.parent, base), False
    if any(is_bench(o) for _, o in objs):
        return _bench(bench_file(path, objs), base), False
    raise ConfigError(f"{path}: not experiments.json, an inference-perf report or a `vllm bench serve` result")


def known_model(name: str) -> str | None:
    """The catalog key of a catalog key or a Hugging Face id kvsim knows, else None."""
    from sim.model.catalog import hf_ids, model_catalog

    key = catalog_model(name).lower()
    return key if key in model_catalog() else hf_ids().get(key)


def served_model(stages: list[Stage], flag: str | None) -> str:
    """The one model the stages were served with: ``--model`` (a catalog key, a Hugging Face id,
    or a config.json path), checked against every ``model_id`` the results name, or else the
    one catalog model they all name. Disagreement or an unknown name is a one-line error."""
    mine = (known_model(flag) or catalog_model(flag)) if flag else None
    keys: dict[str, str] = {}
    for s in stages:
        if not s.model_id:
            continue
        k = known_model(s.model_id)
        if k is None and mine is None:
            raise ConfigError(f"{s.source}: model_id {s.model_id!r} is not a model kvsim knows (a catalog key or "
                              "Hugging Face id): give --model (a catalog key or a config.json path)")
        if k is not None and mine is not None and k != mine and known_model(mine) is not None:
            raise ConfigError(f"{s.source}: model_id {s.model_id!r} is {k}, but --model {flag}: "
                              "these results were not served with that model")
        if k is not None:
            keys.setdefault(k, s.source)
    if mine is None and len(keys) > 1:
        (a, wa), (b, wb) = list(keys.items())[:2]
        raise ConfigError(f"{wa} names {a} but {wb} names {b}: fit one served model at a time")
    if mine is None and not keys:
        raise ConfigError(f"{stages[0].source or stages[0].run}: give --model (the results do not name the served model)")
    return mine or next(iter(keys))


def _unique_runs(stages: list[Stage]) -> list[Stage]:
    """Two files of one name (in two folders) keep apart: the second run gets ``~2``."""
    seen: dict[tuple[str, int], int] = {}
    out = []
    for s in stages:
        k = (s.run, s.index)
        seen[k] = seen.get(k, 0) + 1
        out.append(s if seen[k] == 1 else replace(s, run=f"{s.run}~{seen[k]}"))
    return out


def read_many(paths: list[Path], *, gpu: str = "h100", model: str | None = None, tp: int = 1,
              engine: dict[str, int] | None = None, ignore_eos: bool = False) -> list[Stage]:
    """Every stage of several results files or folders (module docstring), with the served model
    reconciled (:func:`served_model`); experiments.json layouts name their own models."""
    base = Stage(run="", index=0, model=catalog_model(model or ""), tp=tp, gpu=gpu, rate=1.0,
                 duration_s=60.0, sent=0, ok=0, failures=0, arrival="poisson", prompt_q=(), output_q=(),
                 requested_output=None, ignore_eos=ignore_eos, groups=0, system_prompt_len=0, engine=engine or {})
    if not paths:
        raise ConfigError("no results given")
    named: list[Stage] = []
    rest: list[Stage] = []
    for p in paths:
        if not p.exists():
            raise ConfigError(f"{p}: no such file or folder")
        got, by_file = _read_one(p, replace(base, run=p.name, source=str(p)), gpu)
        (named if by_file else rest).extend(got)
    if rest:
        m = served_model(rest, model)
        rest = [replace(s, model=m) for s in rest]
    return _unique_runs(named + rest)


def read_results(path: Path, *, gpu: str = "h100", model: str | None = None, tp: int = 1,
                 engine: dict[str, int] | None = None, ignore_eos: bool = False) -> list[Stage]:
    """Every stage of a results file or folder (see the module docstring for the layouts)."""
    return read_many([path], gpu=gpu, model=model, tp=tp, engine=engine, ignore_eos=ignore_eos)
