"""What a file is, from its first bytes: the pieces of format detection that explain failures.

``workloads.loader.detect_format`` asks each reader's ``sniff`` first. When none accepts the
file, these say why in words a user can act on:

- an empty file, a compressed file (gzip, zip, bzip2, zstd) or other binary content is named
  as such, never echoed as raw bytes;
- a header that shares columns with a known format names the columns it lacks
  (``field 'GeneratedTokens' missing (the header looks like the azure format ...)``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from workloads.readers.base import Reader

HEAD_BYTES = 65536
COMPRESSED = {b"\x1f\x8b": "gzip", b"PK\x03\x04": "zip", b"BZh": "bzip2", b"\x28\xb5\x2f\xfd": "zstd"}


def content_problem(raw: bytes) -> str | None:
    """Why the first :data:`HEAD_BYTES` bytes of a file cannot be a text trace, or None."""
    if not raw.strip():
        return "empty file (no header, no rows)"
    for magic, name in COMPRESSED.items():
        if raw.startswith(magic):
            return (f"a {name}-compressed file: decompress it first (kvsim reads Parquet, CSV, JSONL "
                    "and ServeGen .tar.xz archives)")
    nul = raw.find(b"\x00")
    if nul >= 0:
        return f"binary content (a NUL byte at offset {nul}), not a text trace"
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(raw) - 3:  # not just a character cut at the end of the sample
            return f"not UTF-8 text (undecodable byte at offset {e.start}), not a text trace"
    return None


def header_columns(head: str) -> list[str]:
    """Column names of a CSV header line, or the keys of a JSON object line."""
    if head.startswith("{"):
        try:
            obj = json.loads(head)
        except json.JSONDecodeError:
            return []
        return [str(k) for k in obj] if isinstance(obj, dict) else []
    return [c.strip() for c in head.split(",") if c.strip()]


def nearest_format(columns: list[str], readers: Iterable[Reader]) -> tuple[Reader, list[str]] | None:
    """The reader whose required columns the header shares most (case-insensitively), with the
    ones it lacks (exact names); None when the header shares none with any format."""
    have = set(columns)
    have_lower = {c.lower() for c in columns}
    best: tuple[int, float, Reader] | None = None
    for r in readers:
        shared = sum(c.lower() in have_lower for c in r.columns)
        if shared and (best is None or (shared, shared / len(r.columns)) > best[:2]):
            best = (shared, shared / len(r.columns), r)
    if best is None:
        return None
    reader = best[2]
    return reader, [c for c in reader.columns if c not in have]
