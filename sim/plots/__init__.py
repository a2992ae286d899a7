"""Figures (matplotlib, Agg backend): each function returns a Figure; ``save`` writes PNG + SVG.

Every figure names trace, model, GPU and cost model in its title, so it reads without a caption.
"""

from sim.plots.blocksize import blocksize_tradeoff
from sim.plots.common import RunInfo, load_run, save
from sim.plots.heatmap import parse_slo, sweep_heatmaps
from sim.plots.latency import latency_cdfs
from sim.plots.memmap import block_table_view, memory_map, record_layout
from sim.plots.memory import breakdown_bars, memory_over_time

__all__ = [
    "RunInfo", "block_table_view", "blocksize_tradeoff", "breakdown_bars", "latency_cdfs", "load_run",
    "memory_map", "memory_over_time", "parse_slo", "record_layout", "save", "sweep_heatmaps",
]
