"""Simulate options shared by `simulate`, `budget`, `sweep` and `plan` (vLLM flag names).

Each flag is defined once, as a typer annotation. `simulate` and `sweep` take all of them, so
they get them from :func:`simulate_flags` instead of listing them twice; `budget` and `plan`
take a few, named one by one.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from sim.config import SimConfig, load_config_yaml, make_config

# flag -> typer Option. None defaults mean "unset": the config file or the preset decides.
Model = Annotated[str | None, typer.Option("--model", help="Catalog name (llama-3.1-8b, ...) or a HF config.json path.")]
Gpu = Annotated[str | None, typer.Option("--gpu", help="a100-40gb, a100-80gb, h100, h200, l40s, l4, b200, mi300x")]
TP = Annotated[int | None, typer.Option("--tensor-parallel-size", "-tp", help="GPUs per replica (weights and KV heads are split).")]
GMU = Annotated[float | None, typer.Option("--gpu-memory-utilization", help="Fraction of GPU memory vLLM may use (default 0.92).")]
BS = Annotated[int | None, typer.Option("--block-size", help="Tokens per KV block (default 16).")]
MNS = Annotated[int | None, typer.Option("--max-num-seqs")]
MNBT = Annotated[int | None, typer.Option("--max-num-batched-tokens")]
MML = Annotated[int | None, typer.Option("--max-model-len")]
EPC = Annotated[bool | None, typer.Option("--enable-prefix-caching/--no-enable-prefix-caching")]
Alloc = Annotated[str | None, typer.Option("--allocator", help="paged | slab")]
Res = Annotated[str | None, typer.Option("--reservation", help="slab reservation: max | pow2 | oracle")]
Pre = Annotated[str | None, typer.Option("--preemption", help="recompute | swap")]
Swap = Annotated[float | None, typer.Option("--swap-space", help="CPU swap space per GPU, GiB (default 4)")]
Cost = Annotated[str | None, typer.Option("--cost-model", help="roofline | constant:SECONDS | calibrated")]
Calib = Annotated[str | None, typer.Option("--calibration", help="Path of a fitted calibration YAML.")]
Seed = Annotated[int | None, typer.Option("--seed")]
NGB = Annotated[int | None, typer.Option("--num-gpu-blocks", help="Override the block count (includes the null block).")]
KVM = Annotated[str | None, typer.Option("--kv-memory", help="KV cache size with units, e.g. 50GB or 12GiB.")]
Preset = Annotated[str | None, typer.Option("--preset", help="vllm-0.33 | vllm-v1-legacy | paper-v0")]
Policy = Annotated[str | None, typer.Option("--policy", help="fcfs | priority")]
Victim = Annotated[str | None, typer.Option("--victim", help="Preemption victim: last (vLLM FCFS) | priority | fewest-tokens")]
Exact = Annotated[bool | None, typer.Option("--exact-steps/--fast-forward", help="Step one at a time (slower; identical results).")]
ConfigFile = Annotated[Path | None, typer.Option("--config", help="YAML file with the same keys as the flags.")]


#: ``--config`` and every simulate flag, in help order: parameter name -> typer annotation.
SIMULATE_FLAGS: dict[str, Any] = {
    "config": ConfigFile, "model": Model, "gpu": Gpu, "tensor_parallel_size": TP,
    "gpu_memory_utilization": GMU, "block_size": BS, "max_num_seqs": MNS,
    "max_num_batched_tokens": MNBT, "max_model_len": MML, "enable_prefix_caching": EPC,
    "allocator": Alloc, "reservation": Res, "preemption": Pre, "swap_space": Swap,
    "cost_model": Cost, "calibration": Calib, "seed": Seed, "num_gpu_blocks": NGB,
    "kv_memory": KVM, "preset": Preset, "policy": Policy, "victim": Victim, "exact_steps": Exact,
}
R = TypeVar("R")


def simulate_flags(fn: Callable[..., R]) -> Callable[..., R]:
    """Give a typer command ``--config`` and every simulate flag (put it under ``@app.command()``).

    ``fn`` declares its own parameters plus ``cfg: SimConfig``. Typer sees ``fn``'s parameters
    followed by :data:`SIMULATE_FLAGS` (all unset by default); ``fn`` receives ``cfg``, the
    ``--config`` file merged with the flags given on the command line (:func:`build_config`).
    """
    sig = inspect.signature(fn, eval_str=True)
    flags = [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=a)
             for k, a in SIMULATE_FLAGS.items()]
    params = [*(p for name, p in sig.parameters.items() if name != "cfg"), *flags]

    @functools.wraps(fn)
    def command(**kw: Any) -> R:
        given = {k: kw.pop(k) for k in SIMULATE_FLAGS}
        return fn(**kw, cfg=build_config(given.pop("config"), **given))

    command.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params} | {"return": sig.return_annotation}
    return command


def build_config(config: Path | None, **flags: Any) -> SimConfig:
    """Merge a YAML config (if given) with flags set on the command line (flags win)."""
    base = load_config_yaml(config) if config else {}
    for k, v in flags.items():
        if v is not None:
            base[k] = v
    return make_config(str(config) if config else "flags", **base)
