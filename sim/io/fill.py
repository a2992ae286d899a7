"""Step records from step tuples, and request columns from requests: the loops that fill their
numpy arrays, one value at a time (:func:`sim.io.records.from_tuples`, the step log's
:class:`RowBuffer`, :func:`sim.io.results.attr_columns`).

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

import numpy as np

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
        fill_one(rows[start + i], ints, floats, i * NF)


def fill_one(t: Any, ints: Any, floats: Any, o: int) -> None:
    """Write the tuple ``t`` as the record at ``o`` of the buffers (:func:`fill_records`' rules)."""
    if not isinstance(t, tuple) or len(t) != NF:
        raise TypeError("fill_records: a step record is a tuple of 17 fields")
    v = t[0]  # (an index: v is a Py_ssize_t compiled, which takes no float; a no-op in Python)
    ints[o] = v
    floats[o + 1] = t[1]
    floats[o + 2] = t[2]
    for k in range(3, NF):
        v = t[k]
        ints[o + k] = v


class RowBuffer:
    """Step records appended as tuples (:func:`fill_records`' rules), each written into a growing
    array of records (``dtype``: STEP_DTYPE, 17 fields of 8 bytes) as it comes.

    Why at once: a tuple written while it is new is freed while it is in the cache. Held until
    the log is read, as the log once held them, tens of thousands of tuples and their numbers
    were freed cold, about 300 ns each on the 70B bench run (5 % of it). A bad row raises here,
    as the engine appends it."""

    def __init__(self, dtype: Any, capacity: int = 1024) -> None:
        self.dtype = dtype
        self.n = 0
        self.a = np.empty(0, dtype)
        self._grow(max(capacity, 1))

    def _grow(self, capacity: int) -> None:
        a = np.empty(capacity, self.dtype)
        a[:self.n] = self.a[:self.n]
        self.a, self.ints, self.floats = a, a.view(np.int64).data, a.view(np.float64).data

    def append(self, t: Any) -> None:
        n = self.n
        if n == len(self.a):
            self._grow(2 * n)
        fill_one(t, self.ints, self.floats, n * NF)
        self.n = n + 1

    def __len__(self) -> int:
        return self.n

    def records(self, start: int, end: int) -> np.ndarray:
        """Records ``start .. end - 1``, a copy."""
        return self.a[start:end].copy()

    def clear(self) -> None:
        self.n = 0


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
