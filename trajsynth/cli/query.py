"""``trajsynth query``: filter shards with SQL (DuckDB), count, list rows or steps."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer
from rich.table import Table

from ..core.errors import UserError
from . import app
from ._common import console


@app.command()
def query(
    path: Annotated[str, typer.Argument(help="Shard file, folder or glob (or s3://…).")],
    domain: Annotated[list[str] | None, typer.Option(help="Keep this domain (repeatable).")] = None,
    capability: Annotated[
        list[str] | None, typer.Option(help="Keep rows with this capability (repeatable).")
    ] = None,
    method: Annotated[list[str] | None, typer.Option(help="Keep this method (repeatable).")] = None,
    outcome: Annotated[
        str | None, typer.Option(help="success | failed | unknown (not verified).")
    ] = None,
    failure_layer: Annotated[
        list[str] | None, typer.Option(help="Keep this failure layer (repeatable).")
    ] = None,
    difficulty: Annotated[
        list[str] | None, typer.Option(help="easy | medium | hard (repeatable).")
    ] = None,
    min_quality: Annotated[float | None, typer.Option(help="quality_score at least this.")] = None,
    max_quality: Annotated[float | None, typer.Option(help="quality_score at most this.")] = None,
    where: Annotated[
        str | None,
        typer.Option(help='Any SQL condition on any column, e.g. "num_tool_calls > 3".'),
    ] = None,
    steps: Annotated[
        bool,
        typer.Option(
            "--steps",
            help="One row per assistant step: call, arguments, result, state diff, step "
            "reward, flags, errors, verdict.",
        ),
    ] = False,
    count: Annotated[bool, typer.Option("--count", help="Print only how many rows match.")] = False,
    columns: Annotated[
        str | None, typer.Option(help="Columns to show, comma-separated (rows, not steps).")
    ] = None,
    limit: Annotated[
        int | None, typer.Option(help="At most this many rows (default 20 for a table).")
    ] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table | jsonl | parquet")] = "table",
    out: Annotated[
        str | None, typer.Option("--out", "-o", help="Write here (jsonl, parquet).")
    ] = None,
) -> None:
    """Count, list or step through the trajectories that match filters.

    Filters by domain, capability, method, outcome, failure layer, difficulty, quality or any
    SQL condition; counts the matching rows, lists them, or lists their steps (`--steps`:
    which step went wrong)."""
    from ..store.query import Filters, write_result
    from ..store.query import query as run_query

    if fmt not in ("table", "jsonl", "parquet"):
        raise UserError(f"unknown --format {fmt!r}; choose table, jsonl or parquet")
    if fmt == "parquet" and not out:
        raise UserError("--format parquet needs --out FILE")
    filters = Filters(
        domain=domain or [],
        capability=capability or [],
        method=method or [],
        outcome=outcome,
        failure_layer=failure_layer or [],
        difficulty=difficulty or [],
        min_quality=min_quality,
        max_quality=max_quality,
        where=where,
    )
    if count:
        n = run_query(path, filters, count=True)
        print(json.dumps({"rows": n}) if fmt == "jsonl" else n)
        return
    cols = [c.strip() for c in columns.split(",") if c.strip()] if columns else None
    if limit is None and fmt == "table":
        limit = 20
    table = run_query(path, filters, columns=None if steps else cols, steps=steps, limit=limit)
    assert not isinstance(table, int), "a count only with count=True"
    if out:
        write_result(table, out, "jsonl" if fmt == "table" else fmt)
        console.print(f"{table.num_rows:,} {'steps' if steps else 'rows'} → {out}")
        return
    if fmt == "jsonl":
        for row in table.to_pylist():
            sys.stdout.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
        return
    view = Table(title=f"{table.num_rows:,} {'steps' if steps else 'rows'}", title_justify="left")
    for name in table.column_names:
        view.add_column(name, overflow="fold", max_width=60)
    for row in table.to_pylist():
        view.add_row(*(_cell(v) for v in row.values()))
    console.print(view)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:60] + "…"


@app.command()
def expire(
    path: Annotated[str, typer.Argument(help="Shard file, folder or glob (or s3://…).")],
    out: Annotated[str, typer.Option("--out", "-o", help="Output folder.")],
    relabel: Annotated[
        bool,
        typer.Option(
            "--relabel",
            help="Keep rows that no longer hold, marked success: false (failure_layer: "
            "expired), instead of moving them to OUT/expired.",
        ),
    ] = False,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="defaults.env.… as the rows' run had it, or KEY=VALUE."),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q")] = False,
) -> None:
    """Replay rows of a changed environment; drop what fails.

    The rows whose environment (tool specs, code, data) changed since they were played are
    replayed; those that no longer hold go to OUT/expired (or, --relabel, stay marked
    failed), the others are stamped with the current version."""
    from ..core.location import as_path
    from .run import run_single_stage

    sets = [*(set_ or []), *(["relabel=true"] if relabel else [])]
    run_single_stage("expire", [as_path(path)], as_path(out), sets, quiet=quiet)
