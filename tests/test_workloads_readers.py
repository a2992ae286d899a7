"""Every trace file under $KVSIM_DATA/traces read by its reader reproduces the reference figures of its README."""

from __future__ import annotations

import pytest

from tests.conftest import NO_DATA, SHARED_TRACES
from workloads import detect_format, load_trace
from workloads.servegen import aggregate_rate, build_trace, mixture, pmf_stats, read_archive
from workloads.stats import trace_stats

TRACES = SHARED_TRACES
pytestmark = pytest.mark.skipif(not TRACES.is_dir(), reason=NO_DATA)

# file, format, rows, span_s, prompt (mean,p50,p90,p99,max,min), output (same), cv, peak/s,
# per-minute (min,max) or None, prefix reuse or None  -- all from $KVSIM_DATA/traces/README.md
CASES = [
    ("azure_llm_2023/AzureLLMInferenceTrace_code.csv", "azure", 8819, 3435.9,
     (2047.8, 1469, 5187.6, 7436, 7437, 3), (27.9, 13, 55, 251.5, 1899, 6), 13.15, 67, (0.25, 10.5), None),
    ("azure_llm_2023/AzureLLMInferenceTrace_conv.csv", "azure", 19366, 3501.7,
     (1154.7, 1020, 2734.5, 4142, 14050, 2), (211.1, 129, 424, 601, 1000, 7), 1.09, 16, (0.62, 8.45), None),
    ("mooncake_fast25/conversation_trace.jsonl", "mooncake", 12031, 3537.0,
     (12035.1, 6909, 27367, 85400, 126195, 891), (342.6, 350, 597, 1118.5, 2000, 1), 3.03, None,
     (2.40, 4.12), (0.366, 288_500, 182_790)),
    ("mooncake_fast25/synthetic_trace.jsonl", "mooncake", 3993, 1022.0,
     (15325.5, 11587, 38611, 66456, 191378, 13), (149.1, 69, 389, 768, 893, 1), 1.01, None, None,
     (0.640, 121_877, 43_924)),
    ("vidur_length_stats/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv", "lengths", 28257, 0.0,
     (2588.1, 2730, 3702, 3933.4, 4054, 1), (291.4, 167, 372, 3271.3, 4056, None), None, None, None, None),
    ("sarathi_length_stats/sharegpt_8k_filtered_stats_llama2_tokenizer.csv", "lengths", 30731, 0.0,
     (2340.0, 1730, 5696, 7433.7, 8141, 1), (438.7, 415, 834, 998, 1024, 2), None, None, None, None),
]


def _close(got: float, want: float, printed: float) -> None:
    """``want`` is printed rounded; ``got`` must round to it (half a unit in the last digit)."""
    assert abs(got - want) <= printed / 2 + 1e-9, (got, want)


def _digits(x: float) -> float:
    s = repr(float(x)) if not float(x).is_integer() else "1"
    return 10.0 ** -len(s.split(".")[1]) if "." in s else 1.0


@pytest.mark.parametrize("case", CASES, ids=[c[0].split("/")[1] for c in CASES])
def test_reader_reproduces_readme_stats(case: tuple) -> None:  # type: ignore[type-arg]
    rel, fmt, rows, span, prompt, output, cv, peak, minute, reuse = case
    path = TRACES / rel
    assert detect_format(path) == fmt
    tr = load_trace(path)
    s = trace_stats(tr.df)
    assert s["num_requests"] == rows
    assert tr.num_bad_rows == 0
    _close(s["span_s"], span, 0.1)
    for key, want in (("prompt_tokens", prompt), ("output_tokens", output)):
        got = s[key]
        for name, w in zip(("mean", "p50", "p90", "p99", "max", "min"), want, strict=True):
            if w is not None:
                _close(got[name], w, _digits(w))
    if cv is not None:
        _close(s["interarrival_cv"], cv, _digits(cv))
    if peak is not None:
        assert s["peak_per_s"] == peak
    if minute is not None:
        _close(s["minute_rate_min"], minute[0], _digits(minute[0]))
        _close(s["minute_rate_max"], minute[1], _digits(minute[1]))
    if span:
        _close(s["rate_per_s"], rows / span, 0.001)
    if reuse is not None:
        ratio, refs, unique = reuse
        assert (s["block_refs"], s["unique_blocks"]) == (refs, unique)
        _close(s["prefix_reuse"], ratio, 0.001)


