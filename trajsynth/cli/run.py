"""Commands that run things: ``run``, ``stage``, ``validate``, ``stages``, ``schema``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from ..core.errors import ConfigError, InputNotFoundError
from . import app
from ._common import RichReporter, console, err_console, llm_usage_table, summary_table

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
    typer.Option("--set", help="Override a value: stages.<id>.with.<key>=VALUE, defaults.seed=3"),
]


@app.command()
def run(
    pipeline: Annotated[Path, typer.Argument(help="Pipeline YAML file.")],
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Run folder.")] = None,
    set_: SetOption = None,
    force: Annotated[bool, typer.Option("--force", help="Rerun every stage.")] = False,
    workers: Annotated[int | None, typer.Option(help="Processes for CPU-bound stages.")] = None,
    executor: Annotated[
        str | None, typer.Option(help="local | ray (map-stage units as Ray tasks).")
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress output.")] = False,
    no_cache: NoCacheOption = False,
    max_infra_error_rate: Annotated[
        float | None,
        typer.Option(
            "--max-infra-error-rate",
            min=0.0,
            max=1.0,
            help="Largest share of a stage's rollouts lost to LLM endpoint failures before the "
            "run stops (a rerun plays them again); default defaults.max_infra_error_rate, 0.05.",
        ),
    ] = None,
) -> None:
    """Run a whole pipeline; unchanged stages are skipped, interrupted ones resume."""
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
    resolved = load_pipeline(pipeline, overrides, output=str(out) if out else None)
    reporter = RichReporter(quiet=quiet)
    try:
        result = Runner(resolved, run_dir=out, force=force, reporter=reporter).run()
    finally:
        reporter.close()
    if not quiet:
        console.print(summary_table(result))
        usage = llm_usage_table(result)
        if usage is not None:
            console.print(usage)
        for line in infra_lines(result):
            console.print(line)


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


@app.command()
def stage(
    name: Annotated[str, typer.Argument(help="Stage name (see `trajsynth stages`).")],
    inputs: Annotated[
        list[Path] | None, typer.Option("--in", "-i", help="Input shards (repeatable).")
    ] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder.")] = ...,  # type: ignore[assignment]
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Stage config KEY=VALUE (or defaults.KEY=VALUE)."),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Rerun even if unchanged.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q")] = False,
    no_cache: NoCacheOption = False,
) -> None:
    """Run one stage on shards: `trajsynth stage sample --in data/raw --out data/s --set n=100`."""
    _no_llm_cache(no_cache)
    run_single_stage(name, inputs or [], out, set_ or [], force=force, quiet=quiet)


def run_single_stage(
    name: str,
    inputs: list[Path],
    out: Path,
    sets: list[str],
    *,
    force: bool = False,
    quiet: bool = False,
    show_counts: bool = True,
) -> RunResult:
    """Shared by `trajsynth stage` and the one-stage shortcuts (`filter`, `dedup`, ...).

    Returns the run's result; ``show_counts=False`` leaves printing the stage's counts to the
    caller (the shortcuts print their own tables).
    """
    from ..pipeline.runner import Runner
    from ..pipeline.spec import resolve_pipeline

    for p in inputs:
        if not p.exists():
            raise InputNotFoundError(f"--in {p}: does not exist")
    overrides = []
    for item in sets:
        key = item.split("=", 1)[0]
        overrides.append(item if key.startswith("defaults.") else f"stages.{name}.with.{item}")
    raw = {
        "name": f"stage-{name}",
        "stages": [{"id": name, "uses": name, "from": [str(p) for p in inputs]}],
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


@app.command()
def validate(
    pipeline: Annotated[Path, typer.Argument(help="Pipeline YAML file.")],
    set_: SetOption = None,
) -> None:
    """Check a pipeline without running it (stages, configs, inputs, cycles, columns); start
    each MCP server it names and list its tools."""
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


@app.command("stages")
def list_stages(
    name: Annotated[str | None, typer.Argument(help="Show one stage's config fields.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable.")] = False,
) -> None:
    """List registered stages with their one-line docs and config fields."""
    from ..stages import get_stage, load_builtin_stages

    stages = load_builtin_stages()
    names = [name] if name else sorted(stages)
    info = {}
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


@app.command()
def pipelines() -> None:
    """List the built-in pipelines (run one with `trajsynth run NAME`)."""
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


@app.command()
def schema(
    write: Annotated[bool, typer.Option("--write", help="Rewrite the files.")] = False,
    check: Annotated[bool, typer.Option("--check", help="Exit 1 if a file is stale.")] = False,
    directory: Annotated[Path, typer.Option("--dir", help="Where the schemas live.")] = Path(
        "schemas"
    ),
) -> None:
    """Generate schemas/trajectory.schema.json and schemas/pipeline.schema.json from the code."""
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
