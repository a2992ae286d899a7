"""vLLM's own spellings of two config knobs, accepted as aliases (flags and ``--config`` keys).

    num_gpu_blocks_override  -> num_gpu_blocks   (same meaning: the block count, null block included)
    kv_cache_memory_bytes    -> kv_memory        (vLLM takes bytes as an int or a human-readable int)

vLLM parses ``kv_cache_memory_bytes`` with ``human_readable_int`` (``vllm/utils/argparse_utils.py``):
a plain integer is bytes, a lowercase suffix is decimal (``50g`` = 50 x 10^9) and an uppercase
one binary (``50G`` = 50 x 2^30, no decimals). kvsim's own ``50GB`` / ``50GiB`` are accepted too.
"""

from __future__ import annotations

import re
from typing import Any

from sim.errors import ConfigError

VLLM_ALIASES = {"num_gpu_blocks_override": "num_gpu_blocks", "kv_cache_memory_bytes": "kv_memory"}

_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def human_readable_bytes(value: Any, flag: str = "--kv-cache-memory-bytes") -> str:
    """vLLM's ``human_readable_int`` for a byte count, returned as kvsim's ``NB`` size string."""
    if isinstance(value, bool):
        raise ConfigError(f"{flag} {value!r}: expected a byte count, e.g. 53687091200, 50g or 50G")
    if isinstance(value, int):
        n = value
    else:
        text = str(value).strip()
        m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgtKMGT]?)", text)
        if m is None:
            if re.fullmatch(r"[0-9.]+\s*[kmgtKMGT]i?[bB]", text):
                return text  # kvsim's own 50GB / 12GiB
            raise ConfigError(f"{flag} {value!r}: expected a byte count, e.g. 53687091200, 50g or 50G")
        number, suffix = m.groups()
        if suffix in _BINARY and "." in number:
            raise ConfigError(f"{flag} {value!r}: decimals need a lowercase (decimal) suffix, e.g. {number}{suffix.lower()}")
        n = int(float(number) * _DECIMAL[suffix]) if suffix in _DECIMAL else int(number) * _BINARY.get(suffix, 1)
    if n < 1:
        raise ConfigError(f"{flag} {value!r}: must be at least 1 byte")
    return f"{n}B"


def vllm_aliases(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with vLLM's spellings renamed to kvsim's; both spellings at once is an error."""
    if not any(k in data for k in VLLM_ALIASES):
        return data
    out = dict(data)
    for alias, name in VLLM_ALIASES.items():
        if alias not in out:
            continue
        value = out.pop(alias)
        if value is None:
            continue
        if out.get(name) is not None:
            raise ConfigError(f"--{alias.replace('_', '-')} and --{name.replace('_', '-')} are the same "
                              "setting: give one of them")
        out[name] = human_readable_bytes(value) if alias == "kv_cache_memory_bytes" else value
    return out
