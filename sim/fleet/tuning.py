"""The small knob search ``plan --disagg`` gives every shape, so that xPyD is compared with a
tuned unified baseline and not with vLLM's defaults.

An xPyD split changes what the batch limits mean (a prefill instance never decodes, a decode
instance never meets a long prompt chunk), so a split measured at its best knobs against a
unified replica at the defaults overstates the split: long prompt chunks stall a unified
replica's decodes at the default 8,192-token budget, and 2,048 often fixes that (issue 50
item 4: "xPyD wins by 417 %" became 152 % against a tuned baseline). Every shape, unified and
each split, therefore runs the same grid: ``max_num_batched_tokens`` in {2,048, 8,192} (and
the configured value, if another) x ``max_num_seqs`` in {the configured or default one, 2x}.
Four settings (at most six), so the planner's time grows 4x, not with a full grid. A knob the
user lists on the command line (``--max-num-seqs 64,128``) is searched as given instead.

``kvsim plan`` searches the doubled ``max_num_seqs`` only where the cap was reached
(:func:`raised_seq_cap`): a setting whose batch never filled up in the run just above its
capacity has nothing to gain from a higher cap, and skipping it halves the planner's time
(the study :mod:`sim.fleet.xpyd` keeps the full grid).
"""

from __future__ import annotations

from typing import Any

from sim.config.schema import make_config
from sim.fleet.candidate import KNOBS, Candidate
from sim.memory.budget import batch_defaults
from sim.model.catalog import resolve_gpu

BATCHED_TOKENS = (2048, 8192)


def base_max_num_seqs(base: dict[str, Any], gpu: str) -> int:
    """``max_num_seqs`` of ``base`` on ``gpu``: as configured, else vLLM's default for that GPU."""
    cfg = make_config("plan", **dict(base, gpu=gpu))
    return int(cfg.max_num_seqs or batch_defaults(resolve_gpu(cfg.gpu), cfg.usage_context)[1])


def tuned_knobs(base: dict[str, Any], knobs: dict[str, list[Any]], gpu: str,
                adaptive: bool = False) -> dict[str, list[Any]]:
    """``knobs`` with the two batch limits added where the user did not list them (values as
    the module docstring says; a ``max_num_seqs`` above the smallest token budget is left out,
    vLLM refuses it). ``gpu``: the GPU whose default ``max_num_seqs`` is the base (the first
    of the grid's). ``adaptive``: the default ``max_num_seqs`` only (:func:`raised_seq_cap` adds
    the doubled one where it binds)."""
    out = dict(knobs)
    mbt = knobs.get("max_num_batched_tokens")
    if not mbt:
        own = base.get("max_num_batched_tokens")
        mbt = sorted({*BATCHED_TOKENS, *((int(own),) if own else ())})
        out["max_num_batched_tokens"] = mbt
    if not knobs.get("max_num_seqs"):
        seqs = base_max_num_seqs(base, gpu)
        out["max_num_seqs"] = [seqs, *((2 * seqs,) if 2 * seqs <= min(int(v) for v in mbt) and not adaptive else ())]
    return out


def with_base_knobs(base: dict[str, Any], knobs: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """``knobs`` plus each searchable knob ``base`` sets (a pasted ``vllm serve`` line, --config)
    as a one-value search, so the plan's rows show it instead of "defaults"."""
    return knobs | {k: [base[k]] for k in KNOBS if k not in knobs and base.get(k) is not None}


def raised_seq_cap(searched: list[tuple[Candidate, Any]]) -> list[Candidate]:
    """For each searched ``(candidate, capacity estimate)`` whose running batch reached its
    ``max_num_seqs`` in the run just above its capacity (any seed; on a decode instance for an
    xPyD group), the same candidate at twice the cap -- where vLLM accepts it (not above
    ``max_num_batched_tokens``)."""
    out = []
    for cand, cap in searched:
        kw = dict(cand.knobs)
        seqs, mbt = kw.get("max_num_seqs"), kw.get("max_num_batched_tokens")
        if seqs is None or (mbt is not None and 2 * int(seqs) > int(mbt)):
            continue
        full = any(s.above is not None and (s.above.seq_cap_share > 0 or s.above.decode_seq_full_share > 0)
                   for s in cap.seeds)
        if full:
            knobs = tuple((n, 2 * int(v) if n == "max_num_seqs" else v) for n, v in cand.knobs)
            out.append(Candidate(cand.gpu, cand.tp, knobs, cand.split))
    return out
