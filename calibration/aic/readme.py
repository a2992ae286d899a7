"""README.md and NOTICE of calibration/data/aic/, written by the extractor so they never drift."""

from __future__ import annotations

from typing import Any

TABLES = ("gemm", "context_attention", "generation_attention", "moe", "mla_context", "mla_generation",
          "allreduce", "moe_a2a", "nccl")

COLUMNS = """\
Every time `us` is the collector's time for **one call of one operator on one GPU** (one layer), in
**microseconds**, rounded to 4 significant digits. Head counts, expert counts and intermediate
sizes are as the collector passed them; `heads`/`kv_heads` are **per GPU** (after tensor parallelism).

| table | key columns | notes |
|---|---|---|
| `gemm` | `dtype` (bfloat16, fp8 = per-tensor W8A8, fp8_block = 128x128 block-scaled, nvfp4 on B200), `kernel`, `m` (tokens), `n` (output features), `k` (input features) | `kernel` is the kernel vLLM dispatched for that shape (e.g. H100 fp8_block: FlashInfer for m <= 17, DeepGEMM above, CUTLASS when n or k < 128) |
| `context_attention` | `kv_dtype`, `window` (0 = full attention), `kernel`, `head_dim`, `heads`, `kv_heads`, `batch`, `q_len` | causal prefill of `q_len` tokens per sequence with **no prefix** (the collector's `isl`, `step` = 0) |
| `generation_attention` | same, with `kv_len` | one new token per sequence attending to `kv_len` keys (`kv_len` = `isl` + `step` = step + 1) |
| `moe` | `dtype`, `distribution` (balanced, power_law_1.01, power_law_1.2 token-to-expert skew), `kernel`, `hidden`, `inter` (expert intermediate size, whole model), `experts` (all routed experts), `topk`, `tp`, `ep` (MoE tensor / expert parallel sizes), `tokens` | the fused-MoE kernel(s) of one layer; router and all-to-all not included |
| `mla_context`, `mla_generation` | `kv_dtype`, `gemm_dtype` (projection GEMMs), `mla_dtype` (attention math; fp8 only on B200), `kernel`, `heads` (per GPU), `batch`, `q_len` / `kv_len` | DeepSeek-V3's whole MLA attention module of one layer (its projections and attention), measured at `heads` = 128 / TP |
| `allreduce` | `mode` (graph: inside a CUDA graph, eager), `tp`, `bytes` | vLLM's tensor-parallel all-reduce as dispatched (custom all-reduce for small messages), bf16; `bytes` = the collector's element count x 2 |
| `moe_a2a` | `backend` (deepep_ht, deepep_ll, deepep_v2_*), `phase` (dispatch, combine), `nodes`, `ep`, `hidden`, `experts`, `topk`, `sms`, `tokens` | DeepEP all-to-all measured under vLLM 0.24 (source latency already in µs) |
| `nccl` | `op` (all_reduce, all_gather, reduce_scatter, alltoall), `dtype` (half, int8), `gpus`, `bytes` | nccl-tests-style collectives at the package's newest NCCL version (not a vLLM table); `bytes` = elements x element size |

Source units were checked against physics before conversion: GEMM latency is in ms (H100 bf16
8192x4096x4096 = 0.347 ms = 792 TFLOP/s, 80 % of peak), comm `message_size` counts elements
(NCCL int8 at 2x the elements takes the time of half at 1x), DeepEP latency is in µs.
Repeated measurements of one shape (A100 context attention, 408 pairs, median spread 0.6 %) are
averaged. Every shape has one row: `kernel` names the kernel vLLM dispatched for it (the extractor
keeps it for reading; the lookup does not key on it)."""

CAVEATS = """\
- **fp8_block GEMM at small m is host-bound.** Up to m ~ 3000 the fp8_block rows sit on a floor
  that does not move with n or k (H100 85-95 us, B200 170-250 us, L40S 300-390 us, e.g. H100
  m = 64, n = k = 128: 92 us): consistent with launch/host overhead of the block-scaled path, not
  GPU time; where the GPU work dominates it agrees with per-tensor fp8 (H100 8192x4096x4096:
  288 vs 299 us). `KernelTables.gemm(..., "fp8_block")` returns the lesser of the two tables;
  `"fp8_block_as_measured"` reads the block table alone.
- **Decode attention below the L2 size is L2-warm.** L40S (96 MB L2) rows whose KV read is
  8-100 MB run up to 2.9x its HBM bandwidth (4,000 full-attention rows); on H100/H200/B200/A100 no
  full-attention row exceeds HBM bandwidth. A step's per-layer KV read is not L2-resident in
  serving: floor attention by KV bytes / bandwidth.
- The collectors' times are noisy at the few-% level and some rows spike; the lookup smooths each
  operator to be non-decreasing in its size axes (least squares, unbiased) before interpolating.
- The tables time isolated kernels: an engine adds launch gaps, CPU work and overlap effects."""

