"""The configuration as the run used it: each knob left unset (``None``) is replaced by the value
the preset, the KV budget or ``--policy`` gave it, so ``summary.json`` never says ``null`` for
a knob that had a value. ``None`` stays only where it means "not given" (``kv_memory``,
``num_gpu_blocks``, ``activation_memory``, ``calibration``).
"""

from __future__ import annotations

from typing import Any

from sim.config.schema import PRESETS, SimConfig
from sim.memory.budget import KvBudget


def resolved_config(cfg: SimConfig, budget: KvBudget) -> tuple[dict[str, Any], tuple[str, ...]]:
    """(every knob with the value the run used, the knobs that were unset and got filled in)."""
    d = cfg.model_dump()
    values: dict[str, Any] = {k: cfg.resolved(k) for k in PRESETS[cfg.preset]}
    values.update(max_model_len=budget.max_model_len, max_num_seqs=budget.max_num_seqs,
                  max_num_batched_tokens=budget.max_num_batched_tokens, victim=cfg.resolved("victim"))
    filled = tuple(sorted(k for k, v in values.items() if d.get(k) is None))
    d.update(values)
    return d, filled
