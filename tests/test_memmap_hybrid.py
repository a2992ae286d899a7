"""The memory map draws one KV-cache group: hybrid models get a one-line error, not a traceback."""

from __future__ import annotations

import pytest

from sim.config.schema import make_config
from sim.errors import ConfigError
from sim.plots.memmap import record_layout
from tests.conftest import make_trace


def test_memmap_refuses_a_hybrid_model_with_one_line() -> None:
    trace = make_trace([{"arrival_s": 0.0, "prompt_tokens": 40, "output_tokens": 2}])
    with pytest.raises(ConfigError, match="sliding-window or chunked-local") as err:
        record_layout(make_config(model="gemma-3-27b", gpu="h200", max_model_len=4096), trace)
    assert "\n" not in str(err.value)


def test_memmap_still_draws_a_full_attention_model() -> None:
    trace = make_trace([{"arrival_s": 0.0, "prompt_tokens": 40, "output_tokens": 2}])
    lay = record_layout(make_config(num_gpu_blocks=64, max_model_len=512), trace)
    assert lay.kind == "paged" and len(lay.times) == len(lay.state) > 0
