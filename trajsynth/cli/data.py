"""Commands that look at data: ``stats``, ``show``, ``export``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich.panel import Panel
from rich.table import Table

from ..core.errors import UserError
from . import app
from ._common import console

#: ``trajsynth.store.export.EXPORT_FORMATS``, spelled out so that ``--help`` does not import
#: the store's exporters (a test checks the two agree)
ExportFormat = Literal["trl", "jsonl", "hf", "dpo", "steca", "verl", "openai-ft"]


@app.command(rich_help_panel="Data")
def stats(
    path: Annotated[Path, typer.Argument(help="Shard file, folder or glob.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Rows, success rates, breakdowns and histograms of shards.

    Breakdowns by method, domain, difficulty and capability; quality and difficulty
    histograms; clusters; pass@k; and, for a run or stage folder, what the quality stages
    dropped.
    """
    from ..quality.stats import STATS_COLUMNS, dataset_stats, manifest_summary
    from ..store.integrity import verify_shards
    from ..store.shards import list_shards, read_table
    from .quality import resolve_data_path

    shards, manifest, stage_id = resolve_data_path(path)
    verify_shards(list_shards(str(shards)))
    table = read_table(str(shards), columns=STATS_COLUMNS)
    result = dataset_stats(table)
    if manifest is not None:
        result["stage"] = stage_id
        result["quality_stages"] = manifest_summary(manifest)
    if as_json:
        print(json.dumps(result, indent=1))
        return
    if shards != path:
        console.print(f"[dim]{path}: stage {stage_id} ({shards})[/]")
    rate = result["success_rate"]
    console.print(
        f"[bold]{path}[/]: {result['rows']:,} rows, {result['tasks']:,} tasks, "
        f"success {'n/a' if rate is None else f'{rate:.1%}'} "
        f"({result['successes']:,}/{result['success_known']:,} judged)"
    )
    for key in ("by_method", "by_domain", "by_difficulty", "by_capability"):
        groups = result[key]
        if not groups:
            continue
        t = Table(title=key.replace("_", " "), title_justify="left")
        t.add_column(key.removeprefix("by_"))
        t.add_column("rows", justify="right")
        t.add_column("success", justify="right")
        for g in groups:
            sr = g["success_rate"]
            t.add_row(str(g["value"]), f"{g['rows']:,}", "-" if sr is None else f"{sr:.1%}")
        console.print(t)
    dist = Table(title="distributions", title_justify="left")
    for col in ("", "mean", "min", "p50", "p90", "max"):
        dist.add_column(col, justify="right" if col else "left")
    for key in ("tool_calls", "turns", "quality_score"):
        d = result[key]
        if d:
            dist.add_row(key, *(f"{d[c]:.2f}" for c in ("mean", "min", "p50", "p90", "max")))
    console.print(dist)
    if result["pass_at_k"]:
        ks = sorted(
            {k for row in result["pass_at_k"].values() for k in row if k != "tasks"},
            key=lambda s: int(s.split("@")[1]),
        )
        t = Table(title="pass@k by capability", title_justify="left")
        t.add_column("capability")
        t.add_column("tasks", justify="right")
        for k in ks:
            t.add_column(k, justify="right")
        for cap, row in result["pass_at_k"].items():
            t.add_row(
                cap, f"{row['tasks']:.0f}", *("-" if k not in row else f"{row[k]:.1%}" for k in ks)
            )
        console.print(t)
    from .quality import print_quality_stats

    print_quality_stats(result)


def _clip(text: str | None, limit: int = 1200) -> str:
    text = text or ""
    return text if len(text) <= limit else text[:limit] + f" … (+{len(text) - limit} chars)"


@app.command(rich_help_panel="Data")
def show(
    path: Annotated[Path, typer.Argument(help="Shard file, folder or glob.")],
    id_: Annotated[
        str | None, typer.Option("--id", metavar="ID", help="Row id (or a prefix).")
    ] = None,
    index: Annotated[int, typer.Option("--index", "-n", help="Row number if no --id.")] = 0,
    full: Annotated[bool, typer.Option("--full", help="Do not shorten long contents.")] = False,
) -> None:
    """Render one trajectory: goal, turns, calls and results."""
    import pyarrow.compute as pc

    from ..core.batch import to_records
    from ..store.integrity import verify_shards
    from ..store.shards import iter_batches, list_shards

    verify_shards(list_shards(str(path)))
    record = None
    seen = 0
    for batch in iter_batches(str(path)):
        if id_ is not None:
            ids = batch.column("id")
            mask = pc.starts_with(ids, id_)
            hit = batch.filter(mask)
            if hit.num_rows:
                record = to_records(hit.slice(0, 1))[0]
                break
        elif index < seen + batch.num_rows:
            record = to_records(batch.slice(index - seen, 1))[0]
            break
        seen += batch.num_rows
    if record is None:
        raise UserError(f"no row {'with id ' + id_ if id_ else f'number {index}'} in {path}")
    limit = 10**9 if full else 1200
    head = Table.grid(padding=(0, 2))
    head.add_column(style="dim")
    head.add_column()
    outcome = {True: "[green]success[/]", False: "[red]failure[/]", None: "unverified"}[
        record.success
    ]
    for k, v in [
        ("id", record.id),
        ("task", record.task_id),
        ("domain", record.domain),
        ("method", f"{record.method} (stage {record.stage_id})"),
        ("capabilities", ", ".join(record.capabilities)),
        ("outcome", outcome),
        ("reward", record.reward),
        ("quality", record.quality_score),
        ("difficulty", record.difficulty),
        ("calls / turns", f"{record.num_tool_calls} / {record.num_turns}"),
    ]:
        if v not in (None, ""):
            head.add_row(k, str(v))
    if record.failure_layer:
        head.add_row("failed at", f"{record.failure_layer}: {record.failure_reason}")
    console.print(Panel(head, title="[bold]trajectory[/]", title_align="left"))
    console.print(f"[bold]goal:[/] {_clip(record.goal, limit)}\n")
    step = 0
    colors = {"system": "magenta", "user": "blue", "assistant": "green", "tool": "yellow"}
    for m in record.messages:
        label = m.role if m.role != "tool" else f"tool {m.name or ''}".strip()
        body: list[str] = []
        if m.reasoning:
            body.append(f"[dim italic]thought: {_clip(m.reasoning, limit)}[/]")
        if m.content:
            body.append(_clip(m.content, limit))
        for c in m.tool_calls:
            args: Any = c.parsed_arguments()
            shown = (
                json.dumps(args, ensure_ascii=False)
                if args is not None
                else f"[red]{c.arguments}[/] (unparseable)"
            )
            body.append(f"→ [bold]{c.name}[/]({shown})  [dim]{c.id}[/]")
        if m.role == "assistant":
            flags = record.step_flags[step] if step < len(record.step_flags) else []
            value = record.step_rewards[step] if step < len(record.step_rewards) else None
            if flags or value is not None:
                body.append(f"[dim]step {step}: value={value} flags={flags}[/]")
            step += 1
        console.print(f"[bold {colors[m.role]}]{label}[/]: " + "\n  ".join(body or ["∅"]))
    if record.extra:
        console.print(
            f"\n[dim]extra: {_clip(json.dumps(record.extra), 400 if not full else limit)}[/]"
        )


