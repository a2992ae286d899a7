"""The front-end's two config knobs, filled in and checked before the config is validated.

``api_server_count`` is vLLM's ``--api-server-count`` (the API-server processes in front of one
engine). Left unset it is 1, as under ``vllm serve``, and 0 under ``--usage-context llm-class``:
vLLM's offline ``LLM(...)`` class runs no API server (its caller tokenizes in-process and reads
the outputs itself). ``0`` is kvsim's way to model no front-end at all (in vLLM, 0 means a
headless engine fed from elsewhere). ``endpoint`` (chat | completions, default chat; vLLM's paths
``/v1/chat/completions`` and ``/v1/completions`` read as those) picks the ingress cost;
``completions`` is refused where no API server is modelled, since it would change nothing.
"""

from __future__ import annotations

from typing import Any

from sim.errors import ConfigError


def _count(v: Any) -> int | None:
    """The count as an int when it reads as one (else pydantic reports the bad value)."""
    if isinstance(v, bool):
        return None
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def api_server_keys(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with ``api_server_count`` filled in; ConfigError for a knob that cannot apply."""
    llm_class = data.get("usage_context") == "llm-class"
    given = data.get("api_server_count")
    count = (0 if llm_class else 1) if given is None else _count(given)
    if given is not None and llm_class and count:
        raise ConfigError(f"--api-server-count {given}: --usage-context llm-class is vLLM's offline LLM(...) class, "
                          "which runs no API server; give 0, or --usage-context openai-server")
    endpoint = data.get("endpoint")
    if isinstance(endpoint, str) and endpoint.rstrip("/").endswith("completions"):  # vLLM's paths
        endpoint = "chat" if endpoint.rstrip("/").endswith("chat/completions") else "completions"
        data = {**data, "endpoint": endpoint}
    if endpoint not in (None, "chat") and count == 0:  # (chat: the default, kept by config round trips)
        raise ConfigError(f"--endpoint {endpoint}: no API server is modelled (--api-server-count 0 or "
                          "--usage-context llm-class), so no endpoint applies; drop --endpoint")
    out = {k: v for k, v in data.items() if k != "endpoint" or v is not None}
    if given is None:
        out["api_server_count"] = count
    return out
