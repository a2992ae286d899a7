"""A pasted ``vllm serve`` command line -> kvsim config keys.

    parse_vllm_serve("vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 2 --port 8000 --max-num-seqs 128")
    -> VllmServe(config={"model": "meta-llama/...", "tensor_parallel_size": 2, "max_num_seqs": 128},
                 ignored=("--port",))

What kvsim models is taken under vLLM's spelling (``--scheduling-policy`` for ``--policy``, ``-tp``,
``--speculative-config`` JSON, ...). Flags that only concern the HTTP server, the tokenizer or
logging (``--host``, ``--port``, ``--served-model-name``, ``--api-key``, ...) change nothing kvsim
simulates: they are accepted and listed as ignored. ``--api-server-count`` is taken: kvsim models
the API-server processes in front of the engine (:mod:`sim.frontend`). A flag that would change the simulation in a
way kvsim does not model (``-pp 2``, ``--cpu-offload-gb 8``) is refused in one line starting
``not modelled:``; its no-op value (``-pp 1``, ``--cpu-offload-gb 0``) is accepted. The line is
in vLLM's usage context ``openai-server`` (its batch defaults, :func:`sim.memory.budget.batch_defaults`).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sim.config.aliases import human_readable_bytes
from sim.errors import ConfigError

Conv = Callable[[str, str], Any]


def human_int(flag: str, v: str) -> int:
    """vLLM's ``human_readable_int``: ``8192``, ``8k`` (10^3), ``8K`` (2^10)."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgG]?)", v.strip())
    if m is None:
        raise ConfigError(f"{flag} {v!r}: expected an integer, e.g. 8192, 8k or 8K")
    num, suf = m.groups()
    if suf.isupper() and suf:
        if "." in num:
            raise ConfigError(f"{flag} {v!r}: decimals need a lowercase (decimal) suffix")
        return int(num) * 2 ** (10 * "KMG".index(suf) + 10)
    return int(float(num) * (10 ** (3 * ("kmg".index(suf) + 1)) if suf else 1))


def _float(flag: str, v: str) -> float:
    try:
        return float(v)
    except ValueError:
        raise ConfigError(f"{flag} {v!r}: expected a number") from None


def _str(flag: str, v: str) -> str:
    return v


def _bool(flag: str, v: str) -> bool:
    if v.lower() in ("true", "1", "yes"):
        return True
    if v.lower() in ("false", "0", "no"):
        return False
    raise ConfigError(f"{flag}={v!r}: expected true or false")


#: vLLM flag -> (kvsim key, converter). Boolean flags are in BOOLS.
VALUES: dict[str, tuple[str, Conv]] = {
    "--model": ("model", _str), "--tensor-parallel-size": ("tensor_parallel_size", human_int),
    "--gpu-memory-utilization": ("gpu_memory_utilization", _float), "--block-size": ("block_size", human_int),
    "--max-num-seqs": ("max_num_seqs", human_int), "--max-num-batched-tokens": ("max_num_batched_tokens", human_int),
    "--max-model-len": ("max_model_len", human_int), "--scheduling-policy": ("policy", _str),
    "--long-prefill-token-threshold": ("long_prefill_token_threshold", human_int),
    "--kv-cache-dtype": ("kv_cache_dtype", _str), "--num-gpu-blocks-override": ("num_gpu_blocks", human_int),
    "--kv-cache-memory-bytes": ("kv_memory", lambda f, v: human_readable_bytes(v, f)),
    "--swap-space": ("swap_space", _float), "--kv-offloading-size": ("kv_offloading_size", _float),
    "--seed": ("seed", human_int),
    "--api-server-count": ("api_server_count", human_int),  # the API-server processes (sim/frontend)
}
BOOLS: dict[str, str] = {
    "--enable-prefix-caching": "enable_prefix_caching", "--enable-chunked-prefill": "chunked_prefill",
    "--async-scheduling": "async_scheduling", "--enforce-eager": "enforce_eager",
    "--enable-expert-parallel": "enable_expert_parallel",
    "--disable-hybrid-kv-cache-manager": "disable_hybrid_kv_cache_manager",
}
SHORT = {"-tp": "--tensor-parallel-size", "-pp": "--pipeline-parallel-size", "-dp": "--data-parallel-size",
         "-q": "--quantization"}
