"""`kvsim budget`: how many KV blocks fit, with vLLM's capacity log lines."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from sim.cli import options as o
from sim.cli.notices import check_block_sizes
from sim.config.schema import SimConfig
from sim.kv.base import cdiv
from sim.memory.budget import budget_for


def register(app: typer.Typer) -> None:
    @app.command()
    @o.simulate_flags
    def budget(
        as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
        request_tokens: Annotated[int | None, typer.Option("--request-tokens", min=1, help="Also show the blocks one request of this length holds.")] = None,
        *, cfg: SimConfig,
    ) -> None:
        """KV bytes per token and per block, the number of blocks, and vLLM's log lines.

        Takes every simulate flag (and a pasted `vllm serve` line), so one config answers both;
        the flags that do not change the budget (policy, cost model, ...) are accepted and unused."""
        check_block_sizes([cfg.block_size])
        b = budget_for(cfg)
        d = {**b.as_dict(), "usage_context": cfg.usage_context}
        if request_tokens:
            nb = cdiv(request_tokens, b.block_size)
            d["request"] = {"tokens": request_tokens, "blocks": nb, "unused_slots": nb * b.block_size - request_tokens}
        if as_json:
            typer.echo(json.dumps(d))
            return
        t = Table(title=f"KV budget: {b.model} on {b.tensor_parallel_size}x {b.gpu}")
        t.add_column("quantity")
        t.add_column("value", justify="right")
        gib = 2**30
        for k, v in [
            (f"bytes per token (per GPU, KV dtype {b.kv_cache_dtype})", f"{b.bytes_per_token:,} B"),
            (f"bytes per block ({b.block_size} tokens x {b.layers_per_block} layers)",
             f"{b.bytes_per_block:,} B ({b.bytes_per_block / 2**20:g} MiB)"),
            ("KV-cache groups / blocks per max_model_len request", f"{b.num_kv_cache_groups} / {b.blocks_per_request:,}"),
            ("requested (memory x utilization)", f"{b.requested_bytes / gib:.2f} GiB"),
            ("weights / activations / non-torch", f"{b.weight_bytes / gib:.2f} / {b.activation_bytes / gib:.2f} / {b.non_torch_bytes / gib:.2f} GiB"),
            ("KV memory", f"{b.available_kv_bytes / gib:.2f} GiB ({b.source})"),
            ("num_gpu_blocks (incl. null block)" if b.null_block else "num_gpu_blocks", f"{b.num_gpu_blocks:,}"),
            ("token slots", f"{b.usable_blocks * b.block_size:,}"),
            (f"max_num_seqs / max_num_batched_tokens ({cfg.usage_context} defaults)",
             f"{b.max_num_seqs} / {b.max_num_batched_tokens}"),
        ]:
            t.add_row(k, v)
        if request_tokens:
            r = d["request"]
            t.add_row(f"one {request_tokens:,}-token request", f"{r['blocks']} blocks, {r['unused_slots']} slots unused")
        Console().print(t)
        for line in b.log_lines():
            typer.echo(line)
