"""Every plot kind renders from a small run, and the images are not blank."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import matplotlib.image as mpimg
import pytest
from typer.testing import CliRunner

from sim.config.schema import make_config
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
from sim.run.simulate import simulate
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



def test_heatmap_cells_use_readable_numbers_and_latency_units() -> None:
    import pandas as pd

    df = pd.DataFrame({
        "key": list("abcd"), "block_size": [8, 8, 16, 16], "gpu_memory_utilization": [0.8, 0.9, 0.8, 0.9],
        "model": "llama-3.1-8b", "gpu": "h100", "cost_model_name": "constant:0.01", "status": "ok",
        "throughput_rps": [1234.5, 2.5, 3.25, 0.0123], "ttft_p99_s": [2774.8, 600.0, 90.0, 1500.0],
        "tpot_p99_s": [0.012, 0.02, 0.5, 0.004], "preemptions_per_1k": [0.0, 12.0, 3.0, 0.5],
        "mem_token_state": [0.5, 0.6, 0.7, 0.8]})
    fig = sweep_heatmaps(df, "block_size", "gpu_memory_utilization")
    panels = {a.get_title(): sorted(t.get_text() for t in a.texts) for a in fig.axes if a.get_images()}
    assert panels["p99 TTFT (min)"] == sorted(["46.2", "10.0", "1.50", "25.0"])   # 2774.8 s, 600 s, ...
    assert panels["p99 TPOT (ms)"] == sorted(["12.0", "20.0", "500", "4.00"])
    assert panels["throughput (req/s)"] == sorted(["1,234", "2.50", "3.25", "0.0123"])
    assert panels["preemptions per 1k requests"] == sorted(["0", "12.0", "3.00", "0.500"])
    assert not any("e+" in t or "e-" in t for texts in panels.values() for t in texts)


def test_cdf_legend_gives_p99_in_its_unit(runs: list[Path]) -> None:
    from sim.io import fmt
    loaded = [load_run(r) for r in runs]
    fig = latency_cdfs([(i, req) for i, _, req in loaded])
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    for (info, _, req), text in zip(loaded, legend, strict=True):
        p99 = req.loc[req["status"] == "finished", "ttft_s"].quantile(0.99)
        assert text == f"{info.label} (p99 {fmt.duration(p99)})"
    ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert ticks and all(re.fullmatch(r"[\d,.]+ (ms|s|min|h)", t) for t in ticks), ticks


def test_labels_tell_apart_runs_that_differ_only_in_trace() -> None:
    from sim.plots.labels import distinct_labels
    assert distinct_labels(["paged B=16", "slab max (buddy)"], ["a.csv", "a.csv"], ["r1", "r2"]) == \
        ["paged B=16", "slab max (buddy)"]
    assert distinct_labels(["paged B=16"] * 2, ["conv.csv", "code.csv"], ["r1", "r2"]) == \
        ["paged B=16 | conv.csv", "paged B=16 | code.csv"]
    assert distinct_labels(["paged B=16"] * 2, ["t.csv"] * 2, ["seed0", "seed1"]) == \
        ["seed0: paged B=16", "seed1: paged B=16"]
    assert distinct_labels(["paged B=16"] * 2, ["t.csv"] * 2, ["run", "run"], ["a/run", "b/run"]) == \
        ["a/run: paged B=16", "b/run: paged B=16"]


def test_plot_cdf_and_breakdown_label_runs_by_trace(trace, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import pandas as pd

    from sim.cli.plot import _labelled, sweep_labels
    dirs = []
    for name, n in (("first30.csv", 30), ("first60.csv", 60)):
        tr = dataclasses.replace(trace, df=trace.df.head(n).reset_index(drop=True), path=str(tmp_path / name))
        d = tmp_path / name.removesuffix(".csv")
        simulate(make_config(**SMALL), tr).write(d)
        dirs.append(d)
    infos = _labelled(dirs, [load_run(d)[0] for d in dirs])
    assert [i.label for i in infos] == ["paged B=16 | first30.csv", "paged B=16 | first60.csv"]
    sweep = pd.DataFrame({"key": ["k1", "k2"], "trace": ["/x/conv.csv", "/y/code.csv"], "block_size": [16, 16],
                          "model": "m"})
    assert sweep_labels(sweep) == ["trace=conv.csv", "trace=code.csv"]
    r = CliRunner().invoke(_app(), ["plot", "cdf", *map(str, dirs), "--out", str(tmp_path / "p")])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(_app(), ["plot", "breakdown", *map(str, dirs), "--out", str(tmp_path / "p")])
    assert r.exit_code == 0, r.output


def _app():  # type: ignore[no-untyped-def]
    from sim.cli.main import _load, app
    _load()
    return app