#: server, tokenizer, loading and logging flags: nothing kvsim simulates depends on them
SERVER_VALUES = frozenset({
    "--host", "--port", "--uds", "--api-key", "--root-path", "--uvicorn-log-level", "--allowed-origins",
    "--allowed-methods", "--allowed-headers", "--ssl-keyfile", "--ssl-certfile", "--ssl-ca-certs",
    "--chat-template", "--chat-template-content-format", "--response-role", "--tool-call-parser",
    "--reasoning-parser", "--tokenizer", "--tokenizer-mode", "--revision", "--code-revision",
    "--tokenizer-revision", "--download-dir", "--load-format", "--config-format", "--hf-token",
    "--max-log-len", "--middleware", "--lora-modules", "--generation-config",
    "--override-generation-config", "--distributed-executor-backend", "--compilation-config",
    "--max-logprobs", "--otlp-traces-endpoint", "--collect-detailed-traces", "--log-config-file",
    "--worker-extension-cls", "--structured-outputs-config", "--guided-decoding-backend",
    "--max-parallel-loading-workers", "--cuda-graph-sizes", "--tool-parser-plugin",
})
SERVER_BOOLS = frozenset({
    "--trust-remote-code", "--disable-log-requests", "--enable-log-requests", "--disable-log-stats",
    "--enable-auto-tool-choice", "--disable-fastapi-docs", "--enable-prompt-tokens-details",
    "--return-tokens-as-token-ids", "--disable-frontend-multiprocessing", "--enable-request-id-headers",
    "--enable-server-load-tracking", "--enable-force-include-usage", "--headless", "--enable-sleep-mode",
    "--disable-uvicorn-access-log", "--disable-custom-all-reduce", "--enable-log-outputs",
})
NARGS = frozenset({"--served-model-name"})  # one or more values
#: flags whose given value is the only one kvsim models (or the values listed): others are refused
NOOP: dict[str, tuple[tuple[str, ...], str]] = {
    "--pipeline-parallel-size": (("1",), "pipeline parallelism (kvsim splits a replica by TP only)"),
    "--data-parallel-size": (("1",), "data parallelism inside one server (model DP ranks as replicas: kvsim plan)"),
    "--cpu-offload-gb": (("0", "0.0"), "weight offload to CPU memory"),
    "--max-num-partial-prefills": (("1",), "several partial prefills per step (vLLM V1 supports 1)"),
    "--dtype": (("auto", "half", "float16", "bfloat16"), "a 4-byte model dtype (the catalog sizes 2-byte weights)"),
}
#: ``python -m MODULE --model X ...``: vLLM's OpenAI-compatible server started as a module
API_SERVER_MODULES = frozenset({"vllm.entrypoints.openai.api_server", "vllm.entrypoints.cli.main"})
SPEC_METHODS = {"ngram": "ngram", "eagle": "eagle", "eagle3": "eagle3", "mtp": "mtp", "deepseek_mtp": "mtp"}


@dataclass(frozen=True, slots=True)
class VllmServe:
    config: dict[str, Any]
    ignored: tuple[str, ...] = ()

    def ignored_line(self) -> str:
        """One line for the user, or "" when nothing was ignored."""
        if not self.ignored:
            return ""
        return f"vllm serve: ignored (server-only, no effect on the simulation): {', '.join(self.ignored)}"


def _tokens(line: str | list[str]) -> list[str]:
    toks = shlex.split(line.replace("\\\n", " ")) if isinstance(line, str) else list(line)
    toks = [t for t in toks if t != "\\"]
    if len(toks) >= 3 and re.fullmatch(r"(.*/)?python[0-9.]*", toks[0]) and toks[1] == "-m":
        if toks[2] not in API_SERVER_MODULES:  # the OpenAI server run as a module takes the same flags
            raise ConfigError(f"python -m {toks[2]}: not vLLM's server (expected python -m "
                              f"{' | '.join(sorted(API_SERVER_MODULES))}, or vllm serve)")
        toks = toks[3:]
    if toks[:1] == ["vllm"]:
        toks = toks[1:]
    if toks[:1] == ["serve"]:
        toks = toks[1:]
    return toks


