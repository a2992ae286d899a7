"""(6) The block-size trade-off: tail waste, block-table length, modelled kernel time.

Small blocks: long block tables and many pages for the attention kernel to gather (the cost
model's pages-touched term). Large blocks: more of each request's last block is unfilled.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from sim.config.schema import SimConfig
from sim.cost import StepBatch
from sim.cost.for_config import cost_model_for
from sim.model.catalog import resolve_model
from sim.plots.common import RunInfo
from sim.run.simulate import simulate
from workloads import Trace


def _tail_waste(steps: pd.DataFrame) -> float:
    """Time-averaged unfilled share of allocated KV (internal / (token states + internal))."""
    w = steps["duration_s"].to_numpy()
    held = ((steps["token_state_slots"] + steps["internal_frag_slots"]).to_numpy() * w).sum()
    return float((steps["internal_frag_slots"].to_numpy() * w).sum() / held) if held else 0.0


def tradeoff_table(cfg: SimConfig, trace: Trace, block_sizes: Sequence[int], batch: int = 64) -> pd.DataFrame:
    """One row per block size: simulated and analytic tail waste, table length, kernel time."""
    final = (trace.df["prompt_tokens"] + trace.df["output_tokens"]).to_numpy()
    mid = (trace.df["prompt_tokens"] + trace.df["output_tokens"] // 2).to_numpy()[:batch]
    model = resolve_model(cfg.model)
    cost = cost_model_for(cfg, model)
    rows = []
    for B in block_sizes:
        res = simulate(cfg.model_copy(update={"block_size": int(B), "allocator": "paged"}), trace)
        blocks = -(-final // B)
        pages = int((-(-mid // B)).sum())
        step = StepBatch(num_decode_seqs=len(mid), decode_context_tokens=int(mid.sum()),
                         pages_touched=pages, block_size=int(B))
        no_pages = StepBatch(num_decode_seqs=len(mid), decode_context_tokens=int(mid.sum()),
                             pages_touched=0, block_size=int(B))
        rows.append({
            "block_size": int(B), "tail_waste_sim": _tail_waste(res.steps),
            "tail_waste_final": float(((blocks * B - final) / (blocks * B)).mean()),
            "table_len_mean": float(blocks.mean()), "table_len_p99": float(np.percentile(blocks, 99)),
            "decode_step_s": cost.step_time(step), "page_term_s": cost.step_time(step) - cost.step_time(no_pages),
            "tpot_p50_s": res.summary.tpot_s.p50, "cost_model": cost.name,
        })
    return pd.DataFrame(rows)


def blocksize_tradeoff(cfg: SimConfig, trace: Trace, block_sizes: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128, 256),
                       batch: int = 64) -> tuple[Figure, pd.DataFrame]:
    tab = tradeoff_table(cfg, trace, block_sizes, batch)
    info = RunInfo(Path(trace.path).name, cfg.model, cfg.gpu, str(tab["cost_model"].iloc[0]))
    B = tab["block_size"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.3))
    a, b, c = axes
    a.plot(B, 100 * tab["tail_waste_sim"], "o-", label="simulated, time-averaged")
    a.plot(B, 100 * tab["tail_waste_final"], "s--", label="at each request's final length")
    a.set(ylabel="unfilled share of allocated KV (%)", title="tail waste (internal fragmentation)")
    b.plot(B, tab["table_len_mean"], "o-", label="mean")
    b.plot(B, tab["table_len_p99"], "s--", label="p99")
    b.set(ylabel="blocks per request (count, log)", yscale="log", title="block-table length")
    c.plot(B, 1e3 * tab["decode_step_s"], "o-", label="whole decode step")
    c.plot(B, 1e3 * tab["page_term_s"], "s--", label="pages-touched term")
    c.set(ylabel="modelled time (ms)", title=f"decode step, batch of {min(batch, len(trace.df))} at mid-decode")
    for ax in axes:
        ax.set(xscale="log", xlabel="block_size (tokens, log2 scale)")
        ax.set_xticks(list(B), [str(v) for v in B])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(info.title("Block-size trade-off (paged)"), fontsize=10)
    fig.tight_layout()
    return fig, tab
