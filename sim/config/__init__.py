"""Configuration: one validated :class:`SimConfig` (vLLM's knob names, presets), vLLM's own
spellings as aliases. ``from sim.config import SimConfig, make_config`` is the public entry."""

from sim.config.schema import PRESETS, SimConfig, make_config

__all__ = ["PRESETS", "SimConfig", "make_config"]
