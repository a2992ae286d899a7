"""kvsim: a discrete-event simulator of LLM-serving KV-cache memory and a GPU capacity planner."""

__version__ = "0.1.0"
