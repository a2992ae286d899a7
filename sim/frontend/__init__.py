"""The API server in front of the engine: ingress (chat template, tokenization) before it,
egress (detokenize, stream) after it. See :mod:`sim.frontend.stage`."""
