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
from typing import Annotated

import typer
import typer.core
from rich.text import Text

from ..core.errors import TrajsynthError
from ._help import tidy_help

__all__ = ["app", "main"]

app = typer.Typer(
    name="trajsynth",
    help="Synthesize, verify, balance and train on multi-turn tool-use trajectories.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def _print_version(value: bool) -> None:
    if value:
        from ..version import __version__

        print(f"trajsynth {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print the version and exit.", is_eager=True, callback=_print_version
        ),
    ] = False,
) -> None:
    pass


#: command modules; each defines its commands on `app` (or adds a sub-app) when imported
COMMAND_MODULES = [
    "trajsynth.cli.run",
    "trajsynth.cli.data",
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

tidy_help(app)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the app and turn errors into one message and an exit code."""
    from ._common import err_console

    command = typer.main.get_command(app)
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        # what click's `main` does, without its error handling: typer runs it with its own
        # copy of click, whose exceptions are not `click`'s, and in non-standalone mode it
        # turns Ctrl-C into a return code; here every exception reaches the handlers below
        with command.make_context("trajsynth", args) as ctx:
            command.invoke(ctx)
    except TrajsynthError as exc:
        err_console.print(f"[bold red]error:[/] {exc.message}", markup=True)
        if exc.hint:
            err_console.print(f"  [dim]hint:[/] {exc.hint}")
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err_console.print("interrupted; run the same command again to resume")
        sys.exit(130)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (typer.Abort, EOFError):
        err_console.print("aborted")
        sys.exit(1)
    except typer.TyperException as exc:  # click's usage errors, as typer raises them
        _usage_error(exc)
        sys.exit(exc.exit_code)
    except BrokenPipeError:  # `trajsynth ... | head`: the reader left; say nothing more
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(1)
    except Exception as exc:
        err_console.print(f"[bold red]internal error:[/] {type(exc).__name__}: {exc}")
        if os.environ.get("TRAJSYNTH_DEBUG"):
            traceback.print_exc()
        else:
            err_console.print("  [dim]set TRAJSYNTH_DEBUG=1 for the traceback[/]")
        sys.exit(1)


def _usage_error(exc: typer.TyperException) -> None:
    """A command line the parser refused: the command's usage line, then ``error:`` and what
    was wrong (naming the option or argument), then where the options are listed."""
    from ._common import err_console

    ctx = getattr(exc, "ctx", None)
    message = exc.format_message()
    if ctx is not None and not message.strip():  # a group called without a command: its help
        return  # was printed already
    if ctx is not None:
        err_console.print(ctx.get_usage(), markup=False)
    err_console.print(Text.assemble(("error: ", "bold red"), message))
    if ctx is not None:
        what = "commands" if isinstance(ctx.command, typer.core.TyperGroup) else "options"
        err_console.print(f"  [dim]hint:[/] `{ctx.command_path} --help` lists the {what}")
