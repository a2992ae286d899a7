"""``kvsim cost predict``: one step's time for a described batch, and what it rests on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="Ask the step-cost model directly.", no_args_is_help=True)


@app.callback()
def _group() -> None:
    """Ask the step-cost model directly."""


@app.command()
def predict(
    model: Annotated[str, typer.Option("--model", help="Catalog name or HF config.json.")] = "llama-3.1-8b",
    gpu: Annotated[str, typer.Option("--gpu", help="Catalog GPU, e.g. h100, a100-80gb.")] = "h100",
    tp: Annotated[int, typer.Option("--tp", "-tp", "--tensor-parallel-size", help="Tensor-parallel degree.")] = 1,
    prefill_tokens: Annotated[int, typer.Option("--prefill-tokens", help="Tokens of each prompt (a prefill step).")] = 0,
    batch: Annotated[int, typer.Option("--batch", help="Prompts (prefill) or decoding sequences in the step.")] = 1,
    context: Annotated[int, typer.Option("--context", help="Decode: KV tokens each sequence attends to; "
                                                           "prefill: tokens already cached before the prompt.")] = 0,
    decode: Annotated[bool, typer.Option("--decode", help="A decode step (B sequences, one token each).")] = False,
    block_size: Annotated[int, typer.Option("--block-size", help="KV block size (0 = contiguous slab).")] = 16,
    cost_model: Annotated[str, typer.Option("--cost-model", help="calibrated | roofline | constant:SECONDS")] = "calibrated",
    serving_stack: Annotated[str, typer.Option("--serving-stack", help="vllm-v1 | vllm-0.6 | vllm-2023 | lean | splitwise | FILE.yaml")] = "vllm-v1",
    calibration: Annotated[Path | None, typer.Option("--calibration", help="A harness fit YAML.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Predict one step: B prompts of P tokens (--prefill-tokens P --batch B) or B decodes at
    context C (--decode --batch B --context C)."""
    from sim.config.schema import make_config
    from sim.cost.predict import predict_step
    from sim.errors import ConfigError
    from sim.memory.budget import budget_for

    try:  # a step time for a shape vLLM could not start would answer a question nobody can ask
        budget_for(make_config("flags", model=model, gpu=gpu, tensor_parallel_size=tp, block_size=block_size or 16))
    except ConfigError as e:
        raise ConfigError(f"cost predict: {model} on {tp}x {gpu} cannot run ({e})") from None
    p = predict_step(model, gpu, tp, prefill_tokens=prefill_tokens, batch=batch, context=context,
                     decode=decode, block_size=block_size, cost_model=cost_model,
                     serving_stack=serving_stack, calibration=calibration)
    if as_json:
        typer.echo(json.dumps(p.to_json(), indent=2))
        return
    lo, hi = p.band
    typer.echo(f"{p.step_s * 1e3:.3f} ms  [{p.step_s * (1 + lo) * 1e3:.3f} .. {p.step_s * (1 + hi) * 1e3:.3f}]  "
               f"{p.cost_model}")
    typer.echo(f"basis: {p.basis}: {p.basis_detail}")
    for k, v in p.parts.items():
        typer.echo(f"  {k:24s} {v * 1e3:10.3f} ms")
