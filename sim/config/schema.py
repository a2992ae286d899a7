"""Simulation config: one pydantic model, validated once at the boundary (CLI, YAML, sweep).

Knob names follow vLLM's engine args so users can paste theirs. Presets (``vllm-0.33``,
``vllm-v1-legacy``, ``paper-v0``) only set defaults; every switch is settable on its own
(vllm-v1-semantics.md section 0).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sim.config.aliases import VLLM_ALIASES, vllm_aliases
from sim.config.api_server import api_server_keys
from sim.errors import ConfigError
from sim.safe_yaml import safe_load

Preset = Literal["vllm-0.33", "vllm-v1-legacy", "paper-v0"]

PRESETS: dict[str, dict[str, Any]] = {
    "vllm-0.33": dict(null_block=True, free_order="front-tail", enable_prefix_caching=True,
                      reserve_full_isl=True, watermark=0.0, chunked_prefill=True,
                      sharing="prefix-cache", gpu_memory_utilization=0.92, async_scheduling=True),
    "vllm-v1-legacy": dict(null_block=True, free_order="tail", enable_prefix_caching=True,
                           reserve_full_isl=False, watermark=0.0, chunked_prefill=True,
                           sharing="prefix-cache", gpu_memory_utilization=0.90, async_scheduling=False),
    "paper-v0": dict(null_block=False, free_order="stack", enable_prefix_caching=False,
                     reserve_full_isl=False, watermark=0.01, chunked_prefill=False,
                     sharing="fork-cow", gpu_memory_utilization=0.90, async_scheduling=False),
}

#: The serving-stack profile each preset times its steps with (``--serving-stack`` overrides):
#: the V1 presets a current vLLM (CUDA graphs, multiprocessing workers, fitted on v0.15.1),
#: ``paper-v0`` the 2023 stack of the paper's figures (sim/cost/stack.py).
PRESET_STACKS: dict[str, str] = {"vllm-0.33": "vllm-v1", "vllm-v1-legacy": "vllm-v1", "paper-v0": "vllm-2023"}

#: ``--block-size`` values vLLM 0.33 accepts (``BlockSize`` in vllm/config/cache.py; its CLI
#: refuses others). kvsim simulates any size (the paper's sweeps use 2 and 4) but warns.
VLLM_BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)


def block_size_warning(block_size: int) -> str | None:
    """One line for the user when vLLM would refuse ``block_size``; None when it accepts it."""
    if block_size in VLLM_BLOCK_SIZES:
        return None
    return (f"--block-size {block_size} is not accepted by vLLM 0.33 (valid: "
            f"{', '.join(map(str, VLLM_BLOCK_SIZES))}); simulating it anyway")


_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(text: str, flag: str = "--kv-memory") -> int:
    """``50GB`` -> 50e9, ``12GiB`` -> 12 x 2^30, ``4096B``. Units are required (GB vs GiB matters)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*((?:[kmgt]i?)?b)\s*", text.lower())
    if not m:
        raise ConfigError(f"{flag} {text!r}: expected a size with units, e.g. 50GB or 12GiB")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


