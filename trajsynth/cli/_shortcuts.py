"""Options of the one-stage shortcuts (``filter``, ``dedup``, ``balance``) made from their
stage's config model, so each option is declared once: its name, type, default and help are
the config field's (``Field(default, description=...)``).

A command lists the fields it offers with :class:`Shortcut` (the field, and only what the
CLI adds: a panel, other flag names, a metavar, a text type for a value typed as text) and
takes one ``settings`` parameter; :func:`config_options` replaces that parameter by one typer
option per field and hands the command the values given, typed, by field name.

In an option's help, a field name of the same command (one with an underscore, such as
``min_coherence``) is shown as its flag (``--min-coherence``).
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

import typer
from pydantic import BaseModel

__all__ = ["Shortcut", "config_options"]

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Shortcut:
    """One config field offered as an option; everything else comes from the field."""

    field: str
    #: the panel ``--help`` shows it in
    panel: str | None = None
    #: flag names when not the field's (``--require-success/--keep-unsuccessful``)
    flags: str | None = None
    metavar: str | None = None
    #: the option's type when not the field's: ``str`` for a value typed as text (a tuple
    #: as ``0.3,0.5,0.2``), which the config's validator parses
    as_text: bool = False


def _flags(shortcut: Shortcut, kind: Any, default: Any) -> str:
    if shortcut.flags:
        return shortcut.flags
    name = "--" + shortcut.field.replace("_", "-")
    if kind is bool and default is True:
        return f"{name}/--no-{name[2:]}"
    return name


def config_options(config: type[BaseModel], *shortcuts: Shortcut) -> Callable[[F], F]:
    """Give the decorated command one option per shortcut, made from ``config``'s fields, in
    place of its ``settings`` parameter, which receives ``{field: value}``."""
    fields = config.model_fields
    flags = {}
    for s in shortcuts:
        info = fields[s.field]
        flags[s.field] = _flags(s, info.annotation, info.get_default(call_default_factory=True))
    names = [f for f in flags if "_" in f]
    named = re.compile(r"\b(" + "|".join(names) + r")\b")

    def shown(description: str) -> str:
        if not names:
            return description
        return named.sub(lambda m: flags[m.group(1)].split("/")[0], description)

    def option(s: Shortcut) -> inspect.Parameter:
        info = fields[s.field]
        default = info.get_default(call_default_factory=True)
        kind: Any = info.annotation
        if s.as_text:
            kind = str
            if isinstance(default, (tuple, list)):
                default = ",".join(map(str, default))
        described = typer.Option(
            flags[s.field],
            help=shown(info.description or ""),
            rich_help_panel=s.panel,
            metavar=s.metavar,
        )
        return inspect.Parameter(
            s.field,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            annotation=Annotated[kind, described],
            default=default,
        )

    def decorate(fn: F) -> F:
        params = list(inspect.signature(fn, eval_str=True).parameters.values())
        at = [p.name for p in params].index("settings")
        params[at : at + 1] = [option(s) for s in shortcuts]

        @functools.wraps(fn)
        def command(**kwargs: Any) -> Any:
            settings = {s.field: kwargs.pop(s.field) for s in shortcuts}
            return fn(settings=settings, **kwargs)

        # typer reads the options from the signature; functions have no declared __signature__
        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command  # type: ignore[return-value]  # wraps(fn): fn's type, other options

    return decorate
