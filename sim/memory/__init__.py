"""GPU memory sizing: how many KV blocks fit (vLLM's profiling arithmetic), and the speculative
drafter's share of each block."""
