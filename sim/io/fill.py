"""Step records from step rows, and request columns from requests: the loops that fill their
numpy arrays, one value at a time (the step log's :class:`RowBuffer`,
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

import numpy as np

from sim.request import Request

NF = 17  # fields of a StepRecord (sim/io/records.py): start_s, duration_s (1, 2) are floats


def write(ints: Any, floats: Any, o: int, step: int, start_s: float, duration_s: float, num_running: int,
          num_waiting: int, prefill_tokens: int, decode_tokens: int, num_preempted: int, free_blocks: int,
          token_state_slots: int, reserved_slots: int, internal_frag_slots: int, external_frag_slots: int,
          free_slots: int, shared_blocks_saved: int, swap_out_blocks: int, swap_in_blocks: int) -> None:
    """One record at ``o``, in StepRecord's field order: the one place a record's fields are
    written (compiled, each int an index: a float refused, as Python's memoryview refuses it)."""
    ints[o] = step
    floats[o + 1] = start_s
    floats[o + 2] = duration_s
    ints[o + 3] = num_running
    ints[o + 4] = num_waiting
    ints[o + 5] = prefill_tokens
    ints[o + 6] = decode_tokens
    ints[o + 7] = num_preempted
    ints[o + 8] = free_blocks
    ints[o + 9] = token_state_slots
    ints[o + 10] = reserved_slots
    ints[o + 11] = internal_frag_slots
    ints[o + 12] = external_frag_slots
    ints[o + 13] = free_slots
    ints[o + 14] = shared_blocks_saved
    ints[o + 15] = swap_out_blocks
    ints[o + 16] = swap_in_blocks


class RowBuffer:
    """Step records appended as tuples (the module's rules), each written into a growing array of
    records (``dtype``: STEP_DTYPE, 17 fields of 8 bytes) as it comes.

    Why at once: a tuple written while it is new is freed while it is in the cache. Held until
    the log was read, tens of thousands of tuples and their numbers were converted and freed
    cold: 5.5 % of the 70B bench run (perf). A bad row raises here, as the engine appends it."""

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
        """A step's row as a tuple in StepRecord's field order (a StepRecord is one)."""
        if not isinstance(t, tuple) or len(t) != NF:
            raise TypeError("RowBuffer: a step record is a tuple of 17 fields")
        self.add(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[9], t[10], t[11], t[12], t[13], t[14],
                 t[15], t[16])

    def add(self, step: int, start_s: float, duration_s: float, num_running: int, num_waiting: int,
            prefill_tokens: int, decode_tokens: int, num_preempted: int, free_blocks: int, token_state_slots: int,
            reserved_slots: int, internal_frag_slots: int, external_frag_slots: int, free_slots: int,
            shared_blocks_saved: int, swap_out_blocks: int, swap_in_blocks: int) -> None:
        """A step's row as its fields (the compiled loops that name this class call it with C
        numbers: no tuple, no int objects)."""
        n = self.n
        if n == len(self.a):
            self._grow(2 * n)
        write(self.ints, self.floats, n * NF, step, start_s, duration_s, num_running, num_waiting, prefill_tokens,
              decode_tokens, num_preempted, free_blocks, token_state_slots, reserved_slots, internal_frag_slots,
              external_frag_slots, free_slots, shared_blocks_saved, swap_out_blocks, swap_in_blocks)
        self.n = n + 1

    def __len__(self) -> int:
        return self.n

    def view(self, start: int, end: int) -> np.ndarray:
        """Records ``start .. end - 1`` in place: valid until the next append or clear."""
        return self.a[start:end]

    def records(self, start: int, end: int) -> np.ndarray:
        """Records ``start .. end - 1``, a copy."""
        return self.a[start:end].copy()

    def clear(self) -> None:
        self.n = 0


def gather_attrs(objs: list[Any], names: tuple[str, ...], ints: Any, floats: Any) -> None:
    """Write ``getattr(objs[i], names[k])`` at ``i * len(names) + k`` of ``ints`` (an int64
    buffer) or ``floats`` (a float64 buffer), whichever is not None: a C-contiguous
    ``len(objs) x len(names)`` array, flat. A :class:`~sim.request.Request`'s numeric fields
    are read by :func:`request_field` (the same values: compiled, struct members)."""
    m = len(names)
    n = len(objs)
    if (len(ints) if floats is None else len(floats)) != n * m:
        raise ValueError(f"gather_attrs: need {n * m} values for {n} x {m}")
    codes = [NUMERIC.get(x, -1) for x in names]
    j = 0
    for i in range(n):
        o = objs[i]
        plain = type(o) is Request
        for k in range(m):
            code = codes[k]
            x = request_field(o, code) if plain and code >= 0 else getattr(o, names[k])
            if floats is None:
                v = x  # (an index: v is a Py_ssize_t compiled, which takes no float; a no-op in Python)
                ints[j] = v
            else:
                floats[j] = x
            j += 1


#: the numeric fields of a Request that :func:`request_field` reads, by name
NUMERIC = {name: i for i, name in enumerate((
    "uid", "arrival_s", "prompt_tokens", "output_tokens", "priority", "parent", "num_tokens", "status", "seq",
    "num_computed_tokens", "num_output", "pending_output", "first_scheduled_s", "first_scheduled_step",
    "first_token_s", "finish_s", "finish_step", "num_preemptions", "prefix_hit_tokens"))}


def request_field(r: Request, code: int) -> Any:
    """The field of ``r`` named by ``code`` (:data:`NUMERIC`): what ``getattr`` gives, read
    as a struct member where compiled (no lookup by name)."""
    if code < 9:
        if code == 0:
            return r.uid
        if code == 1:
            return r.arrival_s
        if code == 2:
            return r.prompt_tokens
        if code == 3:
            return r.output_tokens
        if code == 4:
            return r.priority
        if code == 5:
            return r.parent
        if code == 6:
            return r.num_tokens
        if code == 7:
            return r.status
        return r.seq
    if code == 9:
        return r.num_computed_tokens
    if code == 10:
        return r.num_output
    if code == 11:
        return r.pending_output
    if code == 12:
        return r.first_scheduled_s
    if code == 13:
        return r.first_scheduled_step
    if code == 14:
        return r.first_token_s
    if code == 15:
        return r.finish_s
    if code == 16:
        return r.finish_step
    if code == 17:
        return r.num_preemptions
    if code == 18:
        return r.prefix_hit_tokens
    raise ValueError(f"request_field: no field {code}")
