"""NVIDIA aiconfigurator-core's vLLM operator tables, reduced to what kvsim's cost model reads."""
