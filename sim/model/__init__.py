"""What is being served: the model and GPU catalog, Hugging Face configs, and the shapes the
memory and cost models read (attention layout, MLP gating, weight quantization, parallelism)."""
