"""A pasted ``vllm bench serve`` command line -> kvsim's load options (and the seed).

    parse_vllm_bench("vllm bench serve --model meta-llama/Llama-3.1-8B-Instruct --dataset-name random "
                     "--random-input-len 1024 --random-output-len 128 --request-rate 4 --num-prompts 500")
    -> VllmBench(load=Load(request_rate=4.0, num_prompts=500, dataset=RandomSet(...)),
                 config={"model": "meta-llama/Llama-3.1-8B-Instruct"}, ignored=())

Load flags apply: ``--request-rate`` (inf: all at t = 0), ``--burstiness``, ``--num-prompts``,
``--seed``, ``--dataset-name random|sharegpt|prefix_repetition`` with their ``--random-*``,
``--sharegpt-output-len``, ``--dataset-path`` and ``--prefix-repetition-*`` flags, ``--input-len``
/ ``--output-len``, ``--disable-shuffle``; ``--metric-percentiles`` picks the percentiles
``--save-result`` writes; ``--model`` names the model (kvsim's flags win). Client-side flags that
change nothing kvsim simulates (host, endpoint, tokenizer, sampling, result files, plots) are
listed as ignored. ``--max-concurrency`` is kvsim's closed loop (:mod:`sim.run.clients`).
Refused in one line: a rate ramp, probe requests, LoRA, beam search, other datasets and unknown flags.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, field
from typing import Any

from sim.errors import ConfigError
from workloads.bench import parse_dataset
from workloads.load import Load

NAMES = ("random", "sharegpt", "prefix_repetition")
#: bench flag -> (dataset, dataset key); the general --input-len / --output-len map like vLLM's
DATASET_FLAGS: dict[str, tuple[str, str]] = {
    "--random-input-len": ("random", "input_len"), "--random-output-len": ("random", "output_len"),
    "--random-range-ratio": ("random", "range_ratio"), "--random-prefix-len": ("random", "prefix_len"),
    "--sharegpt-output-len": ("sharegpt", "output_len"), "--dataset-path": ("sharegpt", "path"),
    "--prefix-repetition-prefix-len": ("prefix_repetition", "prefix_len"),
    "--prefix-repetition-suffix-len": ("prefix_repetition", "suffix_len"),
    "--prefix-repetition-num-prefixes": ("prefix_repetition", "num_prefixes"),
    "--prefix-repetition-output-len": ("prefix_repetition", "output_len"),
}
GENERAL = {"--input-len": {"random": "input_len"},
           "--output-len": {"random": "output_len", "sharegpt": "output_len", "prefix_repetition": "output_len"}}
CLIENT_VALUES = frozenset({
    "--backend", "--endpoint-type", "--base-url", "--host", "--port", "--endpoint", "--label", "--tokenizer",
    "--tokenizer-mode", "--logprobs", "--num-warmups", "--result-dir", "--result-filename", "--percentile-metrics",
    "--request-id-prefix", "--top-p", "--top-k", "--min-p", "--temperature", "--frequency-penalty",
    "--presence-penalty", "--repetition-penalty", "--served-model-name", "--extra-body", "--timeline-itl-thresholds",
    "--ready-check-timeout-sec", "--chat-template-kwargs", "--lora-assignment"})
CLIENT_BOOLS = frozenset({
    "--trust-remote-code", "--disable-tqdm", "--profile", "--save-result", "--save-detailed", "--append-result",
    "--ignore-eos", "--skip-tokenizer-init", "--insecure", "--plot-timeline", "--plot-dataset-stats", "--no-oversample"})
CLIENT_NARGS = frozenset({"--header", "--metadata", "--goodput"})
REFUSED = {
    "--ramp-up-strategy": "not modelled: --ramp-up-strategy (a request-rate ramp)",
    "--ramp-up-start-rps": "not modelled: --ramp-up-start-rps (a request-rate ramp)",
    "--ramp-up-end-rps": "not modelled: --ramp-up-end-rps (a request-rate ramp)",
    "--lora-modules": "not modelled: --lora-modules (LoRA adapters)",
    "--use-beam-search": "not modelled: --use-beam-search (give the trace a beam_width column)",
    "--self-timed": "not modelled: --self-timed (replay a trace file's own times: pass the trace to kvsim)",
}


@dataclass(frozen=True, slots=True)
class VllmBench:
    load: Load
    config: dict[str, Any] = field(default_factory=dict)   # kvsim config keys: seed, model
    percentiles: tuple[float, ...] = (99.0,)               # --metric-percentiles (for --save-result)
    ignored: tuple[str, ...] = ()
    max_concurrency: int | None = None                      # --max-concurrency (a closed loop)

    def ignored_line(self) -> str:
        if not self.ignored:
            return ""
        return f"vllm bench serve: ignored (client-side, no effect on the simulation): {', '.join(self.ignored)}"


def is_bench_line(line: str | list[str]) -> bool:
    toks = shlex.split(line.replace("\\\n", " ")) if isinstance(line, str) else list(line)
    toks = [t for t in toks if t != "\\"]
    return toks[:3] == ["vllm", "bench", "serve"] or toks[:2] == ["bench", "serve"]


def _tokens(line: str | list[str]) -> list[str]:
    toks = shlex.split(line.replace("\\\n", " ")) if isinstance(line, str) else list(line)
    toks = [t for t in toks if t != "\\"]
    return toks[3:] if toks[:1] == ["vllm"] else toks[2:]


def _number(flag: str, v: str, whole: bool = False) -> float:
    try:
        x = float(v)
    except ValueError:
        raise ConfigError(f"vllm bench serve {flag} {v!r}: expected a number") from None
    if whole and (not math.isfinite(x) or x != int(x)):
        raise ConfigError(f"vllm bench serve {flag} {v!r}: expected a whole number")
    return x


def _percentiles(v: str) -> tuple[float, ...]:
    out = tuple(_number("--metric-percentiles", p) for p in v.split(","))
    if any(not 0 <= p <= 100 for p in out):
        raise ConfigError(f"vllm bench serve --metric-percentiles {v!r}: each must be in 0..100")
    return out


class _Parser:
    def __init__(self, toks: list[str]) -> None:
        self.toks, self.i = toks, 0
        self.values: dict[str, str] = {}
        self.ignored: list[str] = []
        self.shuffle = True

    def take(self, flag: str, inline: str | None) -> str:
        if inline is not None:
            return inline
        if self.i >= len(self.toks):
            raise ConfigError(f"vllm bench serve: {flag} needs a value")
        self.i += 1
        return self.toks[self.i - 1]

    def run(self) -> None:
        while self.i < len(self.toks):
            raw = self.toks[self.i]
            self.i += 1
            if not raw.startswith("-"):
                raise ConfigError(f"vllm bench serve: unexpected argument {raw!r}")
            flag, eq, rest = raw.partition("=")
            flag = "--" + flag.lstrip("-").replace("_", "-")
            inline = rest if eq else None
            if flag in REFUSED:
                raise ConfigError(REFUSED[flag])
            if flag == "--disable-shuffle":
                self.shuffle = False
            elif flag in CLIENT_BOOLS:
                self.ignored.append(flag)
            elif flag in CLIENT_VALUES:
                self.take(flag, inline)
                self.ignored.append(flag)
            elif flag in CLIENT_NARGS:
                while inline is None and self.i < len(self.toks) and not self.toks[self.i].startswith("-"):
                    self.i += 1
                self.ignored.append(flag)
            elif flag in DATASET_FLAGS or flag in GENERAL or flag in (
                    "--request-rate", "--burstiness", "--num-prompts", "--seed", "--dataset-name", "--model",
                    "--metric-percentiles", "--probe-request-rate", "--random-batch-size", "--max-concurrency"):
                self.values[flag] = self.take(flag, inline)
            else:
                raise ConfigError(f"not modelled: vllm bench serve {flag} (kvsim does not know this flag; "
                                  "remove it from the line to simulate the rest)")


def _dataset(p: _Parser) -> tuple[Any, bool]:
    """(the dataset spec, whether the line named one or set one of its flags)."""
    v = p.values
    name = v.get("--dataset-name", "random")
    if name not in NAMES:
        raise ConfigError(f"not modelled: vllm bench serve --dataset-name {name} (kvsim makes {', '.join(NAMES)}; "
                          "or pass a trace file)")
    keys: dict[str, Any] = {"dataset": name}
    for flag, (ds, key) in DATASET_FLAGS.items():
        if flag in v:
            if ds != name:
                raise ConfigError(f"vllm bench serve {flag}: belongs to --dataset-name {ds}, not {name}")
            keys[key] = v[flag] if key == "path" else _number(flag, v[flag], whole=key != "range_ratio")
    for flag, by_ds in GENERAL.items():
        if flag in v and name in by_ds:
            keys[by_ds[name]] = _number(flag, v[flag], whole=True)
    if not p.shuffle:
        if name == "sharegpt":
            raise ConfigError("not modelled: vllm bench serve --disable-shuffle with sharegpt (rows in file order)")
        keys["shuffle"] = False
    named = "--dataset-name" in v or len(keys) > 1 or not p.shuffle
    return parse_dataset(keys, "vllm bench serve"), named


def parse_vllm_bench(line: str | list[str]) -> VllmBench:
    """The load options of a ``vllm bench serve`` line (module docstring). ConfigError on a refusal."""
    p = _Parser(_tokens(line))
    p.run()
    v = p.values
    if float(v.get("--probe-request-rate", "0")) > 0:
        raise ConfigError("not modelled: vllm bench serve --probe-request-rate (probe requests beside the load)")
    if _number("--random-batch-size", v.get("--random-batch-size", "1")) != 1:
        raise ConfigError("not modelled: vllm bench serve --random-batch-size (batched embedding requests)")
    dataset, named = _dataset(p)
    # unset: a trace keeps its own times, a dataset goes at vLLM's default rate, inf
    rate = _number("--request-rate", v["--request-rate"]) if "--request-rate" in v else None
    burst = _number("--burstiness", v["--burstiness"]) if "--burstiness" in v else None
    ignored = list(dict.fromkeys(p.ignored))
    if burst is not None and (rate is None or math.isinf(rate)) and burst > 0:
        ignored.append("--burstiness (no effect at --request-rate inf, as in vLLM)")
        burst = None
    load = Load(request_rate=rate, burstiness=burst, dataset=dataset, dataset_named=named,
                num_prompts=int(_number("--num-prompts", v["--num-prompts"], whole=True)) if "--num-prompts" in v else None,
                origin="vllm bench serve")
    config: dict[str, Any] = {}
    if "--seed" in v:
        config["seed"] = int(_number("--seed", v["--seed"], whole=True))
    if "--model" in v:
        config["model"] = v["--model"]
    pct = _percentiles(v["--metric-percentiles"]) if "--metric-percentiles" in v else (99.0,)
    mc = int(_number("--max-concurrency", v["--max-concurrency"], whole=True)) if "--max-concurrency" in v else None
    if mc is not None and mc <= 0:
        raise ConfigError(f"vllm bench serve --max-concurrency {mc}: must be >= 1")
    return VllmBench(load, config, pct, tuple(ignored), max_concurrency=mc)
