"""YAML as plain data: ``yaml.safe_load``'s loader, through libyaml's C parser when PyYAML
was built with it (the wheels are). Same documents, same Python values, same
``yaml.YAMLError`` on bad input; about ten times faster, which every run pays at start-up for
the bundled model catalogue, calibration tables and serving-stack presets (about 0.1 s)."""

from __future__ import annotations

from typing import Any

import yaml

_SAFE: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # no object tags either way


def safe_load(text: str) -> Any:
    """The one YAML document in ``text``, as dicts, lists and scalars (``yaml.safe_load``)."""
    return yaml.load(text, Loader=_SAFE)  # a safe loader: never constructs arbitrary objects
