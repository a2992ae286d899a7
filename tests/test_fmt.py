"""sim.io.fmt: how numbers read in tables, trace info, heatmap cells and legends."""

from __future__ import annotations

import pytest

from sim.io import fmt


@pytest.mark.parametrize("x,text", [
    (0, "0"), (2.0, "2"), (1000, "1,000"), (14050.0, "14,050"),   # whole numbers: integers
    (1154.7, "1,155"), (211.93, "212"), (5.5301, "5.53"), (0.6167, "0.617"),
    (9.996, "10.0"), (0.09996, "0.100"),                              # rounding carries a digit
    (1234567.891, "1,234,568"), (-3.21, "-3.21"), (12.0001, "12.0"),
    (None, "n/a"), (float("nan"), "n/a"), (float("inf"), "inf"),
])
def test_num_three_significant_digits_separators_no_exponent(x: float | None, text: str) -> None:
    assert fmt.num(x) == text


def test_num_never_uses_scientific_notation() -> None:
    for x in (1.405e4, 8.54e4, 1.262e5, 3.2e-6, 7.7e11):
        assert "e" not in fmt.num(x).lower()


@pytest.mark.parametrize("seconds,text", [
    (2774.8236, "46.2 min"),      # issue 12: "TTFT p50 2774823.6 ms"
    (0.0123, "12.3 ms"), (0.5, "500 ms"), (2.7748, "2.77 s"), (1, "1.00 s"),
    (0.9996, "1.00 s"),           # 999.6 ms rounds to 1,000 ms: show the next unit
    (59.99, "1.00 min"), (3600, "1.00 h"), (5e5, "139 h"), (3e7, "8,333 h"),
    (0, "0 s"), (None, "n/a"), (-2.5, "-2.50 s"),
])
def test_duration_switches_units(seconds: float | None, text: str) -> None:
    assert fmt.duration(seconds) == text


def test_durations_give_each_value_its_own_unit() -> None:
    assert fmt.durations([0.0123, 1.2, 2774.8236]) == "12.3 ms / 1.20 s / 46.2 min"


def test_time_unit_and_percent() -> None:
    assert fmt.time_unit(0.004) == ("ms", 1e-3)
    assert fmt.time_unit(90) == ("min", 60.0)
    assert fmt.time_unit(7200) == ("h", 3600.0)
    assert fmt.percent(0.36641) == "36.6%" and fmt.percent(None) == "n/a"