class SimConfig(BaseModel):
    """Everything that defines one simulation run (hashable, so sweeps can key on it)."""

    model_config = ConfigDict(extra="forbid", frozen=True, protected_namespaces=())

    # hardware and model
    model: str = "llama-3.1-8b"
    gpu: str = "h100"
    tensor_parallel_size: int = Field(1, ge=1, le=64)
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    num_gpu_blocks: int | None = Field(None, ge=2)  # vLLM num_gpu_blocks_override (incl. null block)
    kv_memory: str | None = None                    # e.g. "50GB", "12GiB": bypasses profiling
    kv_cache_dtype: Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"] = "auto"  # auto = model dtype
    disable_hybrid_kv_cache_manager: bool = False   # vLLM: treat sliding/chunked layers as full
    activation_memory: str | None = None            # override the peak-activation estimate
    non_torch_memory: str = "0.5GiB"                # NCCL/cuBLAS/CUDA-graph overhead
    # engine knobs (vLLM names)
    block_size: int = Field(16, ge=1, le=1024)
    max_num_seqs: int | None = Field(None, ge=1)
    max_num_batched_tokens: int | None = Field(None, ge=1)
    max_model_len: int | None = Field(None, ge=1)
    enable_prefix_caching: bool | None = None
    policy: Literal["fcfs", "priority"] = "fcfs"
    victim: Literal["last", "priority", "fewest-tokens"] | None = None  # None: follows --policy
    long_prefill_token_threshold: int = Field(0, ge=0)
    # fidelity switches (None = preset default)
    preset: Preset = "vllm-0.33"
    null_block: bool | None = None
    free_order: Literal["front-tail", "tail", "stack"] | None = None
    reserve_full_isl: bool | None = None
    watermark: float | None = Field(None, ge=0, lt=1)
    chunked_prefill: bool | None = None
    sharing: Literal["prefix-cache", "fork-cow"] | None = None
    async_scheduling: bool | None = None            # vLLM 0.33 on GPU: on (step k+1 planned while k runs)
    # speculative decoding (vLLM speculative_config: num_speculative_tokens, method)
    num_speculative_tokens: int = Field(0, ge=0, le=64)
    speculative_method: Literal["ngram", "eagle", "eagle3", "mtp"] = "eagle"
    spec_acceptance_rate: float = Field(0.7, ge=0, le=1)  # kvsim's: P(a draft token is accepted)
    # allocator
    allocator: Literal["paged", "slab"] = "paged"
    reservation: Literal["max", "pow2", "oracle"] = "max"
    slab_placement: Literal["buddy", "first-fit"] = "buddy"
    # preemption
    preemption: Literal["recompute", "swap"] = "recompute"
    swap_space: float = Field(4.0, ge=0)            # GiB of CPU swap per GPU
    kv_offloading_size: float | None = Field(None, gt=0)  # GiB of CPU KV offload tier (vLLM native), per replica
    # cost and run
    cost_model: str = "calibrated"                  # roofline | constant:SECONDS | calibrated
    calibration: str | None = None
    serving_stack: str = "vllm-v1"                  # calibrated only; unset: PRESET_STACKS[preset] (sim/cost/stack.py)
    enforce_eager: bool = False                     # vLLM --enforce-eager: no CUDA graphs (launch floor per layer)
    enable_expert_parallel: bool = False            # vLLM --enable-expert-parallel: MoE experts whole per GPU
    step_time_scale: float = Field(1.0, gt=0)       # multiply every step time (kvsim plan's band edge; what-ifs)
    seed: int = Field(0, ge=0)
    usage_context: Literal["openai-server", "llm-class"] = "openai-server"  # vLLM's batch defaults: vllm serve | LLM(...)
    rate_scale: float = Field(1.0, gt=0)            # multiply the trace's arrival rate (arrivals / rate_scale)
    total_rate: float | None = Field(None, gt=0)    # or rescale the trace to this mean req/s
    arrival_jitter: bool = True                     # spread coarse timestamps (workloads/resolution.py)
    # the API server in front of the engine (sim/frontend): vLLM --api-server-count; kvsim's 0 = none
    api_server_count: int = Field(1, ge=0, le=64)  # default: 1 (vllm serve), 0 under --usage-context llm-class
    endpoint: Literal["chat", "completions"] = "chat"  # the OpenAI endpoint requests use (its ingress cost)
    exact_steps: bool = False

    @model_validator(mode="before")
    @classmethod
    def _vllm_aliases(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = vllm_aliases(data)
        if data.get("serving_stack") is None:  # the preset's engine era (issue 16)
            data = {**data, "serving_stack": PRESET_STACKS.get(str(data.get("preset") or "vllm-0.33"), "vllm-v1")}
        return data

    @model_validator(mode="before")
    @classmethod
    def _api_server(cls, data: Any) -> Any:
        return api_server_keys(data) if isinstance(data, dict) else data

    @field_validator("kv_memory", "activation_memory", "non_torch_memory")
    @classmethod
    def _sizes(cls, v: str | None) -> str | None:
        if v is not None:
            parse_bytes(v)
        return v

    def resolved(self, key: str) -> Any:
        """A switch's value, falling back to the preset default (``victim``: the policy
        ``--policy`` implies)."""
        v = getattr(self, key)
        if v is not None:
            return v
        if key == "victim":
            return "priority" if self.policy == "priority" else "last"
        return PRESETS[self.preset][key]


def _unknown_key(key: str, where: str) -> str:
    """An unknown key's line: the nearest valid key, or all of them (``make_config(max_num_seq=5)``)."""
    import difflib

    valid = [*SimConfig.model_fields, *VLLM_ALIASES]
    near = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    name = f"--{key.replace('_', '-')}: unknown option" if where == "flags" else f"{where}: unknown key '{key}'"
    return name + (f"; did you mean '{near[0]}'?" if near else "") + f" (valid: {', '.join(SimConfig.model_fields)})"


def _fmt_validation(e: ValidationError, where: str) -> str:
    err = e.errors()[0]
    loc = ".".join(str(x) for x in err["loc"]) or "?"
    if err["type"] == "extra_forbidden":
        return _unknown_key(loc, where)
    if where == "flags":
        return f"--{loc.replace('_', '-')} {err.get('input')!r}: {err['msg']}"
    return f"{where}: '{loc}' = {err.get('input')!r}: {err['msg']}"


def make_config(where: str = "config", vllm_args: str | list[str] | None = None, **kw: Any) -> SimConfig:
    """A validated :class:`SimConfig` from keyword arguments, the Python form of the CLI flags.

    Keys are the flag names with underscores (``make_config(model="meta-llama/Llama-3.1-8B-Instruct",
    gpu="h100", max_num_seqs=128, kv_cache_dtype="fp8")``); vLLM's spellings
    ``num_gpu_blocks_override`` and ``kv_cache_memory_bytes`` are accepted. Unset knobs keep their
    preset's default (``preset="vllm-0.33"``). A bad value raises :class:`~sim.errors.ConfigError`
    with one line naming the key; ``where`` says where the keys came from (a file name, "flags").
    ``vllm_args``: a pasted ``vllm serve ...`` line (:mod:`sim.config.vllm_args`), under ``kw``
    as on the command line, so ``make_config(vllm_args="vllm serve M -tp 2", gpu="h200")`` works.
    """
    if vllm_args is not None:
        from sim.config.vllm_args import parse_vllm_serve

        line = parse_vllm_serve(vllm_args)
        if "model" not in line.config and kw.get("model") is None:
            raise ConfigError("vllm serve: no model: put it first (`vllm serve MODEL ...`) or pass model=")
        kw = {**line.config, **kw}
    try:
        return SimConfig(**kw)
    except ValidationError as e:
        raise ConfigError(_fmt_validation(e, where)) from None


def read_yaml(path: Path) -> Any:
    """``yaml.safe_load`` of a user's file; unreadable or malformed YAML is a one-line ConfigError."""
    try:
        return safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ConfigError(f"{path}: cannot read YAML ({str(e).splitlines()[0]})") from None


def load_config_yaml(path: Path) -> dict[str, Any]:
    """Read a ``--config FILE.yaml`` (safe_load) and return its keys (dashes -> underscores)."""
    data = read_yaml(path)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of simulate options")
    out = {str(k).replace("-", "_"): v for k, v in data.items()}
    unknown = set(out) - set(SimConfig.model_fields) - set(VLLM_ALIASES)
    if unknown:
        raise ConfigError(f"{path}: unknown key '{sorted(unknown)[0]}' (valid: {', '.join(SimConfig.model_fields)})")
    return out
