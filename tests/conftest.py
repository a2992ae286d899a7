"""Shared fixtures: tiny traces built in memory, configs with small pools."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from workloads.schema import Trace, validate

REPO = Path(__file__).resolve().parent.parent
# the shared data sits beside the checkout (../shared); a clone elsewhere falls back to /work/shared
SHARED = next((p for p in (REPO.parent / "shared", Path("/work/shared")) if p.exists()), REPO.parent / "shared")
SHARED_TRACES = SHARED / "traces"
AZURE_CONV = SHARED_TRACES / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
MOONCAKE_CONV = SHARED_TRACES / "mooncake_fast25" / "conversation_trace.jsonl"
BUNDLED = REPO / "workloads" / "data" / "azure_conv_slice.csv"


def make_trace(rows: list[dict[str, Any]], path: str = "<memory>") -> Trace:
    df = validate(pd.DataFrame(rows), path)
    return Trace(df=df, path=path, format="normalized")


@pytest.fixture
def bundled_trace() -> Trace:
    from workloads import load_trace

    return load_trace(BUNDLED)
