"""The ``kvsim`` command line (typer). Each command group lives in its own module."""