REGEN = """\
    pip install 'kvsim[aic]'               # aiconfigurator-core==0.12.0 (82 MB wheel)
    python -m calibration.aic.extract      # or --aic-root DIR (an unpacked wheel's aiconfigurator_core/) --out DIR

The output is deterministic (same package and pyarrow -> same bytes); `tests/test_kernel_tables.py`
regenerates it into a temporary folder and compares byte for byte when the package is installed."""


def _versions(manifest: dict[str, Any]) -> list[str]:
    gpus = manifest["gpus"]
    head = "| kvsim GPU | aiconfigurator system | " + " | ".join(TABLES) + " |"
    lines = [head, "|" + "---|" * (len(TABLES) + 2)]
    for gpu, g in gpus.items():
        cells = []
        for t in TABLES:
            e = g["tables"].get(t)
            cells.append("-" if e is None else f"{e['version']} ({e['rows']:,})")
        lines.append(f"| {gpu} | {g['system']} | " + " | ".join(cells) + " |")
    return lines


def _notes(manifest: dict[str, Any]) -> list[str]:
    out = []
    for gpu, g in manifest["gpus"].items():
        for t, e in g["tables"].items():
            if "folder" in e:
                out.append(f"- {gpu} `{t}`: the package's `{e['folder']}` folder holds vLLM {e['version']} rows "
                           "(reused data); labelled with the version they were measured under.")
            for v, n in e.get("dropped_other_runtime_rows", {}).items():
                out.append(f"- {gpu} `{t}`: {n} rows measured under another runtime ({v}) left out.")
    return out or ["- none"]


def readme_text(manifest: dict[str, Any]) -> str:
    version = manifest["package_version"]
    return "\n".join([
        "# NVIDIA aiconfigurator-core vLLM operator tables (reduced for kvsim)",
        "",
        f"Per-operator kernel times measured by NVIDIA inside vLLM, from **aiconfigurator-core "
        f"{version}** (PyPI, Apache-2.0, NVIDIA; the package's `systems/data/<gpu>/<op>/vllm/<version>/` "
        "parquet tables), reduced by `calibration/aic/extract.py`. Every measured shape is kept; only "
        "columns that are constant within a table are dropped. The lookup layer is "
        "`sim/cost/kernel_tables.py` (interpolated seconds per call, with an `extrapolated` flag).",
        "",
        "GPUs the package has no vLLM tables for (L4, MI300X, A100-40GB) have no folder here.",
        "",
        "## vLLM version per GPU and table (rows in parentheses; `nccl` is an NCCL version)",
        "",
        *_versions(manifest),
        "",
        "`manifest.json` lists each table's source file inside the package. Exceptions:",
        "",
        *_notes(manifest),
        "",
        "## Columns and units",
        "",
        COLUMNS,
        "",
        "## Caveats (found while reducing the tables)",
        "",
        CAVEATS,
        "",
        "## Regenerate",
        "",
        REGEN,
        "",
        "## Licence",
        "",
        "The data are NVIDIA's, under the Apache License 2.0 (`LICENSE`); see `NOTICE`.",
        "",
    ])


def notice_text(version: str) -> str:
    return (
        "This folder contains data derived from aiconfigurator-core " + version + "\n"
        "(https://pypi.org/project/aiconfigurator-core/), part of NVIDIA AIConfigurator\n"
        "(https://github.com/ai-dynamo/aiconfigurator).\n"
        "Copyright (c) 2025-2026 NVIDIA CORPORATION & AFFILIATES. All rights reserved.\n"
        "Licensed under the Apache License, Version 2.0 (see LICENSE).\n"
        "\n"
        "Modifications by the kvsim authors: the vLLM-collected operator tables were reduced to the\n"
        "columns kvsim uses, times converted to microseconds and rounded to 4 significant digits,\n"
        "and repeated measurements of one shape averaged (calibration/aic/extract.py).\n"
    )
