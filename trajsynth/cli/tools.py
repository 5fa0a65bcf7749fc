"""``trajsynth tools``: import tool specifications written by others, and look at toolsets.

    trajsynth tools import ../shared/external/bfcl/BFCL_v4_simple_python.json --format bfcl \\
        --out toolset.json
    trajsynth tools show toolset.json            # a table of tools; import failures listed
    trajsynth tools show travel --tool book_flight   # a built-in domain; one tool in full
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from ..core.errors import UserError
from . import app
from ._common import console

if TYPE_CHECKING:  # the envs layer is imported inside the commands (fast `trajsynth --help`)
    from ..envs.spec import Toolset, ToolSpec

tools_app = typer.Typer(
    name="tools",
    help="Tool specifications: import them from other formats, show toolsets and domains.",
    no_args_is_help=True,
    rich_markup_mode="rich",
)
app.add_typer(tools_app, name="tools")

_FAILURES_SHOWN = 20


def _load(target: str) -> Toolset:
    from ..envs.domains import BUILTIN_DOMAINS
    from ..envs.spec import Toolset

    path = Path(target)
    if path.exists():
        return Toolset.load(path)
    if target in BUILTIN_DOMAINS:
        return BUILTIN_DOMAINS[target].toolset()
    raise UserError(
        f"{target!r} is neither a toolset file nor a built-in domain",
        hint=f"built-in domains: {', '.join(BUILTIN_DOMAINS)}",
    )


def _signature(tool: ToolSpec) -> str:
    req = set(tool.required())
    return ", ".join(p if p in req else f"{p}?" for p in tool.properties())


def _issues_table(title: str, issues: list, limit: int | None) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("name")
    table.add_column("reason")
    table.add_column("source", style="dim")
    shown = issues if limit is None else issues[:limit]
    for issue in shown:
        table.add_row(issue.name, issue.reason, issue.source)
    if limit is not None and len(issues) > limit:
        table.add_row(f"… {len(issues) - limit} more", "(use --failures to list all)", "")
    return table


@tools_app.command("import")
def import_(
    src: Annotated[Path, typer.Argument(help="File or folder of specs.")],
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            help="openai | bfcl | tau | toolalpaca | stabletoolbench | apibank",
        ),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="toolset.json to write.")],
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only the summary line.")] = False,
) -> None:
    """Convert specs to OpenAI tools; specs that cannot be converted are listed, not fatal."""
    from ..envs.importers import import_tools

    ts = import_tools(src, fmt)
    ts.save(out)
    console.print(
        f"[green]✓[/] {len(ts)} tools from {ts.records} records of {src} ({fmt}) → {out}"
        + (f"; [yellow]{len(ts.failures)} failed[/]" if ts.failures else "")
        + (f"; {len(ts.duplicates)} names defined twice (first kept)" if ts.duplicates else "")
    )
    if ts.failures and not quiet:
        console.print(_issues_table("not imported", ts.failures, _FAILURES_SHOWN))


@tools_app.command("show")
def show(
    target: Annotated[str, typer.Argument(help="toolset.json, OpenAI tools JSON, or a domain.")],
    tool: Annotated[str | None, typer.Option("--tool", "-t", help="Show one tool in full.")] = None,
    failures: Annotated[
        bool, typer.Option("--failures", help="List every import failure and duplicate.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the OpenAI tools JSON.")] = False,
) -> None:
    """A table of the tools (parameters, return fields); import failures listed."""
    ts = _load(target)
    if tool is not None:
        spec = ts.get(tool) or ts.by_source_name(tool)
        if spec is None:
            raise UserError(f"no tool {tool!r} in {target}", hint="see `trajsynth tools show`")
        print(json.dumps(spec.model_dump(mode="json"), indent=2, ensure_ascii=False))
        return
    if as_json:
        print(json.dumps(ts.to_openai(), indent=1, ensure_ascii=False))
        return
    summary = ts.summary()
    table = Table(
        title=f"{ts.name or target}: {summary['tools']} tools, {summary['parameters']} parameters "
        f"({summary['required']} required), {summary['with_response']} with a response schema",
        title_justify="left",
    )
    table.add_column("tool", style="bold")
    table.add_column("parameters (? = optional)")
    table.add_column("returns")
    table.add_column("description", overflow="fold")
    for spec in ts.tools:
        returns = ", ".join(spec.response_fields()) or (
            (spec.response or {}).get("type", "") if spec.response else "-"
        )
        desc = spec.description if len(spec.description) <= 90 else spec.description[:87] + "…"
        table.add_row(spec.name, _signature(spec), returns, desc)
    console.print(table)
    limit = None if failures else _FAILURES_SHOWN
    if ts.failures:
        console.print(_issues_table(f"{len(ts.failures)} not imported", ts.failures, limit))
    if ts.duplicates:
        if failures:
            console.print(_issues_table(f"{len(ts.duplicates)} duplicates", ts.duplicates, None))
        else:
            console.print(f"[dim]{len(ts.duplicates)} names were defined more than once in the "
                          "source (first kept); --failures lists them[/]")  # fmt: skip
