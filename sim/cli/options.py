"""Simulate options shared by `simulate`, `budget`, `sweep` and `plan` (vLLM flag names).

Each flag is defined once, as a typer annotation. `simulate` and `sweep` take all of them, so
they get them from :func:`simulate_flags` instead of listing them twice; `budget` and `plan`
take a few, named one by one.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from sim.config.aliases import VLLM_ALIASES
from sim.config.schema import SimConfig, load_config_yaml, make_config, read_yaml
from sim.config.vllm_bench import VllmBench, is_bench_line, parse_vllm_bench
from sim.errors import ConfigError
from workloads.load import Load

# flag -> typer Option. None defaults mean "unset": the config file or the preset decides.
Model = Annotated[str | None, typer.Option("--model", help="Catalog name (llama-3.1-8b, ...) or a HF config.json path.")]
Gpu = Annotated[str | None, typer.Option("--gpu", help="a100-40gb, a100-80gb, h100, h200, l40s, l4, b200, mi300x")]
TP = Annotated[int | None, typer.Option("--tensor-parallel-size", "-tp", "--tp", help="GPUs per replica; weights and KV heads are split across them (default 1).")]
GMU = Annotated[float | None, typer.Option("--gpu-memory-utilization", help="Fraction of GPU memory vLLM may use, 0-1 (default 0.92; 0.90 under the vllm-v1-legacy and paper-v0 presets).")]
BS = Annotated[int | None, typer.Option("--block-size", help="Tokens per KV block (default 16; vLLM accepts 1, 8, 16, 32, 64, 128, 256, others get a warning).")]
_BY_GPU = "vLLM's default by GPU: {big} on GPUs of >= 70 GB other than A100, else {small}"
MNS = Annotated[int | None, typer.Option("--max-num-seqs", help="Most requests running in one step ("
                                         + _BY_GPU.format(big="1,024", small="256") + ").")]
MNBT = Annotated[int | None, typer.Option("--max-num-batched-tokens", help="Tokens one step may process, prompt chunks "
                                          "and decodes together (vllm serve's default by GPU: 8,192 on GPUs of >= 70 GB "
                                          "other than A100, 16,384 at >= 160 GB, else 2,048; --usage-context llm-class: "
                                          "16,384 / 8,192; without chunked prefill at least --max-model-len).")]
UCtx = Annotated[str | None, typer.Option("--usage-context", help="Whose batch defaults: openai-server (`vllm serve`, "
                                          "default) | llm-class (vLLM's offline LLM(...) class).")]
MML = Annotated[int | None, typer.Option("--max-model-len", help="Longest request in tokens, prompt + output (default: "
                                         "the model's context length, e.g. 131,072 for llama-3.1-8b; more is refused).")]
EPC = Annotated[bool | None, typer.Option("--enable-prefix-caching/--no-enable-prefix-caching",
                                          help="Reuse the KV blocks of shared prompt prefixes (default: on, off under --preset paper-v0).")]
Alloc = Annotated[str | None, typer.Option("--allocator", help="paged | slab")]
Res = Annotated[str | None, typer.Option("--reservation", help="slab reservation: max | pow2 | oracle")]
Pre = Annotated[str | None, typer.Option("--preemption", help="recompute | swap")]
Swap = Annotated[float | None, typer.Option("--swap-space", help="CPU swap space per GPU in GiB, for --preemption swap (default 4).")]
Cost = Annotated[str | None, typer.Option("--cost-model", help="calibrated (default) | roofline | constant:SECONDS")]
Calib = Annotated[str | None, typer.Option("--calibration", help="Path of a fitted calibration YAML.")]
Stack = Annotated[str | None, typer.Option("--serving-stack", help="calibrated cost model: vllm-v1 (vllm-0.33 presets) | vllm-0.6 | vllm-2023 (paper-v0) | lean | splitwise | FILE.yaml.")]
Seed = Annotated[int | None, typer.Option("--seed", help="Seed of the run's random choices, e.g. paper-v0 beam re-forks (default 0).")]
NGB = Annotated[int | None, typer.Option("--num-gpu-blocks", "--num-gpu-blocks-override", help="Override the block count (includes the null block).")]
KVM = Annotated[str | None, typer.Option("--kv-memory", help="KV cache size with units, e.g. 50GB or 12GiB.")]
KVMB = Annotated[str | None, typer.Option("--kv-cache-memory-bytes", help="vLLM's spelling of --kv-memory: bytes, 50g (10^9) or 50G (2^30).")]
KVCD = Annotated[str | None, typer.Option("--kv-cache-dtype", help="auto | fp8 | fp8_e4m3 | fp8_e5m2 (auto = the model's dtype).")]
KVOS = Annotated[float | None, typer.Option("--kv-offloading-size", help="CPU KV offload tier in GiB for the whole replica "
                                            "(vLLM's native backend: filled blocks are copied to a CPU LRU, hits load back over PCIe).")]
DHKV = Annotated[bool | None, typer.Option("--disable-hybrid-kv-cache-manager", help="Allocate sliding/chunked layers as full attention (vLLM).")]
Preset = Annotated[str | None, typer.Option("--preset", help="vllm-0.33 | vllm-v1-legacy | paper-v0")]
Policy = Annotated[str | None, typer.Option("--policy", help="fcfs | priority")]
Victim = Annotated[str | None, typer.Option("--victim", help="Preemption victim: last (vLLM FCFS) | priority | fewest-tokens")]
ECP = Annotated[bool | None, typer.Option("--enable-chunked-prefill/--no-enable-chunked-prefill", help="Split long prompts "
                                          "over steps (default: on; off under --preset paper-v0, whose steps run prompts only). "
                                          "Off in the V1 presets, whole prompts still share steps with decodes, as in vLLM.")]
Async = Annotated[bool | None, typer.Option("--async-scheduling/--no-async-scheduling", help="Plan step k+1 while step k "
                                            "runs, as vLLM 0.33 does on GPU (default: on; off under vllm-v1-legacy and paper-v0).")]
NST = Annotated[int | None, typer.Option("--num-speculative-tokens", help="Speculative decoding: draft tokens per step "
                                         "(default 0 = off; needs --no-async-scheduling).")]
SpecM = Annotated[str | None, typer.Option("--speculative-method", help="ngram | eagle | eagle3 | mtp (default eagle): "
                                           "eagle/eagle3/mtp reserve K lookahead slots and a draft layer of KV, ngram neither.")]
SpecA = Annotated[float | None, typer.Option("--spec-acceptance-rate", help="Probability that a draft token is accepted "
                                             "(kvsim's knob, default 0.7; drawn from --seed).")]
Exact = Annotated[bool | None, typer.Option("--exact-steps/--fast-forward", help="Step one at a time (slower; identical results).")]
Jitter = Annotated[bool | None, typer.Option("--arrival-jitter/--no-arrival-jitter", help="Spread each group of equal "
                                            "timestamps of a coarse trace (e.g. Mooncake's) uniformly over its resolution, "
                                            "seeded (default: on; `kvsim trace info` shows the resolution).")]
RateScale = Annotated[float | None, typer.Option("--rate-scale", help="Multiply the trace's arrival rate (2 = twice as "
                                               "many requests per second; default 1).")]
TotalRate = Annotated[float | None, typer.Option("--total-rate", help="Rescale the trace's arrivals to this mean rate, "
                                               "req/s over its span (ServeGen archives otherwise run at their published rate).")]
RequestRate = Annotated[float | None, typer.Option("--request-rate", help="Send the requests, in trace order, at this "
                                                   "rate (req/s) with gamma gaps as `vllm bench serve` draws them "
                                                   "(seeded by the run's seed); inf: all at t = 0. Replaces the trace's own times.")]
Burstiness = Annotated[float | None, typer.Option("--burstiness", help="Gamma shape of the --request-rate gaps, as "
                                                  "vllm bench serve's (default 1 = Poisson; < 1 burstier, > 1 more regular).")]
MaxConcurrency = Annotated[int | None, typer.Option("--max-concurrency", help="Closed loop, as `vllm bench serve`'s: "
                                                   "at most N requests in flight from send to last token, in trace order, "
                                                   "the next sent when one's last chunk reaches its client (with --request-rate: "
                                                   "at its time and a free slot). One API server or none; "
                                                   "the replica steps exactly behind one.")]
SaveResult = Annotated[Path | None, typer.Option("--save-result", help="Also write a `vllm bench serve`-shaped result "
                                                 "JSON here (mean/median/std/p99 of TTFT, TPOT, ITL, E2EL in ms; "
                                                 "kvsim's provenance under \"kvsim\").")]
ApiServers = Annotated[int | None, typer.Option("--api-server-count", help="API-server processes in front of the "
                                                 "engine, as vLLM's --api-server-count: each one tokenizes, applies the "
                                                 "chat template and streams tokens, FIFO (default 1; 0 under --usage-context "
                                                 "llm-class; kvsim's 0 = no front-end modelled).")]
Endpoint = Annotated[str | None, typer.Option("--endpoint", help="The OpenAI endpoint the requests use: chat "
                                              "(default; chat template applied) | completions.")]
VllmArgs = Annotated[str | None, typer.Option("--vllm-args", help="A pasted `vllm serve ...` line (quoted), or put it after "
                                              "`--` at the end. Its flags under vLLM's names; server-only ones are ignored "
                                              "and listed; kvsim's own flags win over it. A `vllm bench serve ...` line sets the "
                                              "load instead (simulate, sweep, plan): rate, dataset, prompts.")]
ConfigFile = Annotated[Path | None, typer.Option("--config", help="YAML file with the same keys as the flags.")]


#: ``--config`` and every simulate flag, in help order: parameter name -> typer annotation.
SIMULATE_FLAGS: dict[str, Any] = {
    "config": ConfigFile, "vllm_args": VllmArgs, "model": Model, "gpu": Gpu, "tensor_parallel_size": TP,
    "gpu_memory_utilization": GMU, "block_size": BS, "max_num_seqs": MNS,
    "max_num_batched_tokens": MNBT, "max_model_len": MML, "enable_prefix_caching": EPC,
    "allocator": Alloc, "reservation": Res, "preemption": Pre, "swap_space": Swap,
    "cost_model": Cost, "calibration": Calib, "serving_stack": Stack, "seed": Seed, "num_gpu_blocks": NGB,
    "kv_memory": KVM, "kv_cache_memory_bytes": KVMB, "kv_cache_dtype": KVCD,
    "disable_hybrid_kv_cache_manager": DHKV, "kv_offloading_size": KVOS, "preset": Preset, "policy": Policy, "victim": Victim,
    "chunked_prefill": ECP, "async_scheduling": Async, "num_speculative_tokens": NST, "speculative_method": SpecM,
    "spec_acceptance_rate": SpecA, "rate_scale": RateScale, "total_rate": TotalRate, "usage_context": UCtx, "arrival_jitter": Jitter, "exact_steps": Exact,
    "api_server_count": ApiServers, "endpoint": Endpoint,
}
R = TypeVar("R")


SummaryOnly = Annotated[bool, typer.Option("--summary-only", help="Keep only the summary (percentiles, memory, "
                                           "throughput): write summary.json, no requests/steps tables; same figures.")]
Stream = Annotated[bool, typer.Option("--stream", help="Write requests.parquet and steps.parquet by chunks while "
                                      "running, in bounded memory (for very long traces); same rows.")]


def simulate_flags(fn: Callable[..., R]) -> Callable[..., R]:
    """Give a typer command ``--config`` and every simulate flag (put it under ``@app.command()``).

    ``fn`` declares its own parameters plus ``cfg: SimConfig``. Typer sees ``fn``'s parameters
    followed by :data:`SIMULATE_FLAGS` (all unset by default); ``fn`` receives ``cfg``, the
    ``--config`` file merged with the flags given on the command line (:func:`build_config`), and,
    if it declares ``keys``, those merged keys before any default is filled in (a cluster's
    instances start from them: sim/cli/cluster.py).
    """
    sig = inspect.signature(fn, eval_str=True)
    flags = [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=a)
             for k, a in SIMULATE_FLAGS.items()]
    params = [*(p for name, p in sig.parameters.items() if name not in ("cfg", "bench", "keys")), *flags]

    @functools.wraps(fn)
    def command(**kw: Any) -> R:
        given = {k: kw.pop(k) for k in SIMULATE_FLAGS}
        if "bench" in sig.parameters:  # a pasted `vllm bench serve` line: the load, not the server
            kw["bench"], given["vllm_args"] = bench_line(given["vllm_args"], given)
        config = given.pop("config")
        keys = config_keys(config, **given)
        if "keys" in sig.parameters:  # the keys as given, before defaults (a cluster's instances start from them)
            kw["keys"] = keys
        return fn(**kw, cfg=make_config(str(config) if config else "flags", **keys))

    command.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params} | {"return": sig.return_annotation}
    return command


def config_keys(config: Path | None, vllm_args: str | None = None, **flags: Any) -> dict[str, Any]:
    """The config keys of a YAML file, then a pasted ``vllm serve`` line, then flags (each wins
    over the one before). Ignored server-only flags of the line are listed on stderr."""
    if config:
        check_config_file(config)
    base = load_config_yaml(config) if config else {}
    if vllm_args and is_bench_line(vllm_args):
        raise ConfigError("a `vllm bench serve` line sets the load (simulate, sweep, plan); this command "
                          "takes a `vllm serve` line")
    if vllm_args:
        from sim.config.vllm_args import parse_vllm_serve

        line = parse_vllm_serve(vllm_args)
        if msg := line.ignored_line():
            typer.echo(msg, err=True)
        if "model" not in line.config and "model" not in base and flags.get("model") is None:
            raise ConfigError("vllm serve: no model: put it first (`vllm serve MODEL ...`) or pass --model (vLLM "
                              "would load its own default model, kvsim will not guess one)")
        base = _merge(base, line.config)
    return _merge(base, {k: v for k, v in flags.items() if v is not None})


def check_config_file(path: Path) -> None:
    """Refuse an empty ``--config`` (a typo'd path to an empty file would silently run defaults)
    and name the nearest valid key for an unknown one."""
    data = read_yaml(path)
    if data is None or data == {}:
        raise ConfigError(f"{path}: the config is empty; give at least one simulate option "
                          "(e.g. `model: llama-3.1-8b`), or drop --config")
    if not isinstance(data, dict):
        return  # load_config_yaml says what is wrong
    valid = [*SimConfig.model_fields, *VLLM_ALIASES]
    for key in data:
        k = str(key).replace("-", "_")
        if k not in valid:
            near = difflib.get_close_matches(k, valid, n=1, cutoff=0.6)
            hint = f"; did you mean '{near[0]}'?" if near else f" (valid: {', '.join(SimConfig.model_fields)})"
            raise ConfigError(f"{path}: unknown key '{key}'{hint}")


def _merge(base: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    base = dict(base)
    for k in given:  # a later value wins, whichever spelling (kvsim's or vLLM's) each uses
        for same in {VLLM_ALIASES.get(k, k), *(a for a, n in VLLM_ALIASES.items() if k in (a, n))}:
            base.pop(same, None)
    base.update(given)
    return base


def more_simulate_flags(skip: frozenset[str] = frozenset()) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """Give a command every simulate flag it does not declare itself (nor lists in ``skip``, for
    flags it spells its own way); ``fn`` receives those as ``sim_flags`` (name -> value or None)."""
    def wrap(fn: Callable[..., R]) -> Callable[..., R]:
        sig = inspect.signature(fn, eval_str=True)
        extra = {k: a for k, a in SIMULATE_FLAGS.items() if k not in sig.parameters and k not in skip}
        params = [*(p for n, p in sig.parameters.items() if n != "sim_flags"),
                  *(inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=a)
                    for k, a in extra.items())]

        @functools.wraps(fn)
        def command(**kw: Any) -> R:
            flags = {k: kw.pop(k) for k in list(kw) if k in extra}
            return fn(**kw, sim_flags=flags)

        command.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params} | {"return": sig.return_annotation}
        return command
    return wrap


def build_config(config: Path | None, vllm_args: str | None = None, **flags: Any) -> SimConfig:
    """Merge a YAML config (if given), a ``vllm serve`` line and flags set on the command line (flags win)."""
    base = config_keys(config, vllm_args, **flags)
    return make_config(str(config) if config else "flags", **base)


def bench_line(vllm_args: str | None, given: dict[str, Any]) -> tuple[VllmBench | None, str | None]:
    """(the parsed `vllm bench serve` line, None) or (None, the `vllm serve` line). A bench line's
    ignored flags are listed on stderr; its --seed and --model fill flags left unset in ``given``
    (so a --config file's yield to it and kvsim's flags win)."""
    if not vllm_args or not is_bench_line(vllm_args):
        return None, vllm_args
    bench = parse_vllm_bench(vllm_args)
    if msg := bench.ignored_line():
        typer.echo(msg, err=True)
    for k, v in bench.config.items():
        if k in given and given[k] is None:
            given[k] = v
    return bench, None


def load_of(request_rate: float | None, burstiness: float | None, bench: VllmBench | None,
            rescaled: bool = False) -> Load:
    """The load: --request-rate / --burstiness over a pasted bench line's. ``rescaled``: the run
    also rescales the trace's own times (--rate-scale, --total-rate / --target-qps): refused
    together with a request rate, which replaces them."""
    load = Load(request_rate=request_rate, burstiness=burstiness)
    if bench is not None:
        load = load.over(bench.load)
    if load.request_rate is not None and rescaled:
        raise ConfigError("--request-rate replaces the trace's times and --rate-scale / --total-rate rescale "
                          "them: give one")
    load.check()
    return load


def rescaled(cfg: SimConfig) -> bool:
    """Whether --rate-scale or --total-rate was given (at any value)."""
    return bool({"rate_scale", "total_rate"} & cfg.model_fields_set)
