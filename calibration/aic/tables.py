"""Which aiconfigurator-core tables kvsim keeps, and how each is reduced.

Every table keeps every measured shape; it drops the columns that are the same on every row of a
table (framework, device, ...) after checking that they are, renames the rest to short names and
converts the time to microseconds, rounded to 4 significant digits (the collectors' run-to-run
spread is ~1 %). Units in the source (checked against physics, see calibration/data/aic/README.md):
latency in ms, except DeepEP all-to-all (µs); comm ``message_size`` counts elements, not bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

US_PER_MS = 1000.0
ELEM_BYTES = {"bfloat16": 2, "half": 2, "float16": 2, "int8": 1, "fp8": 1}


@dataclass(frozen=True, slots=True)
class TableSpec:
    """One output table: where it comes from and how to reduce it."""

    name: str                 # output file stem and the lookup layer's table name
    op_dir: str               # systems/data/<gpu>/<op_dir>/<framework>/<version>/
    framework: str            # "vllm" (vLLM version dirs) or "nccl" (NCCL version dirs)
    file: str                 # parquet file in that dir
    reduce: Callable[[pd.DataFrame], pd.DataFrame]
    constant: tuple[str, ...]  # source columns that must hold one value (then dropped)


def _us(df: pd.DataFrame, unit: float = US_PER_MS) -> pd.Series:
    return df["latency"].astype(float) * unit


def _pick(df: pd.DataFrame, cols: dict[str, str], unit: float = US_PER_MS) -> pd.DataFrame:
    out = pd.DataFrame({new: df[old] for old, new in cols.items()})
    out["us"] = _us(df, unit)
    return out


def gemm(df: pd.DataFrame) -> pd.DataFrame:
    return _pick(df, {"gemm_dtype": "dtype", "kernel_source": "kernel", "m": "m", "n": "n", "k": "k"})


def _attention(df: pd.DataFrame, length: str) -> pd.DataFrame:
    window = df["window_size"] if "window_size" in df else pd.Series(0, index=df.index)
    # context: a prefill of isl tokens with no prefix (step is always 0); generation: one new
    # token (isl = 1) after `step` cached ones, so it attends to step + 1 keys
    span = df["isl"] if length == "q_len" else df["isl"] + df["step"]
    out = pd.DataFrame({"kv_dtype": df["kv_cache_dtype"], "window": window, "kernel": df["kernel_source"],
                        "head_dim": df["head_dim"], "heads": df["num_heads"],
                        "kv_heads": df["num_key_value_heads"], "batch": df["batch_size"], length: span})
    out["us"] = _us(df)
    return out


def context_attention(df: pd.DataFrame) -> pd.DataFrame:
    return _attention(df, "q_len")


def generation_attention(df: pd.DataFrame) -> pd.DataFrame:
    return _attention(df, "kv_len")


def moe(df: pd.DataFrame) -> pd.DataFrame:
    return _pick(df, {"moe_dtype": "dtype", "distribution": "distribution", "kernel_source": "kernel",
                      "hidden_size": "hidden", "inter_size": "inter", "num_experts": "experts",
                      "topk": "topk", "moe_tp_size": "tp", "moe_ep_size": "ep", "num_tokens": "tokens"})


def allreduce(df: pd.DataFrame) -> pd.DataFrame:
    """vLLM's all-reduce as dispatched (custom AR for small messages), CUDA graph or eager."""
    out = pd.DataFrame({"mode": df["backend"].str.removeprefix("vllm_"), "tp": df["num_gpus"]})
    out["bytes"] = df["message_size"] * df["allreduce_dtype"].map(ELEM_BYTES)
    out["us"] = _us(df)
    return out


def nccl(df: pd.DataFrame) -> pd.DataFrame:
    out = pd.DataFrame({"op": df["op_name"], "dtype": df["nccl_dtype"], "gpus": df["num_gpus"]})
    out["bytes"] = df["message_size"] * df["nccl_dtype"].map(ELEM_BYTES)
    out["us"] = _us(df)
    return out


def moe_a2a(df: pd.DataFrame) -> pd.DataFrame:
    """DeepEP dispatch / combine; this table's latency is already in microseconds."""
    return _pick(df, {"comm_backend": "backend", "phase": "phase", "node_num": "nodes", "ep_size": "ep",
                      "hidden_size": "hidden", "num_experts": "experts", "topk": "topk", "sms": "sms",
                      "num_tokens": "tokens"}, unit=1.0)


def _mla(df: pd.DataFrame, length: str) -> pd.DataFrame:
    out = pd.DataFrame({"kv_dtype": df["kv_cache_dtype"], "gemm_dtype": df["gemm_type"],
                        "mla_dtype": df["mla_dtype"], "kernel": df["kernel_source"], "heads": df["num_heads"], "batch": df["batch_size"],
                        length: df["isl"] if length == "q_len" else df["isl"] + df["step"]})
    out["us"] = _us(df)
    return out


def mla_context(df: pd.DataFrame) -> pd.DataFrame:
    return _mla(df, "q_len")


def mla_generation(df: pd.DataFrame) -> pd.DataFrame:
    return _mla(df, "kv_len")


_ID = ("framework", "version", "device", "op_name")
_ATT = (*_ID, "beam_width", "attn_dtype")
_MLA = (*_ID, "model", "architecture", "tp_size")
SPECS: tuple[TableSpec, ...] = (
    TableSpec("gemm", "gemm", "vllm", "gemm_perf.parquet", gemm, _ID),
    TableSpec("context_attention", "attention", "vllm", "context_attention_perf.parquet",
              context_attention, (*_ATT, "step")),
    TableSpec("generation_attention", "attention", "vllm", "generation_attention_perf.parquet",
              generation_attention, (*_ATT, "isl")),
    TableSpec("moe", "moe", "vllm", "moe_perf.parquet", moe, _ID),
    TableSpec("allreduce", "comm", "vllm", "custom_allreduce_perf.parquet", allreduce,
              (*_ID, "allreduce_dtype")),
    TableSpec("moe_a2a", "comm", "vllm", "moe_a2a_perf.parquet", moe_a2a,
              (*_ID, "kernel_source", "comm_dtype", "notify_us")),
    TableSpec("nccl", "comm", "nccl", "nccl_perf.parquet", nccl, (*_ID[:3], "kernel_source")),
    TableSpec("mla_context", "mla", "vllm", "mla_context_module_perf.parquet", mla_context,
              (*_MLA, "step")),
    TableSpec("mla_generation", "mla", "vllm", "mla_generation_module_perf.parquet", mla_generation,
              (*_MLA, "isl")),
)
