"""Measured serving benchmarks as stages kvsim can replay: what was sent, what came back.

Readers (``read_results``):

- the ``experiments.json`` layout of ``calibration/data/public/vllm-0.15.1-h100`` (inference-perf
  lifecycle metrics per stage, with the vLLM server arguments and the workload spec);
- a folder of inference-perf reports (``stage_*_lifecycle_metrics.json``, its ``successes`` /
  ``failures`` / ``load_summary`` blocks), with the server arguments given by the caller;
- ``vllm bench serve --save-result`` JSON (``request_rate``, ``num_prompts``, ``mean_ttft_ms``,
  ``mean_e2el_ms``, ``input_lens`` / ``output_lens`` when saved in detail).

A stage is *overloaded* when the server did not keep up: more than 1 % of its requests failed, or
it served under 90 % of the offered rate. Those stages are predicted (kvsim must say "overloaded"),
never fitted: their latencies are set by client time-outs and queue length, not by step times.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

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
    engine: dict[str, int] = field(default_factory=dict)  # max_num_batched_tokens, max_num_seqs, max_model_len
    e2e_mean: float = math.nan
    ttft_mean: float = math.nan
    served_rate: float = math.nan
    workload: str = ""

    @property
    def key(self) -> str:
        return f"{self.run}#{self.index} ({self.rate:g} req/s)"

    @property
    def overloaded(self) -> bool:
        failed = self.failures > 0.01 * max(1, self.sent)
        slow = not math.isnan(self.served_rate) and self.served_rate < 0.9 * self.rate
        return failed or slow

    def output_tokens(self, use: str = "auto") -> float:
        """Mean output tokens the engine generated. ``auto``: the requested max_tokens under
        ignore_eos (the engine generates exactly that; the measured quantiles count the tokens of
        the returned text re-tokenized, which drops special tokens), else the measured mean."""
        if use in ("auto", "requested") and self.ignore_eos and self.requested_output:
            return float(self.requested_output)
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
                    system_prompt_len=int(sp.get("system_prompt_len", 0)), engine=engine,
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


def _bench_serve(d: dict[str, Any], path: Path, base: Stage) -> list[Stage]:
    """``vllm bench serve`` result JSON (one stage)."""
    try:
        n = int(d.get("num_prompts") or d["completed"])
        done, dur = int(d["completed"]), float(d["duration"])
        rate = float(d.get("request_rate", "inf"))
        if not math.isfinite(rate):
            rate = n / dur
        ins, outs = d.get("input_lens"), d.get("output_lens")

        def q_of(xs: list[float] | None, mean: float) -> tuple[tuple[float, float], ...]:
            if not xs:
                return ((0.0, mean), (1.0, mean))
            s = sorted(float(x) for x in xs)
            return tuple((q, s[min(len(s) - 1, int(q * (len(s) - 1)))]) for _, q in QUANTILES)

        e2e = float(d["mean_e2el_ms"]) / 1e3 if "mean_e2el_ms" in d else \
            float(d["mean_ttft_ms"]) / 1e3 + float(d["mean_tpot_ms"]) / 1e3 * (d["total_output_tokens"] / done - 1)
        return [replace(base, run=path.stem, index=0, rate=rate, duration_s=dur, sent=n, ok=done, failures=n - done,
                        arrival="poisson", prompt_q=q_of(ins, d["total_input_tokens"] / done),
                        output_q=q_of(outs, d["total_output_tokens"] / done), e2e_mean=e2e,
                        ttft_mean=float(d["mean_ttft_ms"]) / 1e3, served_rate=float(d["request_throughput"]))]
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as x:
        raise ConfigError(f"{path}: not a `vllm bench serve` result ({x!r})") from None


def _load(p: Path) -> dict[str, Any]:
    try:
        d = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{p}: cannot read JSON ({e})") from None
    if not isinstance(d, dict):
        raise ConfigError(f"{p}: expected a JSON object")
    return d


def read_results(path: Path, *, gpu: str = "h100", model: str | None = None, tp: int = 1,
                 engine: dict[str, int] | None = None, ignore_eos: bool = False) -> list[Stage]:
    """Every stage of a results file or folder (see the module docstring for the layouts)."""
    base = Stage(run=path.name, index=0, model=catalog_model(model or ""), tp=tp, gpu=gpu, rate=1.0,
                 duration_s=60.0, sent=0, ok=0, failures=0, arrival="poisson", prompt_q=(), output_q=(),
                 requested_output=None, ignore_eos=ignore_eos, groups=0, system_prompt_len=0, engine=engine or {})
    if path.is_dir():
        if (path / "experiments.json").exists():
            return _experiments(_load(path / "experiments.json"), path / "experiments.json", gpu)
        stages = _lifecycle(path, base)
        if not stages:
            raise ConfigError(f"{path}: no experiments.json and no stage_*_lifecycle_metrics.json")
    else:
        d = _load(path)
        if "experiments" in d:
            return _experiments(d, path, gpu)
        if "successes" in d:
            stages = _lifecycle(path.parent, base)
        elif "mean_ttft_ms" in d:
            stages = _bench_serve(d, path, base)
        else:
            raise ConfigError(f"{path}: not experiments.json, an inference-perf report or a `vllm bench serve` result")
    if not model:
        raise ConfigError(f"{path}: give --model (the results do not name the served model)")
    return stages