def _run_of(path: Path) -> dict[str, Any] | None:
    """What the run manifest of the shards under ``path`` recorded for the card (None for
    bare shards): the exported stage and the stages upstream of it, with their LLM usage."""
    from ..llm.usage import llm_usage
    from ..store.manifest import RunManifest, locate_manifest

    found = locate_manifest(path)
    if found is None:
        return None
    manifest = RunManifest.load(found[0])
    sid = found[1]
    ids = manifest.upstream(sid) if sid else list(manifest.stages)
    usage: dict[str, dict[str, float]] = {}
    for s in ids:
        for role, counters in llm_usage(manifest.stages[s].metrics).items():
            mine = usage.setdefault(role, {})
            for key, value in counters.items():
                mine[key] = mine.get(key, 0) + value
    return {
        "pipeline": manifest.pipeline,
        "run_id": manifest.run_id,
        "stage": sid,
        "stages": {
            s: {
                "uses": manifest.stages[s].uses,
                "rows_in": manifest.stages[s].rows_in,
                "rows_out": manifest.stages[s].rows_out(),
            }
            for s in ids
        },
        "usage": usage,
    }


def dataset_card(path: Path, *, split: str = "train") -> str:
    """The Markdown body of the hf export's card: the figures of the rows under ``path`` and
    of the run they come from (when their run manifest is found)."""
    from ..quality.card import card_figures, card_markdown
    from ..quality.stats import STATS_COLUMNS
    from ..store.shards import read_table

    run = _run_of(path)
    figures = card_figures(read_table(str(path), columns=STATS_COLUMNS), run)
    title = (
        f"{run['pipeline']} / {run['stage']}"
        if run and run.get("stage")
        else (path.name or "trajsynth export")
    )
    usage = (
        "```python\nimport datasets\n"
        f'ds = datasets.load_dataset("<this folder or repo>", split="{split}")\n```'
    )
    return card_markdown(figures, title=title, usage=usage)


@app.command(rich_help_panel="Data")
def export(
    path: Annotated[Path, typer.Argument(help="Shard file, folder or glob.")],
    fmt: Annotated[
        ExportFormat,
        typer.Option(
            "--format",
            "-f",
            help="trl, jsonl, hf, dpo, steca, verl or openai-ft (see above).",
        ),
    ] = "trl",
    # typer marks a required option by the default ``...``
    out: Annotated[Path, typer.Option("--out", "-o", help="Destination file or folder.")] = ...,  # type: ignore[assignment]
    split: Annotated[
        str,
        typer.Option(
            "--split", metavar="NAME", help="Split name (hf: the split; verl: extra_info.split)."
        ),
    ] = "train",
    license_id: Annotated[
        str, typer.Option("--license", metavar="ID", help="hf: the license id in the card.")
    ] = "other",
) -> None:
    """Export shards for training tools (TRL, HF, DPO, verl, ...).

    Formats: trl (TRL/HF chat JSONL), hf (a datasets folder with a dataset card of the run's
    figures), dpo (preference pairs), steca (STeCa records), verl (RL Parquet), openai-ft
    (OpenAI fine-tuning JSONL) and jsonl (full records).
    """
    from ..store.export import export as do_export

    card = None
    if fmt == "hf":
        from ..store.integrity import verify_shards
        from ..store.shards import list_shards

        verify_shards(list_shards(str(path)))
        card = dataset_card(path, split=split)
    result = do_export(str(path), fmt, out, split=split, card=card, license=license_id)
    console.print(f"{result.rows:,} rows → {result.path}")
    if result.skipped:
        detail = ", ".join(f"{reason} {n:,}" for reason, n in result.skipped.items())
        console.print(f"skipped {sum(result.skipped.values()):,} rows ({detail})")
