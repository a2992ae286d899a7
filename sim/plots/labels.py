"""Legend labels that tell runs apart.

A run's label is its allocator config (``paged B=16``). Runs that share a config but replay
different traces, or differ only in a knob the label does not show, would get the same legend
entry; :func:`distinct_labels` adds what differs:

1. the trace file name, when the runs' traces differ;
2. the run's name (its output directory), if labels still collide;
3. the full path, if even the names collide (``a/run`` and ``b/run``).
"""

from __future__ import annotations

from collections.abc import Sequence


def _unique(labels: Sequence[str]) -> bool:
    return len(set(labels)) == len(labels)


def distinct_labels(labels: Sequence[str], traces: Sequence[str], names: Sequence[str],
                    paths: Sequence[str] | None = None) -> list[str]:
    """``labels`` made pairwise distinct with the fewest additions (see the module docstring)."""
    out = list(labels)
    if _unique(out):
        return out
    if len(set(traces)) > 1:
        out = [f"{lab} | {tr}" for lab, tr in zip(out, traces, strict=True)]
    if not _unique(out):
        tags = names if _unique(names) or paths is None else paths
        out = [f"{tag}: {lab}" for lab, tag in zip(out, tags, strict=True)]
    return out
