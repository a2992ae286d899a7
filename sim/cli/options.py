"""Simulate options shared by `simulate`, `budget`, `sweep` and `plan` (vLLM flag names)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

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


def build_config(config: Path | None, **flags: Any) -> SimConfig:
    """Merge a YAML config (if given) with flags set on the command line (flags win)."""
    base = load_config_yaml(config) if config else {}
    for k, v in flags.items():
        if v is not None:
            base[k] = v
    return make_config(str(config) if config else "flags", **base)
