"""The ``trajsynth`` command line.

Each command group lives in its own module and registers itself on :data:`app`; heavy layers
(torch, transformers) are imported inside the commands that need them, so ``trajsynth
--help`` and ``trajsynth filter`` start fast.

Errors: a :class:`~trajsynth.core.errors.TrajsynthError` prints its message (and hint) and
exits with its code (2 for user errors, 1 for backend errors); Ctrl-C exits 130 with a note
that rerunning resumes. Anything else is a bug: one line, plus the traceback when
``TRAJSYNTH_DEBUG=1``.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback

import typer

from ..core.errors import TrajsynthError

__all__ = ["app", "main"]

app = typer.Typer(
    name="trajsynth",
    help="Synthesize, verify, balance and train on multi-turn tool-use trajectories.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)

#: command modules; each defines its commands on `app` (or adds a sub-app) when imported
COMMAND_MODULES = [
    "trajsynth.cli.run",
    "trajsynth.cli.data",
    "trajsynth.cli.query",
    "trajsynth.cli.quality",
    "trajsynth.cli.imports",
    "trajsynth.cli.tools",
    "trajsynth.cli.serve",
    "trajsynth.cli.arena",
    "trajsynth.cli.train",
    "trajsynth.cli.models",
]

for _module in COMMAND_MODULES:
    importlib.import_module(_module)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the app and turn errors into one message and an exit code."""
    from ._common import err_console

    try:
        app(args=argv, prog_name="trajsynth", standalone_mode=False)
    except TrajsynthError as exc:
        err_console.print(f"[bold red]error:[/] {exc.message}", markup=True, soft_wrap=True)
        if exc.hint:
            err_console.print(f"  [dim]hint:[/] {exc.hint}", soft_wrap=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err_console.print("interrupted; run the same command again to resume")
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as exc:
        import click

        if isinstance(exc, click.exceptions.Exit):
            sys.exit(exc.exit_code)
        if isinstance(exc, click.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        if isinstance(exc, click.exceptions.Abort):
            err_console.print("aborted")
            sys.exit(1)
        err_console.print(
            f"[bold red]internal error:[/] {type(exc).__name__}: {exc}", soft_wrap=True
        )
        if os.environ.get("TRAJSYNTH_DEBUG"):
            traceback.print_exc()
        else:
            err_console.print("  [dim]set TRAJSYNTH_DEBUG=1 for the traceback[/]")
        sys.exit(1)
