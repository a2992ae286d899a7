"""Triton kernels for calibration. Import needs torch + triton (``pip install kvsim[kernel]``).

Kept importable with only torch, triton, numpy and the standard library (the GPU machine runs
torch 2.11 + triton 3.6 on Python 3.12 and nothing can be installed there).
"""

from calibration.kernels.paged_attention import (
    AttentionConfig,
    AttentionMetadata,
    build_metadata,
    choose_config,
    unified_attention,
)
from calibration.kernels.reference import reference_attention
from calibration.kernels.write_kv import write_kv

__all__ = [
    "AttentionConfig",
    "AttentionMetadata",
    "build_metadata",
    "choose_config",
    "reference_attention",
    "unified_attention",
    "write_kv",
]
