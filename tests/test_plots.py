"""Every plot kind renders from a small run, and the images are not blank."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import matplotlib.image as mpimg
import pytest
from typer.testing import CliRunner

from sim.config import make_config
from sim.plots import (
    block_table_view,
    blocksize_tradeoff,
    breakdown_bars,
    latency_cdfs,
    load_run,
    memory_map,
    memory_over_time,
    parse_slo,
    record_layout,
    save,
    sweep_heatmaps,
)
from sim.plots.heatmap import best_cell
from sim.run import simulate
from sim.sweep import expand, run_sweep
from workloads import load_trace

ROOT = Path(__file__).resolve().parents[1]
SLICE = ROOT / "workloads" / "data" / "azure_conv_slice.csv"
SMALL = dict(cost_model="constant:0.01", num_gpu_blocks=120, max_model_len=1024)


@pytest.fixture(scope="module")
def trace():  # type: ignore[no-untyped-def]
    tr = load_trace(SLICE)
    return dataclasses.replace(tr, df=tr.df.head(60).reset_index(drop=True))


@pytest.fixture(scope="module")
def runs(trace, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:  # type: ignore[no-untyped-def]
    out = []
    for name, kw in {"paged": dict(allocator="paged"), "slab": dict(allocator="slab", reservation="pow2")}.items():
        d = tmp_path_factory.mktemp(name)
        simulate(make_config(**SMALL, **kw), trace).write(d)
        out.append(d)
    return out


def assert_image(paths: list[Path], min_w: int = 400, min_h: int = 250) -> None:
    png, svg = paths
    img = mpimg.imread(png)
    h, w = img.shape[:2]
    assert w >= min_w and h >= min_h, (w, h)
    rgb = img[..., :3]
    non_white = (rgb < 0.95).any(axis=-1).mean()
    assert non_white > 0.03, f"{png.name}: only {non_white:.1%} non-white pixels"
    assert rgb.std() > 0.05
    assert svg.stat().st_size > 5_000 and b"<svg" in svg.read_bytes()[:400]


def test_memory_over_time(runs: list[Path], tmp_path: Path) -> None:
    info, steps, _ = load_run(runs[0])
    assert steps["num_preempted"].sum() > 0, "small pool should preempt (overlay has something to show)"
    assert_image(save(memory_over_time(steps, info, max_points=200), tmp_path / "m"), 800, 350)


def test_breakdown_bars(runs: list[Path], tmp_path: Path) -> None:
    import json
    entries = []
    for r in runs:
        info, _, _ = load_run(r)
        entries.append((info.label, json.loads((r / "summary.json").read_text())["memory"]))
    assert_image(save(breakdown_bars(entries, info), tmp_path / "b"))


def test_latency_cdfs(runs: list[Path], tmp_path: Path) -> None:
    loaded = [load_run(r) for r in runs]
    fig = latency_cdfs([(i, req) for i, _, req in loaded])
    assert len(fig.axes[0].get_lines()) == 2
    assert_image(save(fig, tmp_path / "c"), 1000, 300)


def test_sweep_heatmaps_mark_best_under_slo(trace, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "t.csv"
    p.write_text("".join(SLICE.read_text().splitlines(keepends=True)[:61]))
    pts = expand({"block_size": [8, 16, 32], "max_num_seqs": [2, 8]}, SMALL, p)
    df = run_sweep(pts, tmp_path / "sw").table
    slo = parse_slo(["ttft_p99_s<=1000"])
    best = best_cell(df, "block_size", "max_num_seqs", slo)
    top = df.loc[df["throughput_rps"].idxmax()]
    assert best == (top["block_size"], top["max_num_seqs"])
    assert best_cell(df, "block_size", "max_num_seqs", parse_slo(["ttft_p99_s<=0"])) is None
    fig = sweep_heatmaps(df, "block_size", "max_num_seqs", slo=slo)
    assert len([a for a in fig.axes if a.get_images()]) == 5
    assert_image(save(fig, tmp_path / "h"), 1000, 500)


def test_memory_map_paged_and_slab(trace, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    small = dataclasses.replace(trace, df=trace.df.head(25).reset_index(drop=True))
    paged = record_layout(make_config(**SMALL, block_size=16), small)
    slab = record_layout(make_config(**SMALL, allocator="slab", reservation="max"), small)
    assert paged.owner[0].shape == (120,) and slab.owner[0].shape == (120 * 16,)
    assert_image(save(memory_map([paged, slab], columns=200), tmp_path / "map"), 900, 400)
    busiest = max(range(len(paged.tables)), key=lambda i: len(paged.tables[i]))
    t = paged.times[busiest]
    tables = paged.tables[busiest]
    _uid, row = next(iter(tables.items()))
    # the block table: every block but the last is full
    assert all(fill == 16 for _, fill, _ in row[:-1]) and 0 <= row[-1][1] <= 16
    assert_image(save(block_table_view(paged, t), tmp_path / "bt"), 500, 150)
    assert_image(save(block_table_view(slab, t), tmp_path / "bts"), 500, 150)


def test_blocksize_tradeoff(trace, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cfg = make_config(cost_model="roofline", num_gpu_blocks=2000, max_model_len=2048)
    fig, tab = blocksize_tradeoff(cfg, trace, (4, 16, 64))
    assert tab["table_len_mean"].is_monotonic_decreasing
    assert tab["tail_waste_final"].is_monotonic_increasing
    assert tab["page_term_s"].is_monotonic_decreasing and tab["page_term_s"].iloc[0] > 0
    assert_image(save(fig, tmp_path / "bs"), 1000, 300)


def test_plot_cli_memory_and_memmap(runs: list[Path], tmp_path: Path) -> None:
    from sim.cli.main import _load, app
    _load()
    r = CliRunner().invoke(app, ["plot", "memory", str(runs[0]), "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    p = tmp_path / "m.csv"
    p.write_text("".join(SLICE.read_text().splitlines(keepends=True)[:21]))
    r = CliRunner().invoke(app, ["plot", "memmap", str(p), "--out", str(tmp_path), "--pool-slots", "2048",
                                 "--cost-model", "constant:0.01"])
    assert r.exit_code == 0, r.output
    for name in ("memory_over_time", "memory_map", "block_tables_paged", "block_tables_slab"):
        assert_image([tmp_path / f"{name}.png", tmp_path / f"{name}.svg"], 400, 150)

