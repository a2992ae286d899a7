"""sim/cost/kernel_tables.py on the committed aiconfigurator-core tables (calibration/data/aic/).

Expected values come from the committed parquet rows read here directly, or from arithmetic
(datasheet peaks in sim/model/data/gpus.yaml), never from the lookup itself.
"""

from __future__ import annotations

import importlib.util
import itertools
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sim.cost.kernel_store import DATA_DIR
from sim.cost.kernel_tables import describe, gpus_with_tables, kernel_tables, require_tables
from sim.errors import ConfigError
from sim.model.catalog import gpu_catalog

H100 = "h100"
LLAMA8B = {"heads": 32, "kv_heads": 8, "head_dim": 128}


def rows(gpu: str, table: str) -> pd.DataFrame:
    return pd.read_parquet(DATA_DIR / gpu / f"{table}.parquet")


def non_decreasing(t: list[float] | np.ndarray) -> bool:
    """Up to float rounding (a pooled flat stretch comes back through exp/log: 1e-19 s wiggles)."""
    a = np.asarray(t)
    return bool(np.all(np.diff(a) >= -1e-12 * a[1:]))


def in_order(v: np.ndarray) -> np.ndarray:
    """Points not out of order with any other on their line (>= all before, <= all after):
    least-squares monotone smoothing leaves exactly these as measured."""
    before = np.maximum.accumulate(v)
    after = np.minimum.accumulate(v[::-1])[::-1]
    return (v >= before) & (v <= after)


def test_gemm_reproduces_measured_rows() -> None:
    d = rows(H100, "gemm")
    kt = require_tables(H100)
    checked = 0
    for (n, k) in [(4096, 4096), (14336, 4096), (1024, 8192), (128, 512)]:
        col = d[(d.dtype == "bfloat16") & (d.n == n) & (d.k == k)].sort_values("m")
        us = col["us"].to_numpy()
        for m, t in zip(col["m"].to_numpy()[in_order(us)], us[in_order(us)], strict=True):
            got = kt.gemm(int(m), n, k, "bfloat16")
            assert got.seconds == pytest.approx(t * 1e-6, rel=1e-9), (m, n, k)
            assert not got.extrapolated
            checked += 1
    assert checked > 20


def test_context_attention_reproduces_ordered_slices() -> None:
    """Slices already monotone in batch and q_len as measured come back point for point."""
    d = rows(H100, "context_attention")
    d = d[d.window == 0]
    kt = require_tables(H100)
    checked = 0
    for (kv, hd, h, kvh), s in d.groupby(["kv_dtype", "head_dim", "heads", "kv_heads"]):
        grid = s.pivot_table(index="q_len", columns="batch", values="us").to_numpy()
        if all(np.all(np.diff(line[~np.isnan(line)]) >= 0) for line in [*grid, *grid.T]):
            for r in s.itertuples():
                got = kt.context_attention(int(r.batch), int(r.q_len), int(h), int(kvh), int(hd), kv_dtype=kv)
                assert got.seconds == pytest.approx(r.us * 1e-6, rel=1e-9)
                assert not got.extrapolated
                checked += 1
    assert checked > 100


def test_allreduce_reproduces_measured_rows() -> None:
    d = rows(H100, "allreduce")
    col = d[(d["mode"] == "graph") & (d.tp == 4)].sort_values("bytes")
    ok = in_order(col["us"].to_numpy())
    for b, t in zip(col["bytes"][ok], col["us"][ok], strict=True):
        assert require_tables(H100).allreduce(int(b), 4).seconds == pytest.approx(t * 1e-6, rel=1e-9)


