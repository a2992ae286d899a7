"""One module per trace format; each exposes ``READER``."""
