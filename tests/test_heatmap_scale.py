"""Sweep heatmaps that do not exaggerate (issue 20, item 9): equal values share a colour, a third
varying key gets its own panels instead of a silent average, cell labels read on any colour."""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.plots import sweep_heatmaps
from sim.plots.heatmap import MIN_RELATIVE_SPAN, colour_range


def _sweep(throughput: list[float], allocators: list[str] | None = None) -> pd.DataFrame:
    n = len(throughput)
    bs = [8, 16] * (n // 2)
    mns = [v for v in (64, 128) for _ in range(2)] * (n // 4)
    return pd.DataFrame({
        "key": [str(i) for i in range(n)], "block_size": bs, "max_num_seqs": mns,
        "allocator": allocators or ["paged"] * n, "model": "llama-3.1-8b", "gpu": "h100",
        "cost_model_name": "constant:0.01", "status": "ok", "throughput_rps": throughput,
        "ttft_p99_s": np.linspace(0.1, 0.4, n), "tpot_p99_s": np.linspace(0.01, 0.02, n),
        "preemptions_per_1k": [0.0] * n, "mem_token_state": np.linspace(0.2, 0.5, n)})


def _images(fig: object) -> dict[str, object]:
    return {a.get_title(): a for a in fig.axes if a.get_images()}  # type: ignore[attr-defined]


def test_equal_throughputs_share_one_colour() -> None:
    fig = sweep_heatmaps(_sweep([0.3610, 0.3611, 0.3612, 0.3609]), "block_size", "max_num_seqs")
    ax = _images(fig)["throughput (req/s)"]
    im = ax.get_images()[0]
    assert im.norm.vmax - im.norm.vmin >= MIN_RELATIVE_SPAN * 0.361 * 0.999
    colours = im.cmap(im.norm(im.get_array()))
    assert np.ptp(colours[..., :3], axis=(0, 1)).max() < 0.05   # no purple against yellow
    # a real spread keeps its full range
    lo, hi = colour_range(np.array([1.0, 2.0, 3.0]))
    assert (lo, hi) == (1.0, 3.0)


def test_a_third_varying_key_gets_facets_with_a_shared_scale() -> None:
    df = pd.concat([_sweep([1.0, 2.0, 3.0, 4.0]), _sweep([5.0, 6.0, 7.0, 8.0], ["slab"] * 4)], ignore_index=True)
    fig = sweep_heatmaps(df, "block_size", "max_num_seqs")
    panels = _images(fig)
    assert len(panels) == 10
    paged, slab = panels["throughput (req/s) | allocator=paged"], panels["throughput (req/s) | allocator=slab"]
    cells = sorted(t.get_text() for t in slab.texts)
    assert cells == ["5.00", "6.00", "7.00", "8.00"]                 # not averaged with paged
    n1, n2 = paged.get_images()[0].norm, slab.get_images()[0].norm
    assert (n1.vmin, n1.vmax) == (n2.vmin, n2.vmax) == (1.0, 8.0)     # comparable colours
    assert "one column per allocator" in fig._suptitle.get_text()   # type: ignore[attr-defined]


def test_cell_labels_read_on_light_and_dark_cells() -> None:
    fig = sweep_heatmaps(_sweep([1.0, 2.0, 3.0, 4.0]), "block_size", "max_num_seqs")
    ax = _images(fig)["throughput (req/s)"]
    by_text = {t.get_text(): t for t in ax.texts}
    assert by_text["4.00"].get_color() == "black" and by_text["1.00"].get_color() == "white"
    assert all(t.get_fontsize() >= 6 for t in ax.texts)