def test_mooncake_keeps_simultaneous_arrivals() -> None:
    df = load_trace(TRACES / "mooncake_fast25/conversation_trace.jsonl").df
    assert df["arrival_s"].nunique() == 1180  # README: 1,180 distinct timestamps for 12,031 rows
    assert (df["tokens_per_hash"] == 512).all()
    assert df["arrival_s"].is_monotonic_increasing


def test_azure_rows_keep_their_file_line() -> None:
    df = load_trace(TRACES / "azure_llm_2023/AzureLLMInferenceTrace_conv.csv").df
    assert df["source_line"].iloc[0] == 2 and df["source_line"].iloc[-1] == 19367
    assert df["arrival_s"].iloc[0] == 0.0


# archive, clients, aggregate rate (mean, min, max), {field: (mean, p50, p90, p99, max)}
SERVEGEN = [
    ("reason_deepseek-r1.tar.xz", 73, (16.0, 4.3, 42.5),
     {"input_tokens": (1268.2, 208, 2092, 23423, 57284), "output_tokens": (1527.4, 792, 3432, 12607, 32768),
      "reason_ratio": (0.70, 0.76, None, None, None)}),
    ("multimodal_mm-image.tar.xz", 35, (9.47, 4.85, 13.29),
     {"text_tokens": (572.1, 106, 1914, 3064, 4242), "image_tokens": (649.8, 540, 1224, 1271, 1280),
      "image_count": (1.6, 1, 3, 9, 49), "output_tokens": (129.7, 100, 264, 587, 2000)}),
    ("language_m-small.tar.xz", 43, (1174, 0, 3880),
     {"input_tokens": (119.7, 40, 322, 1478, 145912), "output_tokens": (14.9, 3, 44, 142, 10912)}),
    ("language_m-mid_trace-only.tar.xz", 109, (1790, 0, 3445), {}),
    ("language_m-large_trace-only.tar.xz", 162, (195.8, 48.4, 583.0), {}),
]


@pytest.mark.parametrize("case", SERVEGEN, ids=[c[0] for c in SERVEGEN])
def test_servegen_archive_reproduces_readme_stats(case: tuple) -> None:  # type: ignore[type-arg]
    name, clients, (mean, lo, hi), lengths = case
    data = read_archive(TRACES / "servegen" / name)
    assert len(data.clients) == clients
    agg = aggregate_rate(data)
    _close(float(agg.mean()), mean, _digits(mean))
    _close(float(agg.min()), lo, _digits(lo))
    _close(float(agg.max()), hi, _digits(hi))
    for field, want in lengths.items():
        got = pmf_stats(mixture(data, field))  # type: ignore[arg-type]
        for key, w in zip(("mean", "p50", "p90", "p99", "max"), want, strict=True):
            if w is not None:
                _close(got[key], w, _digits(w))
    if not lengths:
        assert not data.has_lengths


def test_servegen_build_reproduces_total_rate_and_is_seeded() -> None:
    """Arrivals per client-window are renewal processes; Var(count) ~= E(count) * CV^2."""
    import numpy as np
    from scipy.special import gamma as G

    data = read_archive(TRACES / "servegen/reason_deepseek-r1.tar.xz")
    start, dur, total = 36_000.0, 3_600.0, 20.0
    df = build_trace(data, np.random.default_rng(5), total_rate=total, start_s=start, duration_s=dur)
    again = build_trace(data, np.random.default_rng(5), total_rate=total, start_s=start, duration_s=dur)
    assert df.equals(again)
    agg = aggregate_rate(data)
    factor = total / agg[(agg.index >= start) & (agg.index < start + dur)].mean()
    var = 0.0
    for c in data.clients.values():
        w = c.windows[(c.windows["window_start_s"] >= start) & (c.windows["window_start_s"] < start + dur)
                      & (c.windows["rate"] > 0)]
        k = w["shape"].to_numpy()
        cv2 = np.where(w["pattern"] == "Weibull", G(1 + 2 / k) / G(1 + 1 / k) ** 2 - 1, 1 / k)
        var += float((w["rate"].to_numpy() * factor * 600 * cv2).sum())
    assert abs(len(df) - total * dur) <= 5 * np.sqrt(var), (len(df), total * dur, np.sqrt(var))
    assert df["arrival_s"].between(0, dur).all() and (df["prompt_tokens"] >= 1).all()
