"""Step records from step tuples, and request columns from requests: the loops that fill their
numpy arrays, one value at a time (:func:`sim.io.records.from_tuples`,
:func:`sim.io.results.attr_columns`).

Both write into flat buffers their caller lays over its array -- a STEP_DTYPE array seen as
int64 and as float64, a 2-D column block seen flat -- the values ``np.fromiter`` would write.
An int field takes an int (or an int enum, a numpy int: an object with ``__index__``), a float
field a float or an int; a value of another kind raises TypeError (a float in an int field
too, where fromiter would truncate it), a missing attribute AttributeError, and a buffer of
the wrong length ValueError before anything is written.

Compiled by Cython where a C compiler is (``fill.pxd``: typed memoryviews, one C conversion a
value; ``setup.py``), else it runs as this Python, over memoryviews of the same arrays.
"""

from __future__ import annotations

from typing import Any

NF = 17  # fields of a StepRecord (sim/io/records.py): start_s, duration_s (1, 2) are floats


def fill_records(rows: list[Any], ints: Any, floats: Any, start: int, end: int) -> None:
    """Write the tuples ``rows[start:end]`` into ``end - start`` records of 17 fields:
    ``ints`` and ``floats`` are one buffer of int64 and float64 values (a STEP_DTYPE array
    viewed both ways, flat), fields 1 and 2 written as floats, the others as ints."""
    n = end - start
    if start < 0 or n < 0 or end > len(rows):
        raise IndexError(f"fill_records: rows {start}:{end} of {len(rows)}")
    if len(ints) != n * NF or len(floats) != n * NF:
        raise ValueError(f"fill_records: need {n * NF} values for {n} records")
    for i in range(n):
        t = rows[start + i]
        if not isinstance(t, tuple) or len(t) != NF:
            raise TypeError("fill_records: a step record is a tuple of 17 fields")
        o = i * NF
        v = t[0]  # (an index: v is a Py_ssize_t compiled, which takes no float; a no-op in Python)
        ints[o] = v
        floats[o + 1] = t[1]
        floats[o + 2] = t[2]
        for k in range(3, NF):
            v = t[k]
            ints[o + k] = v


def gather_attrs(objs: list[Any], names: tuple[str, ...], ints: Any, floats: Any) -> None:
    """Write ``getattr(objs[i], names[k])`` at ``i * len(names) + k`` of ``ints`` (an int64
    buffer) or ``floats`` (a float64 buffer), whichever is not None: a C-contiguous
    ``len(objs) x len(names)`` array, flat."""
    m = len(names)
    n = len(objs)
    if (len(ints) if floats is None else len(floats)) != n * m:
        raise ValueError(f"gather_attrs: need {n * m} values for {n} x {m}")
    j = 0
    for i in range(n):
        o = objs[i]
        for k in range(m):
            if floats is None:
                v = getattr(o, names[k])  # (as in fill_records)
                ints[j] = v
            else:
                floats[j] = getattr(o, names[k])
            j += 1
