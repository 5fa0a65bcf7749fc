"""How ``--help`` reads: one rule for every command, applied once all commands are defined.

- A command's help is its docstring: the first line is the summary the command list shows, the
  paragraphs after it are reflowed (the docstring's own line breaks would otherwise stay in
  the help, mid-sentence, wherever the source wrapped them).
- An option's metavar says what it takes: ``PATH``, ``N`` (an integer), ``FLOAT``, ``TEXT``,
  the choices (``[trl|jsonl|…]``); a flag shows none. An argument is named in capitals
  (``PIPELINE``). A metavar given in the option itself is kept.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from types import NoneType, UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup
from typer.models import ArgumentInfo, OptionInfo

__all__ = ["metavar_for", "reflow", "tidy_help"]

#: choices longer than this are named by the option (``FORMAT``) and listed in its help
_CHOICES_SHOWN = 24


def reflow(doc: str) -> str:
    """``doc`` with each paragraph on one line (paragraphs stay apart)."""
    paragraphs = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(" ".join(line.strip() for line in p.splitlines()) for p in paragraphs)


def _plain(annotation: Any) -> Any:
    """``annotation`` without ``| None``."""
    if get_origin(annotation) in (Union, UnionType):
        args = [a for a in get_args(annotation) if a is not NoneType]
        if len(args) == 1:
            return args[0]
    return annotation


def metavar_for(annotation: Any, name: str, *, argument: bool) -> str:
    """The metavar of a parameter of type ``annotation`` named ``name``."""
    if argument:
        return name.upper().replace("-", "_")
    kind = _plain(annotation)
    if get_origin(kind) is list:
        kind = get_args(kind)[0]
    if kind is bool:
        return ""
    if get_origin(kind) is Literal:
        choices = "|".join(map(str, get_args(kind)))
        return f"[{choices}]" if len(choices) <= _CHOICES_SHOWN else name.upper().replace("-", "_")
    names = {Path: "PATH", int: "N", float: "FLOAT"}
    return names.get(kind, "TEXT")


def _metavars(callback: Any) -> dict[str, tuple[str, str]]:
    """Parameter name → (metavar, type shown) for the parameters of ``callback`` that set no
    metavar (the type shown is an argument's: its metavar is its name)."""
    out = {}
    for param in inspect.signature(callback, eval_str=True).parameters.values():
        if get_origin(param.annotation) is not Annotated:
            continue
        kind, *extras = get_args(param.annotation)
        for info in extras:
            if isinstance(info, (OptionInfo, ArgumentInfo)) and info.metavar is None:
                argument = isinstance(info, ArgumentInfo)
                decls = [d for d in (info.param_decls or ()) if d.startswith("--")]
                if isinstance(info.default, str) and info.default.startswith("--"):
                    decls.insert(0, info.default)  # Option("--name", ...): the first name
                name = decls[0].lstrip("-").split("/")[0] if decls else param.name
                out[param.name] = (
                    metavar_for(kind, name, argument=argument),
                    metavar_for(kind, name, argument=False),
                )
    return out


def _no_metavar_on_help(option: Any) -> Any:
    if option is not None and option.metavar is None:
        option.metavar = ""
    return option


def _apply(params: list[Any], metavars: dict[str, tuple[str, str]]) -> None:
    for param in params:
        if param.metavar is None and param.name in metavars:
            param.metavar, shown = metavars[param.name]
            if isinstance(param, TyperArgument):  # its type column: PATH, not <path>
                # this one argument's type column; typer offers no setting for it
                param.display_type_rich = lambda ctx, shown=shown: shown  # type: ignore[method-assign,misc]


class _Tidy:
    """Mixed into typer's command and group classes: the parameters show the metavars of
    :func:`metavar_for` (``metavars``, by parameter name), ``--help`` none."""

    metavars: dict[str, tuple[str, str]] = {}
    params: list[Any]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _apply(self.params, self.metavars)

    def get_help_option(self, ctx: Any) -> Any:
        # a mixin: the click command class it is mixed into has get_help_option
        return _no_metavar_on_help(super().get_help_option(ctx))  # type: ignore[misc]


def _tidy_class(base: type, metavars: dict[str, tuple[str, str]]) -> Any:
    return type(f"Tidy{base.__name__}", (_Tidy, base), {"metavars": metavars})


def tidy_help(app: typer.Typer) -> None:
    """Apply the rules above to every command of ``app`` and of its sub-apps."""
    callback = app.registered_callback.callback if app.registered_callback else None
    app.info.cls = _tidy_class(TyperGroup, _metavars(callback) if callback else {})
    for command in app.registered_commands:
        if command.callback is None:
            continue
        if command.help is None:
            command.help = reflow(inspect.getdoc(command.callback) or "")
        if command.cls in (None, TyperCommand):
            command.cls = _tidy_class(TyperCommand, _metavars(command.callback))
    for group in app.registered_groups:
        if group.typer_instance is not None:
            tidy_help(group.typer_instance)
