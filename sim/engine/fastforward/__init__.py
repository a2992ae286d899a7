"""Fast-forward: runs of decode steps applied in bulk, bit-identical to ``--exact-steps``."""
