"""Trace readers and generators. ``load_trace(path)`` auto-detects the format by content."""

from __future__ import annotations

from workloads.loader import detect_format, load_trace
from workloads.readers.base import ReadOptions
from workloads.schema import COLUMNS, REQUIRED, Trace

__all__ = ["COLUMNS", "REQUIRED", "ReadOptions", "Trace", "detect_format", "load_trace"]
