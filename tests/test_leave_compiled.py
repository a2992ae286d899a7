"""Finished decoders leave a window's indexes alike with the compiled call
(``_quiet_steps.leave_all``) and with ``decoders._leave_all``, its Python reference: the same
buckets, counts and sums, and whole runs the same. Skipped, with the reason, where the extension
was not built."""

from __future__ import annotations

from typing import Any

import pytest

from sim.engine.fastforward import decoders
from tests.helpers import conv_slice, req, require_built, same_either_way


def window_of(B: int) -> tuple[list[Any], list[list[Any]]]:
    """Six decoders at virtual counts, indexed in B buckets, each holding some blocks."""
    from sim.kv.block_table import BlockTable

    reqs = [req(i, 10 + 7 * i) for i in range(6)]
    buckets: list[list[Any]] = [[] for _ in range(B)]
    for i, r in enumerate(reqs):
        r.num_computed_tokens, r.num_output, r.num_tokens = 9 + 5 * i - 3, 2 + i, 10 + 5 * i - 3
        r.kv = BlockTable(blocks=list(range(i + 1)))
        buckets[(1 - r.num_computed_tokens) % B].append(r)
    return reqs, buckets


@pytest.mark.parametrize("paged", [True, False])
def test_finished_decoders_leave_alike(paged: bool) -> None:
    require_built(decoders.leave_all is not decoders._leave_all or None, "sim/engine/fastforward/_quiet_steps.c")
    seen = []
    for leave_all in (decoders.leave_all, decoders._leave_all):
        reqs, buckets = window_of(4)
        done = [reqs[4], reqs[1], reqs[2]]
        sums = leave_all(done, buckets, 3, paged)
        seen.append((sums, [[r.uid for r in b] for b in buckets],
                     [(r.num_computed_tokens, r.num_output, r.num_tokens) for r in reqs]))
    assert seen[0] == seen[1]
    assert seen[0][0] == ((9 + 20 - 3) + (9 + 5 - 3) + (9 + 10 - 3), 5 + 2 + 3 if paged else 0)


def test_a_decoder_not_in_its_bucket_is_an_error_as_in_python() -> None:
    require_built(decoders.leave_all is not decoders._leave_all or None, "sim/engine/fastforward/_quiet_steps.c")
    for leave_all in (decoders.leave_all, decoders._leave_all):
        _, buckets = window_of(4)
        with pytest.raises(ValueError):
            leave_all([req(9, 5)], buckets, 1, True)


def passes(which: str) -> Any:
    from sim.compiled import compiled

    c = getattr(compiled("sim.engine.fastforward._quiet_steps"), "leave_all", None)
    return c if which == "compiled" else decoders._leave_all


@pytest.mark.parametrize("cfg", [
    dict(max_model_len=4096, num_gpu_blocks=300, max_num_seqs=64),
    dict(max_model_len=4096, num_gpu_blocks=700, async_scheduling=False),
    dict(max_model_len=4096, allocator="slab"),
], ids=["async-tight-pool", "sync", "slab"])
def test_a_replica_is_the_same_either_way(cfg: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    require_built(passes("compiled"), "sim/engine/fastforward/_quiet_steps.c")
    trace = conv_slice(150)
    run, _ = same_either_way(monkeypatch, (decoders, "leave_all"), passes, trace, **cfg)
    assert run.summary.fast_forward_steps > 0
