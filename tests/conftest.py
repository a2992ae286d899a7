"""Shared fixtures: tiny traces built in memory, configs with small pools."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from workloads.schema import Trace, validate

REPO = Path(__file__).resolve().parent.parent
# Large optional data (traces/, gpu_profiles/) is not shipped: it is found through KVSIM_DATA only.
# Unset, SHARED names a folder that does not exist and the tests that need it skip, saying so
# (tests/helpers.optional_data for new tests).
SHARED = Path(os.environ["KVSIM_DATA"]) if os.environ.get("KVSIM_DATA") else REPO / "KVSIM_DATA-unset"
SHARED_TRACES = SHARED / "traces"
NO_DATA = "optional data: set KVSIM_DATA to the folder with traces/ and gpu_profiles/"
BUNDLED = REPO / "workloads" / "data" / "azure_conv_slice.csv"


def make_trace(rows: list[dict[str, Any]], path: str = "<memory>") -> Trace:
    df = validate(pd.DataFrame(rows), path)
    return Trace(df=df, path=path, format="normalized")


@pytest.fixture(autouse=True)
def _close_figures() -> Iterator[None]:
    """Close what a test drew: the plotting API returns open figures, which pyplot keeps."""
    yield
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is not None:
        plt.close("all")


@pytest.fixture
def bundled_trace() -> Trace:
    from workloads import load_trace

    return load_trace(BUNDLED)
