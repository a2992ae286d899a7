"""User-facing errors. The CLI prints these as one line and exits non-zero: never a traceback."""

from __future__ import annotations


class KvsimError(Exception):
    """Base class for errors caused by user input (files, flags, configs)."""


class ConfigError(KvsimError):
    """An impossible or malformed configuration (a flag, a YAML key, a catalog name)."""


class TraceError(KvsimError):
    """A malformed trace file. The message names the file, the line and the field."""

    def __init__(self, path: str, line: int | None, field: str | None, msg: str) -> None:
        self.path, self.line, self.field = path, line, field
        where = path if line is None else f"{path}:{line}"
        what = f" field '{field}'" if field else ""
        super().__init__(f"{where}:{what} {msg}".replace(": ", ": ", 1))
