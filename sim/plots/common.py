"""Shared plotting pieces: the Agg backend, category colours, titles, run loading, saving."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure

from sim.errors import ConfigError

#: step column -> (legend label, colour); order = stacking order, bottom first
CATEGORIES: dict[str, tuple[str, str]] = {
    "token_state_slots": ("token states", "#2b8a3e"),
    "reserved_slots": ("reservation", "#f59f00"),
    "internal_frag_slots": ("internal fragmentation", "#e03131"),
    "external_frag_slots": ("external fragmentation & others", "#7048e8"),
    "free_slots": ("free", "#dee2e6"),
}


@dataclass(frozen=True, slots=True)
class RunInfo:
    """What a figure title needs to name, plus a short label for legends."""

    trace: str
    model: str
    gpu: str
    cost_model: str
    label: str = ""

    def title(self, what: str) -> str:
        return f"{what}\ntrace {self.trace} | {self.model} on {self.gpu} | cost model: {self.cost_model}"


def config_label(cfg: dict[str, Any]) -> str:
    """``paged B=16`` / ``slab pow2 (buddy)``."""
    if cfg.get("allocator") == "slab":
        return f"slab {cfg.get('reservation')} ({cfg.get('slab_placement')})"
    return f"paged B={cfg.get('block_size')}"


def info_from_summary(s: dict[str, Any], label: str = "") -> RunInfo:
    cfg = s["config"]
    return RunInfo(Path(s["trace"]["path"]).name, cfg["model"], cfg["gpu"], s["cost_model"],
                   label or config_label(cfg))


def load_run(run_dir: Path) -> tuple[RunInfo, pd.DataFrame, pd.DataFrame]:
    """(info, steps, requests) of a ``kvsim simulate --out`` directory."""
    if not (run_dir / "summary.json").is_file():
        raise ConfigError(f"{run_dir}: not a run directory (no summary.json; make one with kvsim simulate --out)")
    s = json.loads((run_dir / "summary.json").read_text())
    return (info_from_summary(s), pd.read_parquet(run_dir / "steps.parquet"),
            pd.read_parquet(run_dir / "requests.parquet"))


def joined(values: list[str]) -> str:
    uniq = list(dict.fromkeys(values))
    return uniq[0] if len(uniq) == 1 else " / ".join(uniq)


def common_info(infos: list[RunInfo]) -> RunInfo:
    return RunInfo(joined([i.trace for i in infos]), joined([i.model for i in infos]),
                   joined([i.gpu for i in infos]), joined([i.cost_model for i in infos]))


def save(fig: Figure, base: Path) -> list[Path]:
    """Write ``base.png`` and ``base.svg``; close the figure."""
    base.parent.mkdir(parents=True, exist_ok=True)
    out = [base.with_suffix(".png"), base.with_suffix(".svg")]
    for p in out:
        fig.savefig(p, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return out
