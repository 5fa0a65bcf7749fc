"""Commands that run things: ``run``, ``stage``, ``validate``, ``stages``, ``schema``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from rich.table import Table

from ..core.errors import ConfigError, InputNotFoundError
from . import app
from ._common import (
    Quiet,
    RichReporter,
    console,
    err_console,
    llm_usage_table,
    rerun_lines,
    summary_table,
)

NoCacheOption = Annotated[
    bool,
    typer.Option("--no-cache", help="Neither read nor write the LLM response cache."),
]


def _no_llm_cache(no_cache: bool) -> None:
    if no_cache:
        import os

        from ..llm.client import NO_CACHE_ENV

        os.environ[NO_CACHE_ENV] = "1"  # read by every LLM client of this run (and workers)


if TYPE_CHECKING:
    from ..pipeline.runner import RunResult

SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="KEY=VALUE",
        help="Override a value: stages.ID.with.KEY=VALUE, defaults.seed=3 (repeatable).",
    ),
]
#: the panels options are grouped in (``--help``)
EXECUTION = "Execution"


@app.command(rich_help_panel="Pipelines")
def run(
    pipeline: Annotated[Path, typer.Argument(help="Pipeline YAML file (or a built-in's name).")],
    out: Annotated[
        str | None, typer.Option("--out", "-o", help="Run folder (a path, or s3://, gs:// …).")
    ] = None,
    set_: SetOption = None,
    force: Annotated[
        bool, typer.Option("--force", help="Rerun every stage.", rich_help_panel=EXECUTION)
    ] = False,
    workers: Annotated[
        int | None,
        typer.Option(help="Processes for CPU-bound stages.", rich_help_panel=EXECUTION),
    ] = None,
    executor: Annotated[
        Literal["local", "ray"] | None,
        typer.Option(help="Run map-stage units here or as Ray tasks.", rich_help_panel=EXECUTION),
    ] = None,
    quiet: Quiet = False,
    no_cache: NoCacheOption = False,
    max_infra_error_rate: Annotated[
        float | None,
        typer.Option(
            "--max-infra-error-rate",
            min=0.0,
            max=1.0,
            help="Largest share of a stage's rollouts lost to LLM endpoint failures before the "
            "run stops (a rerun plays them again); default defaults.max_infra_error_rate, 0.05.",
            rich_help_panel=EXECUTION,
        ),
    ] = None,
    allow_unverified: Annotated[
        bool,
        typer.Option(
            "--allow-unverified",
            help="Exit 0 even when the final output is mostly unverified (more than half its "
            "rows with success false or null, or no rows left once failures were set aside); "
            "it is still reported.",
        ),
    ] = False,
) -> None:
    """Run a pipeline: unchanged stages are cached, others resume.

    PIPELINE is a YAML file or a built-in pipeline's name (`trajsynth pipelines`). A stage
    whose settings and inputs are unchanged since it finished is skipped; an interrupted one
    resumes where it stopped; the summary says why each stage that ran before ran again.

    Exits 1 when the final output (the last stage that makes rows) is mostly unverified,
    unless --allow-unverified (or defaults.allow_unverified) accepts it.
    """
    from ..pipeline.runner import Runner
    from ..pipeline.spec import load_pipeline

    _no_llm_cache(no_cache)
    overrides = list(set_ or [])
    if workers is not None:
        overrides.append(f"defaults.workers={workers}")
    if executor is not None:
        overrides.append(f"defaults.executor={executor}")
    if max_infra_error_rate is not None:
        overrides.append(f"defaults.max_infra_error_rate={max_infra_error_rate}")
    if allow_unverified:
        overrides.append("defaults.allow_unverified=true")
    resolved = load_pipeline(pipeline, overrides, output=str(out) if out else None)
    reporter = RichReporter(quiet=quiet)
    try:
        result = Runner(resolved, run_dir=out, force=force, reporter=reporter).run()
    finally:
        reporter.close()
    if not quiet:
        console.print(summary_table(result))
        for line in rerun_lines(result):
            console.print(line)
        usage = llm_usage_table(result)
        if usage is not None:
            console.print(usage)
        for line in infra_lines(result):
            console.print(line)
    unverified_warning(result, quiet=quiet)


def unverified_warning(result: RunResult, *, quiet: bool = False) -> None:
    """Say loudly on stderr when the run's final output is mostly unverified, and exit 1
    unless the pipeline allows it (``trajsynth.pipeline.final_output``)."""
    from ..core.errors import UnverifiedOutput
    from ..pipeline.final_output import ACCEPT_HINT, verdict_line, warning_lines

    check = result.final_output
    lines = warning_lines(check)
    if not lines:
        return
    if check["allowed"]:
        if not quiet:
            err_console.print(
                f"[yellow]warning:[/] {lines[0]} ({verdict_line(check)})", soft_wrap=True
            )
        return
    err_console.print()
    err_console.print(f"[bold red]WARNING: {lines[0]}[/]", soft_wrap=True)
    for line in lines[1:]:
        err_console.print(f"[red]  {line}[/]", soft_wrap=True)
    raise UnverifiedOutput(
        "the run's final output did not pass verification; not accepted", hint=ACCEPT_HINT
    )


def infra_lines(result: RunResult) -> list[str]:
    """One line per stage that lost rollouts (or rows) to LLM endpoint failures."""
    lines = []
    for sid, st in result.manifest.stages.items():
        counters = st.metrics.get("counters", {})
        lost = counters.get("infra.lost", 0)
        if lost:
            unit = st.metrics.get("values", {}).get("infra.unit", "rows")
            units = counters.get("infra.units") or st.rows_in
            share = f" of {units:,.0f} {unit} ({lost / max(units, lost):.1%})" if units else unit
            lines.append(f"stage {sid!r}: {lost:,.0f}{share} lost to endpoint errors")
    return lines


@app.command(rich_help_panel="Pipelines")
def stage(
    name: Annotated[str, typer.Argument(help="Stage name (see `trajsynth stages`).")],
    inputs: Annotated[
        list[Path] | None, typer.Option("--in", "-i", help="Input shards (repeatable).")
    ] = None,
    # typer marks a required option by the default ``...``
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder.")] = ...,  # type: ignore[assignment]
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            metavar="KEY=VALUE",
            help="Stage config KEY=VALUE (or defaults.KEY=VALUE); repeatable.",
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Rerun even if unchanged.")] = False,
    quiet: Quiet = False,
    no_cache: NoCacheOption = False,
) -> None:
    """Run one stage on shards, as one step of a pipeline.

    Example: `trajsynth stage sample --in data/raw --out data/s --set n=100`. The output
    folder holds the shards and a manifest, so a rerun with the same inputs is cached.
    """
    _no_llm_cache(no_cache)
    run_single_stage(name, inputs or [], out, set_ or [], force=force, quiet=quiet)


def run_single_stage(
    name: str,
    inputs: list[Path],
    out: Path,
    sets: list[str],
    config: dict[str, Any] | None = None,
    *,
    force: bool = False,
    quiet: bool = False,
    show_counts: bool = True,
) -> RunResult:
    """Shared by `trajsynth stage` and the one-stage shortcuts (`filter`, `dedup`, ...).

    ``config`` is the stage's settings (typed values by field name; ``sets``, ``KEY=VALUE``
    text, apply on top). Returns the run's result; ``show_counts=False`` leaves printing the
    stage's counts to the caller (the shortcuts print their own tables).
    """
    from ..core.location import as_path, is_url
    from ..pipeline.runner import Runner
    from ..pipeline.spec import resolve_pipeline

    inputs = [as_path(p) for p in inputs]  # a bucket URL (s3://…) too
    for p in inputs:
        if not is_url(p) and not p.exists():
            raise InputNotFoundError(f"--in {p}: does not exist")
    overrides = []
    for item in sets:
        key = item.split("=", 1)[0]
        overrides.append(item if key.startswith("defaults.") else f"stages.{name}.with.{item}")
    raw = {
        "name": f"stage-{name}",
        "stages": [
            {"id": name, "uses": name, "from": [str(p) for p in inputs], "with": config or {}}
        ],
    }
    resolved = resolve_pipeline(raw, overrides=overrides, output=str(out))
    reporter = RichReporter(quiet=quiet)
    try:
        result = Runner(
            resolved, run_dir=out, force=force, reporter=reporter, layout="single"
        ).run()
    finally:
        reporter.close()
    state = result.manifest.stages[name]
    if not quiet:
        counters = state.metrics.get("counters", {})
        if counters and show_counts:
            table = Table(title="counts", title_justify="left")
            table.add_column("metric")
            table.add_column("value", justify="right")
            for k, v in sorted(counters.items()):
                table.add_row(k, f"{v:,.0f}" if float(v).is_integer() else f"{v:,.4f}")
            console.print(table)
        console.print(f"{state.rows_out():,} rows → {out}")
    return result


@app.command(rich_help_panel="Pipelines")
def validate(
    pipeline: Annotated[Path, typer.Argument(help="Pipeline YAML file (or a built-in's name).")],
    set_: SetOption = None,
) -> None:
    """Check a pipeline without running it.

    Checks the stages, their configs, inputs, cycles and the columns each stage reads, then
    starts each MCP server it names and lists its tools.
    """
    from ..pipeline.spec import load_pipeline

    resolved = load_pipeline(pipeline, set_)
    console.print(
        f"[green]✓[/] {pipeline}: {len(resolved.stages)} stages, order: "
        + " → ".join(resolved.order)
    )
    from ..envs.factory import EnvConfig
    from ..envs.mcp import describe_server

    env = EnvConfig.model_validate(resolved.spec.defaults.env or {})
    for name, tc in env.toolsets.items():
        if isinstance(tc, str) or tc.mcp is None:
            continue
        info = describe_server(tc.mcp, name)
        ts = info["toolset"]
        ro = sum(1 for t in ts if t.extra.get("read_only"))
        console.print(
            f"[green]✓[/] toolset {name}: MCP server {tc.mcp.where()}: {len(ts)} tools "
            f"({ro} read-only): {', '.join(ts.names())}; state: "
            f"{', '.join(info['state']) or 'none'} (isolation {info['isolation']}, reset "
            f"{info['reset']})"
        )


@app.command("stages", rich_help_panel="Pipelines")
def list_stages(
    name: Annotated[str | None, typer.Argument(help="Show one stage's config fields.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable.")] = False,
) -> None:
    """List the stages with their docs and config fields."""
    from ..stages import get_stage, load_builtin_stages

    stages = load_builtin_stages()
    names = [name] if name else sorted(stages)
    info: dict[str, dict[str, Any]] = {}
    for n in names:
        cls = get_stage(n)
        info[n] = {
            "kind": cls.kind.value,
            "doc": cls.doc(),
            "reads": list(cls.reads),
            "writes": list(cls.writes),
            "outputs": list(cls.outputs),
            "config": cls.config_fields(),
        }
    if as_json:
        console.print_json(json.dumps(info))
        return
    table = Table(show_lines=bool(name))
    table.add_column("stage", style="bold")
    table.add_column("kind")
    table.add_column("what it does")
    table.add_column("config")
    for n, i in info.items():
        cfg = "\n".join(f"{k}: {v}" for k, v in i["config"].items())
        doc = i["doc"] + (
            f"\n[dim]outputs: {', '.join(i['outputs'])}[/]" if len(i["outputs"]) > 1 else ""
        )
        table.add_row(n, i["kind"], doc, cfg)
    console.print(table)


@app.command(rich_help_panel="Pipelines")
def pipelines() -> None:
    """List the built-in pipelines (`trajsynth run NAME` runs one)."""
    import yaml

    from ..pipeline.spec import builtin_pipelines

    table = Table()
    table.add_column("pipeline", style="bold")
    table.add_column("what it does")
    table.add_column("file", style="dim")
    for name, path in builtin_pipelines().items():
        raw = yaml.safe_load(path.read_text()) or {}
        table.add_row(name, str(raw.get("description", "")), str(path))
    console.print(table)


@app.command(rich_help_panel="Pipelines")
def schema(
    write: Annotated[bool, typer.Option("--write", help="Rewrite the files.")] = False,
    check: Annotated[bool, typer.Option("--check", help="Exit 1 if a file is stale.")] = False,
    directory: Annotated[Path, typer.Option("--dir", help="Where the schemas live.")] = Path(
        "schemas"
    ),
) -> None:
    """Write or check the JSON schemas of rows and pipelines.

    The files are schemas/trajectory.schema.json and schemas/pipeline.schema.json, generated
    from the code.
    """
    from ..core.schema import json_schema_text
    from ..pipeline.spec import pipeline_json_schema

    files = {
        "trajectory.schema.json": json_schema_text(),
        "pipeline.schema.json": json.dumps(pipeline_json_schema(), indent=2) + "\n",
    }
    stale = []
    for fname, text in files.items():
        path = directory / fname
        current = path.read_text() if path.exists() else None
        if current != text:
            stale.append(fname)
            if write:
                directory.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
    if write:
        console.print(f"wrote {', '.join(stale) or 'nothing (up to date)'} in {directory}")
    elif check:
        if stale:
            raise ConfigError(
                f"stale schema files: {stale}",
                hint="run `trajsynth schema --write` and commit them",
            )
        console.print("schemas up to date")
    else:
        err_console.print("use --write to regenerate or --check to verify")
        console.print_json(files["trajectory.schema.json"])
