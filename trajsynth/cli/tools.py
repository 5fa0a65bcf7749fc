"""``trajsynth tools``: import tool specifications written by others, look at toolsets, and
build their function-signature graph.

    trajsynth tools import bfcl/BFCL_v4_simple_python.json --format bfcl \\
        --out toolset.json
    trajsynth tools show toolset.json            # a table of tools; import failures listed
    trajsynth tools show travel --tool book_flight   # a built-in domain; one tool in full
    trajsynth tools graph travel --out graph.json --plot graph.png   # function-signature graph
    trajsynth tools list 'mcp:uvx mcp-server-time'   # an MCP server's tools (or mcp:<URL>)
    trajsynth tools import 'mcp:npx -y @modelcontextprotocol/server-memory' --out memory.json
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer
from rich.table import Table

from ..core.errors import UserError
from . import app
from ._common import console, err_console

if TYPE_CHECKING:  # the envs layer is imported inside the commands (fast `trajsynth --help`)
    from ..envs.spec import Toolset, ToolSpec

tools_app = typer.Typer(
    name="tools",
    help="Import, list, show and graph tool specifications.",
    no_args_is_help=True,
    rich_markup_mode="rich",
)
app.add_typer(tools_app, name="tools", rich_help_panel="Tools and environments")

_FAILURES_SHOWN = 20
#: the formats of ``trajsynth.envs.importers.FORMATS``, spelled out so that ``--help`` does not
#: import the envs layer (a test checks the two agree)
ToolFormat = Literal["openai", "bfcl", "tau", "toolalpaca", "stabletoolbench", "apibank"]


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


def _reasons(issues: list, top: int = 3) -> str:
    """The most common reasons among ``issues``, with counts."""
    from collections import Counter

    counts = Counter(issue.reason for issue in issues)
    return "; ".join(
        f"{n}× {reason if len(reason) <= 120 else reason[:117] + '…'}"
        for reason, n in counts.most_common(top)
    )


def imported_or_fail(ts: Toolset, src: Path | str, fmt: str, *, strict: bool = False) -> None:
    """Raise one clear :class:`UserError` when nothing was imported, or, with ``strict``,
    when any spec was dropped (failed, or a duplicate name with another definition)."""
    if not ts.tools:
        raise UserError(
            f"no tools imported from {src} ({fmt}): {ts.records} records read, "
            f"{len(ts.failures)} failed" + (f": {_reasons(ts.failures)}" if ts.failures else ""),
            hint="check --format (openai reads any functions with JSON-schema parameters)",
        )
    dropped = len(ts.failures) + len(ts.duplicates)
    if strict and dropped:
        raise UserError(
            f"--strict: {dropped} of the specs in {src} were dropped "
            f"({len(ts.failures)} failed, {len(ts.duplicates)} duplicate names): "
            + _reasons([*ts.failures, *ts.duplicates]),
            hint="run without --strict to import the rest; the tables above list each one",
        )


def _mcp_server(target: str) -> dict:
    """Start the MCP server ``mcp:<command or URL>``, list its tools, stop it."""
    from ..envs.mcp import describe_server, parse_target

    return describe_server(parse_target(target), "mcp")


@tools_app.command("list")
def list_(
    target: Annotated[
        str, typer.Argument(help="mcp:<command> or mcp:<URL>, a toolset file, or a domain.")
    ],
) -> None:
    """List the tools of an MCP server, a toolset file or a domain.

    An MCP server (mcp:<command or URL>) is started, asked and stopped; its tools are shown
    with their read-only hints and where the server keeps its state.
    """
    if not target.startswith("mcp:"):
        ts = _load(target)
        for spec in ts.tools:
            console.print(f"{spec.name}({_signature(spec)})")
        return
    info = _mcp_server(target)
    ts = info["toolset"]
    table = Table(
        title=f"{target[4:]}: {len(ts)} tools, state: {', '.join(info['state']) or 'none'} "
        f"(isolation {info['isolation']}, reset {info['reset']})",
        title_justify="left",
    )
    table.add_column("tool", style="bold")
    table.add_column("read-only", justify="center")
    table.add_column("parameters (? = optional)")
    table.add_column("description", overflow="fold")
    for spec in ts.tools:
        desc = spec.description if len(spec.description) <= 90 else spec.description[:87] + "…"
        table.add_row(spec.name, "✓" if spec.extra.get("read_only") else "", _signature(spec), desc)
    console.print(table)


@tools_app.command("import")
def import_(
    src: Annotated[str, typer.Argument(help="File or folder of specs, or mcp:<command or URL>.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="toolset.json to write.")],
    fmt: Annotated[
        ToolFormat | None,
        typer.Option(
            "--format",
            "-f",
            help="openai (any functions with JSON-schema parameters), bfcl, tau, toolalpaca, "
            "stabletoolbench or apibank. Default: told from the files when only one fits (the "
            "format assumed is said); not used for mcp:.",
            show_default=False,
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only the summary line.")] = False,
    strict: Annotated[
        bool, typer.Option("--strict", help="Fail (and write nothing) if any spec is dropped.")
    ] = False,
) -> None:
    """Convert tool specs of another format to a toolset.

    Specs become OpenAI tools. Each spec not imported, or imported with a change, is listed
    with the reason; the exit is non-zero when nothing was imported (or, with --strict, when
    anything was dropped). mcp:<command or URL> starts the server and writes its own tools,
    read-only hints kept.
    """
    from ..envs.importers import detect_format, import_tools

    if src.startswith("mcp:"):  # the server's own tools, read-only hints kept
        ts = _mcp_server(src)["toolset"]
        ts.save(out)
        console.print(f"[green]✓[/] {len(ts)} tools of the MCP server {src[4:]} → {out}")
        return
    path = Path(src)
    if fmt is None:
        chosen, why = detect_format(path)
        err_console.print(f"format: {chosen} (detected: {why}); --format chooses another")
    else:
        chosen = fmt
    ts = import_tools(path, chosen)
    if not quiet:
        if ts.failures:
            console.print(_issues_table("not imported", ts.failures, _FAILURES_SHOWN))
        if ts.altered:
            console.print(_issues_table("imported with a change", ts.altered, _FAILURES_SHOWN))
        if ts.duplicates and strict:
            console.print(_issues_table("duplicates dropped", ts.duplicates, _FAILURES_SHOWN))
    imported_or_fail(ts, src, chosen, strict=strict)
    ts.save(out)
    console.print(
        f"[green]✓[/] {len(ts)} tools from {ts.records} records of {src} ({chosen}) → {out}"
        + (f"; [yellow]{len(ts.failures)} failed[/]" if ts.failures else "")
        + (f"; [yellow]{len(ts.altered)} altered[/]" if ts.altered else "")
        + (f"; {len(ts.duplicates)} names defined twice (first kept)" if ts.duplicates else "")
    )


@tools_app.command("show")
def show(
    target: Annotated[str, typer.Argument(help="toolset.json, OpenAI tools JSON, or a domain.")],
    tool: Annotated[
        str | None, typer.Option("--tool", "-t", metavar="NAME", help="Show one tool in full.")
    ] = None,
    failures: Annotated[
        bool, typer.Option("--failures", help="List every import failure and duplicate.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the OpenAI tools JSON.")] = False,
) -> None:
    """A table of a toolset's tools; import failures listed.

    Each tool with its parameters and return fields; TARGET may also be a built-in domain.
    """
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
    if ts.altered:
        console.print(_issues_table(f"{len(ts.altered)} imported with a change", ts.altered, limit))
    if ts.duplicates:
        if failures:
            console.print(_issues_table(f"{len(ts.duplicates)} duplicates", ts.duplicates, None))
        else:
            console.print(f"[dim]{len(ts.duplicates)} names were defined more than once in the "
                          "source (first kept); --failures lists them[/]")  # fmt: skip


@tools_app.command("graph")
def graph(
    target: Annotated[
        str, typer.Argument(help="toolset.json, OpenAI tools JSON, a domain, or a foreign spec.")
    ],
    fmt: Annotated[
        ToolFormat | None,
        typer.Option(
            "--format", "-f", help="Import TARGET from this format first (see `tools import`)."
        ),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Write the graph (node-link JSON).")
    ] = None,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Draw the function graph to an image.")
    ] = None,
    similarity: Annotated[
        Literal["auto", "lexical", "embedding"],
        typer.Option(help="How descriptions are compared."),
    ] = "auto",
    threshold: Annotated[
        float | None, typer.Option(help="Lowest edge score (default per similarity).")
    ] = None,
    edges: Annotated[int, typer.Option(help="Function edges listed (0: none).")] = 25,
) -> None:
    """The function-signature graph of a toolset.

    Prints its node, edge and component counts and its best edges; writes the graph as JSON
    and a drawing.
    """
    from ..graph import GraphConfig, build_graph

    if fmt is not None:
        from ..envs.importers import import_tools

        ts = import_tools(Path(target), fmt)
        imported_or_fail(ts, target, fmt)
    else:
        ts = _load(target)
    from pydantic import ValidationError

    try:
        config = GraphConfig(similarity=similarity, threshold=threshold)
    except ValidationError as exc:
        raise UserError(f"invalid graph option: {exc.errors()[0]['msg']}") from None
    g = build_graph(ts, config)
    s = g.stats()
    console.print(
        f"[bold]{ts.name or target}[/]: {s['nodes']} nodes ({s['functions']} functions, "
        f"{s['parameters']} parameters, {s['return_fields']} return fields), {s['edges']} edges "
        f"({s['feeds_edges']} data-flow), {s['dependent_pairs']} dependent function pairs "
        f"({s['prerequisite_pairs']} prerequisites), {s['components']} components "
        f"({s['isolated_functions']} isolated functions); similarity {s['similarity']}"
    )
    if edges:
        table = Table(title="function edges (best first)", title_justify="left")
        table.add_column("source")
        table.add_column("target")
        table.add_column("feeds (field → parameter, score)")
        table.add_column("prereq", justify="center")
        ranked = sorted(g.fg.edges(data=True), key=lambda e: (-e[2]["score"], e[0], e[1]))
        for src, dst, data in ranked[:edges]:
            feeds = ", ".join(f"{f.field} → {f.param} {f.score:.2f}" for f in data["feeds"][:3])
            table.add_row(src, dst, feeds, "✓" if data["prerequisite"] else "")
        if len(ranked) > edges:
            table.add_row(f"… {len(ranked) - edges} more", "", "(--edges N lists more)", "")
        console.print(table)
    if out is not None:
        g.save(out)
        console.print(f"graph → {out}")
    if plot is not None:
        g.plot(plot)
        console.print(f"drawing → {plot}")
