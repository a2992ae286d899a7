"""Seeded synthetic trace generators described in YAML (see ``workloads.gen.spec``)."""

from __future__ import annotations

from workloads.gen.generate import generate, load_spec
from workloads.gen.spec import Spec

__all__ = ["Spec", "generate", "load_spec"]