def _speculative(flag: str, v: str) -> dict[str, Any]:
    try:
        d = json.loads(v)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{flag} {v!r}: not JSON ({e.msg})") from None
    if not isinstance(d, dict):
        raise ConfigError(f"{flag} {v!r}: expected a JSON object")
    method = str(d.get("method") or ("eagle" if d.get("model") else "ngram"))
    if method not in SPEC_METHODS:
        raise ConfigError(f"not modelled: {flag} method {method!r} (kvsim models {', '.join(SPEC_METHODS)})")
    if "num_speculative_tokens" not in d:
        raise ConfigError(f"{flag}: num_speculative_tokens missing")
    return {"num_speculative_tokens": int(d["num_speculative_tokens"]), "speculative_method": SPEC_METHODS[method]}


def _quantization(flag: str, v: str, model: str | None) -> None:
    """Accept ``--quantization`` when it names the checkpoint's own method (the catalog sizes it)."""
    from sim.model.catalog import resolve_model

    own = None
    if model is not None:
        q = resolve_model(model).quantization
        own = getattr(q, "method", None)
    if v != own:
        raise ConfigError(f"not modelled: {flag} {v} (kvsim sizes the checkpoint's own weights"
                          + (f", {own}" if own else ", unquantized") + "; pass the quantized checkpoint's config.json as the model)")


def _take(toks: list[str], i: int, flag: str, inline: str | None) -> tuple[str, int]:
    """(the flag's value, the index after it): ``--flag=v`` or ``--flag v``."""
    if inline is not None:
        return inline, i
    if i >= len(toks):
        raise ConfigError(f"vllm serve: {flag} needs a value")
    return toks[i], i + 1


def parse_vllm_serve(line: str | list[str]) -> VllmServe:
    """The kvsim config of a ``vllm serve`` line (see the module docstring). ConfigError on a refusal."""
    toks = _tokens(line)
    out: dict[str, Any] = {}
    ignored: list[str] = []
    quant: tuple[str, str] | None = None
    if toks and not toks[0].startswith("-"):
        out["model"] = toks.pop(0)
    i = 0
    while i < len(toks):
        raw = toks[i]
        i += 1
        if not raw.startswith("-"):
            raise ConfigError(f"vllm serve: unexpected argument {raw!r} (the model goes first)")
        flag, eq, rest = raw.partition("=")
        inline = rest if eq else None
        if re.fullmatch(r"-O\d?", flag):  # -O3: the compilation level (CUDA graphs are the stack's)
            ignored.append(flag)
            continue
        flag = SHORT.get(flag, flag)
        if flag.startswith("--"):
            flag = "--" + flag[2:].replace("_", "-")
        neg = flag.startswith("--no-") and ("--" + flag[5:]) in (BOOLS.keys() | SERVER_BOOLS)
        base = "--" + flag[5:] if neg else flag
        if base in BOOLS:
            out[BOOLS[base]] = (not neg) if inline is None else _bool(flag, inline) != neg
        elif flag in VALUES:
            key, conv = VALUES[flag]
            v, i = _take(toks, i, flag, inline)
            out[key] = conv(flag, v)
        elif base in SERVER_BOOLS:
            ignored.append(flag)
        elif flag in SERVER_VALUES:
            _, i = _take(toks, i, flag, inline)
            ignored.append(flag)
        elif flag in NARGS:
            while inline is None and i < len(toks) and not toks[i].startswith("-"):
                i += 1
            ignored.append(flag)
        elif flag in NOOP:
            v, i = _take(toks, i, flag, inline)
            ok, what = NOOP[flag]
            if v not in ok:
                raise ConfigError(f"not modelled: {flag} {v} ({what}); remove it or use {ok[0]}")
        elif flag == "--speculative-config":
            v, i = _take(toks, i, flag, inline)
            out.update(_speculative(flag, v))
        elif flag == "--quantization":
            v, i = _take(toks, i, flag, inline)
            quant = (flag, v)
        else:
            raise ConfigError(f"not modelled: vllm serve {flag} (kvsim does not know this flag; "
                              "remove it from the line to simulate the rest)")
    if quant is not None:
        _quantization(*quant, out.get("model"))
    out["usage_context"] = "openai-server"
    return VllmServe(out, tuple(dict.fromkeys(ignored)))
