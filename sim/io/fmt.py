"""Numbers for people: one place that decides precision, separators and time units.

Every human-facing number (summary tables, ``trace info``, heatmap cells, CDF legends) goes
through these, so a line never mixes ``1,155`` with ``1.405e+04``:

- :func:`num`: three significant digits, thousands separators, never scientific notation;
  whole numbers print as integers (``14,050``, ``5.53``, ``0.0123``, ``2``).
- :func:`duration`: seconds in the unit that reads best (``ms``, ``s``, ``min``, ``h``), e.g.
  ``2774.8236`` s -> ``46.2 min`` and ``0.0123`` s -> ``12.3 ms``.

Machine-readable outputs (``summary.json``, ``--json``, Parquet) keep raw numbers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

#: (name, seconds per unit), largest first; a value takes the first unit it reaches 1 in
TIME_UNITS: tuple[tuple[str, float], ...] = (("h", 3600.0), ("min", 60.0), ("s", 1.0), ("ms", 1e-3))
NA = "n/a"


def num(x: float | None, digits: int = 3, *, whole: bool = True) -> str:
    """``x`` with ``digits`` significant digits (more if its integer part is longer), thousands
    separators and no exponent. With ``whole`` a whole number prints without decimals (counts,
    token lengths); without it ``1.0`` is ``1.00`` (measurements). ``None``/NaN -> ``n/a``."""
    if x is None or math.isnan(x):
        return NA
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == 0 or (whole and x == int(x) and abs(x) < 1e15):
        return f"{int(x):,}"
    e = math.floor(math.log10(abs(x)))
    decimals = max(0, digits - 1 - e)
    r = round(x, decimals)
    if r != 0 and math.floor(math.log10(abs(r))) > e:  # rounding carried: 9.996 -> 10.0
        decimals = max(0, decimals - 1)
    decimals = min(decimals, 12)
    return f"{x:,.{decimals}f}"


def time_unit(seconds: float) -> tuple[str, float]:
    """(name, seconds per unit) that shows ``seconds`` as a number between 1 and its next unit."""
    a = abs(seconds)
    for name, scale in TIME_UNITS:
        if a >= scale:
            return name, scale
    return TIME_UNITS[-1]


def duration(seconds: float | None, digits: int = 3) -> str:
    """``seconds`` in ms, s, min or h (see :data:`TIME_UNITS`), ``digits`` significant digits."""
    if seconds is None or math.isnan(seconds):
        return NA
    if seconds == 0 or math.isinf(seconds):
        return f"{num(seconds)} s"
    rounded = float(f"{seconds:.{digits}g}")  # 59.99 s rounds to 60.0 s: show it as 1 min
    name, scale = time_unit(rounded)
    return f"{num(rounded / scale, digits, whole=False)} {name}"


def durations(values: Iterable[float | None], sep: str = " / ") -> str:
    """Several durations on one line, each in its own unit: ``12.3 ms / 1.20 s / 46.2 min``."""
    return sep.join(duration(v) for v in values)


def percent(share: float | None, digits: int = 1) -> str:
    """A share (0..1) as a percentage with a fixed number of decimals: ``0.366`` -> ``36.6%``."""
    return NA if share is None or math.isnan(share) else f"{100 * share:.{digits}f}%"