@pytest.mark.parametrize(("n", "k"), [(4096, 4096), (6144, 4096), (5000, 3000), (28672, 8192)])
def test_gemm_monotone_in_m_and_between_neighbours(n: int, k: int) -> None:
    kt = require_tables(H100)
    ms = np.unique(np.geomspace(1, 30000, 300).astype(int))
    t = np.array([kt.gemm(int(m), n, k).seconds for m in ms])
    assert non_decreasing(t)
    grid_m = sorted(rows(H100, "gemm")["m"].unique())
    for lo, hi in itertools.pairwise(grid_m):
        if hi - lo > 1:
            mid = kt.gemm((lo + hi) // 2, n, k).seconds
            assert kt.gemm(lo, n, k).seconds * (1 - 1e-12) <= mid <= kt.gemm(hi, n, k).seconds * (1 + 1e-12)


def test_attention_monotone_in_batch_and_length() -> None:
    kt = require_tables(H100)
    for kv in (600, 2048, 5000):
        t = [kt.generation_attention(b, kv, **LLAMA8B).seconds for b in range(1, 300, 7)]
        assert non_decreasing(t)
    for b in (1, 16, 100):
        t = [kt.generation_attention(b, kv, **LLAMA8B).seconds for kv in range(100, 20000, 333)]
        assert non_decreasing(t)
        c = [kt.context_attention(b, q, **LLAMA8B).seconds for q in range(16, 4000, 97)]
        assert non_decreasing(c)


def test_outside_the_grid_says_extrapolated_and_holds_the_rate() -> None:
    kt = require_tables(H100)
    assert not kt.gemm(1000, 4096, 4096).extrapolated
    top = int(rows(H100, "gemm")["m"].max())
    edge, beyond = kt.gemm(top, 4096, 4096), kt.gemm(2 * top, 4096, 4096)
    assert beyond.extrapolated and not edge.extrapolated
    assert beyond.seconds == pytest.approx(2 * edge.seconds, rel=1e-9)  # rate held
    assert kt.gemm(100, 16, 4096).extrapolated  # n below the grid
    assert kt.generation_attention(8, 300_000, **LLAMA8B).extrapolated
    assert kt.context_attention(1, 40_000, **LLAMA8B).extrapolated
    assert not kt.context_attention(1, 8192, **LLAMA8B).extrapolated
    assert kt.generation_attention(8, 2048, heads=42, kv_heads=3, head_dim=128).extrapolated  # no 14:1 shape
    assert kt.moe(64, 4000, 2000, 64, 4).extrapolated  # no such MoE shape
    assert not kt.moe(64, 4096, 14336, 8, 2, tp=2).extrapolated  # Mixtral TP 2


@pytest.mark.parametrize("gpu", ["l4", "mi300x", "a100-40gb"])
def test_gpu_without_tables(gpu: str) -> None:
    assert gpu in gpu_catalog()
    assert kernel_tables(gpu) is None
    with pytest.raises(ConfigError, match=rf"--gpu {gpu}: no aiconfigurator-core kernel tables.*h100"):
        require_tables(gpu)
    assert describe(gpu).startswith("no aiconfigurator-core")


def test_describe_names_package_vllm_and_system() -> None:
    assert describe(H100) == "aiconfigurator-core 0.12.0, vLLM 0.24.0 tables, h100_sxm"
    assert describe("a100-80gb") == "aiconfigurator-core 0.12.0, vLLM 0.14.0 tables, a100_sxm"
    assert "vLLM 0.24.0" in require_tables(H100).gemm(64, 4096, 4096).note
    assert set(gpus_with_tables()) == {"a100-80gb", "b200", "h100", "h200", "l40s"}


MATH_X = {"bfloat16": 1.0, "fp8": 2.0, "fp8_block": 2.0, "nvfp4": 4.0}


@pytest.mark.parametrize("gpu", ["h100", "h200", "a100-80gb", "l40s", "b200"])
def test_gemm_never_beats_the_datasheet_peak(gpu: str) -> None:
    kt = require_tables(gpu)
    peak = gpu_catalog()[gpu].bf16_tflops * 1e12
    dtypes = sorted(rows(gpu, "gemm")["dtype"].unique())
    for dt in dtypes:
        for m in (1, 37, 512, 3000, 8192, 50_000):
            for n, k in ((4096, 4096), (14336, 4096), (4096, 14336), (1280, 8192), (57344, 8192)):
                t = kt.gemm(m, n, k, dt).seconds
                assert t >= 2.0 * m * n * k / (peak * MATH_X[dt]), (gpu, dt, m, n, k)


def test_decode_attention_never_beats_hbm_bandwidth() -> None:
    """H100 (50 MB L2): every decode read is at most HBM bandwidth. (L40S tables read KV under
    its 96 MB L2 faster than HBM; see calibration/data/aic/README.md.)"""
    kt = require_tables(H100)
    bw = gpu_catalog()[H100].bandwidth_tbps * 1e12
    for b in (1, 8, 64, 256):
        for kv in (512, 2048, 8192, 32768):
            kv_bytes = b * kv * LLAMA8B["kv_heads"] * LLAMA8B["head_dim"] * 2 * 2
            assert kt.generation_attention(b, kv, **LLAMA8B).seconds >= kv_bytes / bw


def test_prefix_chunk_costs_between_its_parts() -> None:
    """A chunk after a prefix costs more than without it, and less than the whole prefill."""
    kt = require_tables(H100)
    alone = kt.context_attention(1, 512, **LLAMA8B).seconds
    chunk = kt.context_attention(1, 512, prefix=7680, **LLAMA8B).seconds
    whole = kt.context_attention(1, 8192, **LLAMA8B).seconds
    assert alone < chunk < whole
    decode = kt.generation_attention(1, 8192, **LLAMA8B).seconds
    assert kt.context_attention(1, 1, prefix=8191, **LLAMA8B).seconds >= decode


def test_moe_exact_shape_is_the_measured_row() -> None:
    d = rows(H100, "moe")
    r = d[(d.dtype == "bfloat16") & (d.distribution == "balanced") & (d.hidden == 4096) & (d.inter == 14336)
          & (d.experts == 8) & (d.topk == 2) & (d.tp == 2) & (d.ep == 1)].sort_values("tokens")
    us = r["us"].to_numpy()
    ok = in_order(us)
    assert ok.sum() > 5
    kt = require_tables(H100)
    for tok, t in zip(r["tokens"].to_numpy()[ok], us[ok], strict=True):
        assert kt.moe(int(tok), 4096, 14336, 8, 2, tp=2).seconds == pytest.approx(t * 1e-6, rel=1e-9)


def test_bad_dtype_and_tp1() -> None:
    kt = require_tables("a100-80gb")
    with pytest.raises(ConfigError, match=r"has no dtype 'fp8' .*bfloat16"):
        kt.gemm(64, 4096, 4096, "fp8")
    assert kt.gemm(64, 4096, 4096, "bf16").seconds == kt.gemm(64, 4096, 4096, "bfloat16").seconds
    assert require_tables(H100).allreduce(1 << 20, 1).seconds == 0.0


def test_fp8_block_never_slower_than_either_table() -> None:
    kt = require_tables(H100)
    for m in (1, 64, 2048, 8192):
        blk = kt.gemm(m, 4096, 4096, "fp8_block").seconds
        assert blk <= kt.gemm(m, 4096, 4096, "fp8").seconds
        assert blk <= kt.gemm(m, 4096, 4096, "fp8_block_as_measured").seconds


@pytest.mark.skipif(importlib.util.find_spec("aiconfigurator_core") is None,
                    reason="aiconfigurator-core not installed (pip install 'kvsim[aic]')")
def test_extract_regenerates_committed_files(tmp_path: Path) -> None:
    from calibration.aic.extract import main

    main(["--out", str(tmp_path)])
    committed = sorted(p.relative_to(DATA_DIR) for p in DATA_DIR.rglob("*") if p.is_file())
    regenerated = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert regenerated == committed
    for rel in committed:
        assert (tmp_path / rel).read_bytes() == (DATA_DIR / rel).read_bytes(), rel


def test_lookup_is_fast() -> None:
    """The cost model calls this per step shape; tens of microseconds, not milliseconds."""
    import time

    kt = require_tables(H100)
    kt.gemm(100, 4096, 4096)
    kt.generation_attention(8, 1000, **LLAMA8B)
    t0 = time.perf_counter()
    for i in range(2000):
        kt.gemm(100 + i, 4096, 4096)
        kt.generation_attention(1 + i % 256, 1000 + i, **LLAMA8B)
    per_call = (time.perf_counter() - t0) / 4000
    assert per_call < 200e-6, f"{per_call * 1e6:.0f} us per lookup"
    assert math.isfinite(per_call)


def test_an_unmeasured_head_shape_is_the_same_tiles_of_a_measured_one() -> None:
    """MHA-40 has no decode slice: its b sequences are read as 5 b sequences of the measured 8/8 (the
    kernels tile by sequence and KV head: the same tiles, bytes and FLOPs), not extrapolated."""
    kt = require_tables(H100)
    for b, n in ((1, 128), (8, 2048), (64, 4096)):
        mha = kt.generation_attention(b, n, heads=40, kv_heads=40, head_dim=128)
        assert b == 64 or not mha.extrapolated
        assert mha.seconds == kt.generation_attention(5 * b, n, heads=8, kv_heads=8, head_dim=128).seconds
