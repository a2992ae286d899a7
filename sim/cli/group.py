"""The root command group: every error a user can cause ends as one line, never a traceback.

Typer/click would print a usage block for a bad flag and a traceback for anything else. The
root group runs the command in click's non-standalone mode and turns what comes back into one
``error: ...`` line on stderr and an exit code:

=========================================  =====  ==========================================
what                                       exit   printed
=========================================  =====  ==========================================
:class:`~sim.errors.KvsimError` (input)    2      ``error: <file:line: field ...>``
a bad flag or argument (click UsageError)  2      ``error: <command>: <what> (see ... --help)``
a file the OS refuses (OSError)            2      ``error: <path>: <reason>``
a binary file where text belongs           2      ``error: an input file is not UTF-8 text ...``
Ctrl-C                                     130    ``Aborted.``
=========================================  =====  ==========================================

Because this is the group's ``main``, typer's ``CliRunner`` sees exactly what a user sees.
"""

from __future__ import annotations

import errno
import shlex
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import typer
from typer.core import TyperGroup

from sim.errors import KvsimError

try:  # typer >= 0.2x vendors click as typer._click; its exceptions are not click's
    from typer._click import exceptions as cx
except ImportError:  # older typer runs on click itself
    from click import exceptions as cx  # type: ignore[no-redef]

NoArgsIsHelp: tuple[type[Exception], ...] = tuple(
    c for c in (getattr(cx, "NoArgsIsHelpError", None),) if c is not None)


def fail(message: str, code: int = 2) -> NoReturn:
    typer.secho(f"error: {message}", err=True, fg="red")
    sys.exit(code)


def os_message(e: OSError) -> str:
    """``path: reason`` of an OSError (pyarrow raises FileNotFoundError(path) with no reason)."""
    if e.filename is not None and e.strerror:
        return f"{e.filename}: {e.strerror}"
    if isinstance(e, FileNotFoundError) and len(e.args) == 1:
        return f"{e.args[0]}: no such file"
    return str(e) or type(e).__name__


def usage_message(e: cx.UsageError) -> str:
    where = e.ctx.command_path if e.ctx is not None else "kvsim"
    return f"{where}: {e.format_message()} (see '{where} --help')"


def vllm_tail(args: list[str]) -> list[str]:
    """``... -- vllm serve MODEL --flags`` -> ``... --vllm-args 'vllm serve MODEL --flags'``: a pasted
    line after ``--`` is taken whole (sim.config.vllm_args parses it)."""
    if "--" not in args:
        return args
    i = args.index("--")
    rest = args[i + 1:]
    if not rest or (rest[0] not in ("vllm", "serve") and rest[1:2] != ["-m"]):  # or `python -m vllm...`
        return args
    return [*args[:i], "--vllm-args", shlex.join(rest)]


class KvsimGroup(TyperGroup):
    """:class:`typer.core.TyperGroup` whose ``main`` prints user errors as one line."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             windows_expand_args: bool = True, **extra: Any) -> Any:
        args = vllm_tail(list(sys.argv[1:] if args is None else args))
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        except NoArgsIsHelp as e:  # `kvsim trace`: its help, as click does
            e.show()  # type: ignore[attr-defined]
            sys.exit(2)
        except cx.UsageError as e:
            fail(usage_message(e), e.exit_code)
        except cx.ClickException as e:
            fail(e.format_message(), e.exit_code)
        except typer.Abort:
            typer.echo("Aborted.", err=True)
            sys.exit(130)
        except KvsimError as e:
            fail(str(e))
        except UnicodeDecodeError as e:  # a reader that did not name the file (binary input)
            fail(f"an input file is not UTF-8 text ({e.reason} at byte {e.start})")
        except OSError as e:
            if e.errno == errno.EPIPE:  # `kvsim ... | head`
                sys.exit(1)
            fail(os_message(e))
        sys.exit(rv if isinstance(rv, int) else 0)
