"""What vLLM's OpenAI API server costs per request and per streamed token: the front-end profile.

vLLM's ``vllm serve`` runs the HTTP server in its own process (``--api-server-count N``: N of
them). Before the engine sees a request, that process parses the JSON body, renders the chat
template (``/v1/chat/completions``), tokenizes the prompt and sends it to the engine core over
ZMQ; after every engine step it detokenizes each new token and writes it to the client as one
server-sent-event chunk. The profile gives each of those a service time on that one CPU:

    ingress = base(endpoint) + prompt_token_s x prompt_tokens
    egress  = output_token_s per streamed token (the chat endpoint sends a role-only chunk
              before the first token: ``chat_first_chunks`` = 2), + end_s when the stream closes
              (the finish chunk, the usage chunk, ``data: [DONE]``)

Where the default numbers come from (public vLLM measurements; none of them a fit, so the
profile is a labelled prior the serving-stack fit may replace):

- vllm-project/vllm#12287 and #15137 (A100, Llama-3.2-1B, 6,000 ShareGPT prompts at concurrency
  400, one API server): 63.6 then 73.7 req/s (12.9k then 14.8k output tok/s) after making the
  output path cheaper, i.e. at most 1/73.7 = 13.6 ms of API-server work per request of about 220
  prompt and 200 output tokens. #15137's faster incremental detokenizer alone saved about
  10 us per output token. 2 ms + 220 x 1 us + 200 x 50 us + 0.5 ms = 12.7 ms fits that bound.
- vllm-project/vllm#10635: tokenizing a 256K-token prompt takes "a few hundred milliseconds":
  about 1 us per prompt token.
- vllm-project/vllm#19735: per-request chat-template handling (content-format detection) cost
  Qwen3-0.6B with max_tokens=1 two thirds of its request rate: the chat endpoint's fixed cost
  is above the completions endpoint's (3 ms vs 2 ms here).
- vllm-project/vllm RFC #12705: "the API server runs in a single process, utilizing a single
  CPU": the reason there is one FIFO server by default, and the motive for --api-server-count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

Endpoint = Literal["chat", "completions"]
ENDPOINTS: tuple[Endpoint, ...] = ("chat", "completions")


@dataclass(frozen=True, slots=True)
class FrontendProfile:
    """Service times of one API-server process, in seconds (see the module docstring)."""

    name: str
    source: str
    chat_base_s: float = 3.0e-3          # HTTP + JSON + pydantic + chat template + engine send
    completions_base_s: float = 2.0e-3   # the same without the chat template
    prompt_token_s: float = 1.0e-6       # tokenization, per prompt token
    output_token_s: float = 50e-6        # detokenize + one SSE chunk, per output token
    end_s: float = 0.5e-3                # the finish / usage / [DONE] chunks, closing the stream
    chat_first_chunks: int = 2           # chat: a role-only chunk, then the first token's

    def __post_init__(self) -> None:
        for k in ("chat_base_s", "completions_base_s", "prompt_token_s", "output_token_s", "end_s"):
            if not getattr(self, k) >= 0:
                raise ValueError(f"front-end profile {self.name}: {k} must be >= 0")
        if self.chat_first_chunks < 1:
            raise ValueError(f"front-end profile {self.name}: chat_first_chunks must be >= 1")

    def base_s(self, endpoint: Endpoint) -> float:
        return self.chat_base_s if endpoint == "chat" else self.completions_base_s

    def ingress_s(self, prompt_tokens: np.ndarray, endpoint: Endpoint) -> np.ndarray:
        """Each request's ingress service time (template + tokenization), before any queueing."""
        return self.base_s(endpoint) + self.prompt_token_s * np.asarray(prompt_tokens, np.float64)

    def first_token_s(self, endpoint: Endpoint) -> float:
        """Egress work of the first streamed token (the chat endpoint's role chunk included)."""
        return self.output_token_s * (self.chat_first_chunks if endpoint == "chat" else 1)

    def line(self) -> str:
        return f"{self.name} ({self.source})"


VLLM_API_SERVER = FrontendProfile(
    name="vllm-api-server-prior",
    source="public vLLM measurements, not fitted: vllm-project/vllm #12287, #15137, #10635, #19735, RFC #12705",
)
"""The default profile: public priors, to be replaced by fitted values where a serving-stack fit has them."""
