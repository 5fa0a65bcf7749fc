"""Quality commands: ``filter``, ``dedup``, ``balance`` (one stage each, on shards) and
``report`` (a run's quality report, HTML or Markdown + PNG).

The three data commands run their stage through :func:`~trajsynth.cli.run.run_single_stage`
(so they cache, resume and write a manifest like any stage) and then print what the stage
did, read back from the manifest: the filter's per-rule drop table, the dedup counts, the
balance plan with its shortfalls.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from ..core.errors import InputNotFoundError
from ..stages.quality.balance import BalanceConfig
from ..stages.quality.dedup import DedupConfig
from ..stages.quality.filter import FilterConfig
from . import app
from ._common import Quiet, console
from ._shortcuts import Shortcut, config_options

__all__ = ["collect_report", "print_quality_stats", "resolve_data_path"]

InPath = Annotated[Path, typer.Argument(help="Input shards: a file, a folder or a glob.")]
OutPath = Annotated[Path, typer.Option("--out", "-o", help="Output folder.")]
Force = Annotated[bool, typer.Option("--force", help="Rerun even if unchanged.")]
#: the panels options are grouped in (``--help``)
RULES = "Rules"
THRESHOLDS = "Thresholds"
DUPLICATES = "Duplicates"


def _metrics(result: Any, name: str) -> dict[str, Any]:
    return result.manifest.stages[name].metrics or {}


@app.command("filter", rich_help_panel="Quality")
@config_options(
    FilterConfig,
    Shortcut("min_quality", THRESHOLDS),
    Shortcut("min_coherence", THRESHOLDS),
    Shortcut("min_turns", THRESHOLDS),
    Shortcut("max_calls", THRESHOLDS),
    Shortcut("invalid_calls", RULES),
    Shortcut("incoherent", RULES),
    Shortcut("too_easy", RULES),
    Shortcut("inefficient", RULES),
    Shortcut("low_quality", RULES),
    Shortcut("unsuccessful", RULES, flags="--require-success/--keep-unsuccessful"),
    Shortcut("keep_rejected"),
)
def filter_cmd(
    path: InPath,
    # typer marks a required option by the default ``...``
    out: OutPath = ...,  # type: ignore[assignment]
    settings: dict[str, Any] = {},  # noqa: B006 - replaced by one option per field
    force: Force = False,
    quiet: Quiet = False,
) -> None:
    """Drop invalid, incoherent, easy, low-quality and unverified rows.

    Prints how many rows each rule dropped (first failing rule) and rejects (any); the same
    counts are stored in OUT/manifest.json.
    """
    from .run import run_single_stage

    result = run_single_stage(
        "filter", [path], out, [], settings, force=force, quiet=quiet, show_counts=False
    )
    if quiet:
        return
    counters = _metrics(result, "filter").get("counters", {})
    rows_in = int(counters.get("rows_in", 0))
    thresholds = {
        "invalid_calls": "format error",
        "incoherent": f"coherence < {settings['min_coherence']}",
        "too_easy": f"success, turns < {settings['min_turns']}, no clarify turn",
        "inefficient": f"success, calls > {settings['max_calls']}",
        "low_quality": f"quality < {settings['min_quality']}",
        "unsuccessful": "success is not true",
    }
    enabled = {rule: settings[rule] for rule in thresholds}
    table = Table(title=f"filter: {rows_in:,} rows in", title_justify="left")
    for col in ("rule", "drops when", "dropped", "share", "failing (any)"):
        table.add_column(
            col, justify="right" if col in ("dropped", "share", "failing (any)") else "left"
        )
    for rule, on in enabled.items():
        if not on:
            table.add_row(f"[dim]{rule}[/]", "[dim]off[/]", "-", "-", "-")
            continue
        dropped = int(counters.get(f"dropped.{rule}", 0))
        share = f"{dropped / rows_in:.1%}" if rows_in else "-"
        table.add_row(
            rule,
            thresholds[rule],
            f"{dropped:,}",
            share,
            f"{int(counters.get(f'failing.{rule}', 0)):,}",
        )
    kept = int(counters.get("kept", 0))
    table.add_row(
        "[bold]kept[/]", "", f"[bold]{kept:,}[/]", f"{kept / rows_in:.1%}" if rows_in else "-", ""
    )
    console.print(table)
    if counters.get("scored_here"):
        console.print(
            f"[yellow]{int(counters['scored_here']):,} rows had no scores and were scored here; "
            "run `trajsynth stage score` first at scale[/]"
        )


@app.command("dedup", rich_help_panel="Quality")
@config_options(
    DedupConfig,
    *(
        Shortcut(name, DUPLICATES)
        for name in ("threshold", "semantic", "semantic_threshold", "exact", "near", "num_perm")
    ),
)
def dedup_cmd(
    path: InPath,
    # typer marks a required option by the default ``...``
    out: OutPath = ...,  # type: ignore[assignment]
    settings: dict[str, Any] = {},  # noqa: B006 - replaced by one option per field
    force: Force = False,
    quiet: Quiet = False,
) -> None:
    """Remove exact, near and (optionally) semantic duplicates.

    Near duplicates are found with MinHash LSH over the goal and the call skeleton, semantic
    ones with embeddings; of each group the copy with the highest quality (then the lowest
    id) survives.
    """
    from .run import run_single_stage

    result = run_single_stage(
        "dedup", [path], out, [], settings, force=force, quiet=quiet, show_counts=False
    )
    if quiet:
        return
    c = _metrics(result, "dedup").get("counters", {})
    table = Table(title="dedup", title_justify="left")
    table.add_column("")
    table.add_column("rows", justify="right")
    for key, label in (
        ("rows", "in"),
        ("exact_duplicates", "exact duplicates"),
        ("near_duplicates", f"near duplicates (Jaccard ≥ {settings['threshold']})"),
        ("semantic_duplicates", f"semantic duplicates (cosine ≥ {settings['semantic_threshold']})"),
        ("kept", "kept"),
    ):
        table.add_row(label, f"{int(c.get(key, 0)):,}")
    console.print(table)


@app.command("balance", rich_help_panel="Quality")
@config_options(
    BalanceConfig,
    Shortcut("mix", metavar="EASY,MEDIUM,HARD", as_text=True),
    Shortcut("size"),
    Shortcut("keep_all"),
)
def balance_cmd(
    path: InPath,
    # typer marks a required option by the default ``...``
    out: OutPath = ...,  # type: ignore[assignment]
    settings: dict[str, Any] = {},  # noqa: B006 - replaced by one option per field
    force: Force = False,
    quiet: Quiet = False,
) -> None:
    """Sample to a difficulty mix across domains and clusters.

    The mix is 30/50/20 (easy/medium/hard) by default; rows are spread across domains and
    clusters, and a bucket with too few rows is reported with how many it lacks.
    """
    from ..core.errors import ConfigError
    from ..stages.quality.balance import parse_mix
    from .run import run_single_stage

    try:
        settings["mix"] = list(parse_mix(settings["mix"]))
    except ValueError as exc:
        raise ConfigError(f"--mix: {exc}") from None
    result = run_single_stage(
        "balance", [path], out, [], settings, force=force, quiet=quiet, show_counts=False
    )
    if quiet:
        return
    plan = _metrics(result, "balance").get("values", {}).get("plan")
    if not plan:
        return
    table = Table(title=f"balance: {plan['requested']:,} rows requested", title_justify="left")
    for col in ("bucket", "target share", "available", "target", "short by", "kept", "share"):
        table.add_column(col, justify="left" if col == "bucket" else "right")
    for b in ("easy", "medium", "hard"):
        short = plan["shortfalls"].get(b, 0)
        table.add_row(
            b,
            f"{plan['mix'][b]:.0%}",
            f"{plan['available'][b]:,}",
            f"{plan['targets'][b]:,}",
            f"[red]{short:,}[/]" if short else "0",
            f"{plan['final'][b]:,}",
            f"{plan['achieved_mix'][b]:.1%}",
        )
    console.print(table)
    if plan["shortfalls"]:
        how = (
            "kept every row of the short buckets (mix is off)"
            if settings["keep_all"]
            else "downsampled every bucket to keep the mix (--keep-all keeps more rows)"
        )
        console.print(f"[yellow]short buckets: {how}[/]")


# --------------------------------------------------------------------------------------
# stats and report
# --------------------------------------------------------------------------------------


def _bar(count: int, most: int, width: int = 30) -> str:
    return "█" * (round(width * count / most) if most else 0)


def print_quality_stats(result: dict[str, Any]) -> None:
    """The quality part of `trajsynth stats`: histograms, clusters, per-stage counts."""
    for key, title in (
        ("quality_histogram", "quality_score"),
        ("difficulty_histogram", "difficulty_score"),
    ):
        hist = result.get(key)
        if not hist:
            continue
        t = Table(title=f"{title} histogram", title_justify="left")
        t.add_column("bin")
        t.add_column("rows", justify="right")
        t.add_column("")
        edges, counts = hist["edges"], hist["counts"]
        most = max(counts)
        for i, c in enumerate(counts):
            close = "]" if i == len(counts) - 1 else ")"
            t.add_row(f"[{edges[i]:.1f}, {edges[i + 1]:.1f}{close}", f"{c:,}", _bar(c, most))
        console.print(t)
    clusters = result.get("clusters")
    if clusters:
        t = Table(
            title=f"clusters: {clusters['clusters']}, size entropy "
            f"{clusters['entropy_bits']:.2f} bits ({clusters['normalized_entropy']:.2f} of max)",
            title_justify="left",
        )
        t.add_column("cluster", justify="right")
        t.add_column("rows", justify="right")
        t.add_column("sample goal")
        for c in clusters["largest"]:
            t.add_row(str(c["cluster"]), f"{c['size']:,}", (c.get("sample_goal") or "")[:90])
        console.print(t)
    stages = result.get("quality_stages") or {}
    for f in stages.get("filter", []):
        t = Table(
            title=f"filter {f['stage']}: {f['rows_in']:,} → {f['kept']:,} rows",
            title_justify="left",
        )
        t.add_column("rule")
        t.add_column("dropped (first rule)", justify="right")
        t.add_column("failing (any)", justify="right")
        for r in f["rules"]:
            t.add_row(r["rule"], f"{r['dropped']:,}", f"{r['failing']:,}")
        console.print(t)
    for d in stages.get("dedup", []):
        console.print(
            f"dedup {d['stage']}: {d.get('rows', 0):,} → {d.get('kept', 0):,} rows "
            f"(exact {d.get('exact_duplicates', 0):,}, near {d.get('near_duplicates', 0):,}, "
            f"semantic {d.get('semantic_duplicates', 0):,})"
        )
    for b in stages.get("balance", []):
        parts = ", ".join(
            f"{k} {b['available'][k]:,}→{b['final'][k]:,}" for k in ("easy", "medium", "hard")
        )
        short = ", ".join(f"{k} short by {v:,}" for k, v in b.get("shortfalls", {}).items())
        console.print(f"balance {b['stage']}: {parts}" + (f" ({short})" if short else ""))


def resolve_data_path(path: Path) -> tuple[Path, dict[str, Any] | None, str | None]:
    """Where the shards of ``path`` are, and the manifest that describes them, if any.

    ``path`` may be shards (a file, glob or folder), a one-stage output folder (shards and
    ``manifest.json`` together), a stage folder of a pipeline run (the manifest is one level
    up), or a run folder (then its last finished stage with rows is used). Returns
    ``(shards, manifest dict or None, stage id or None)``.
    """
    from ..core.location import as_path
    from ..store.layout import RunFolder
    from ..store.manifest import RunManifest

    def load(p: Path) -> dict[str, Any]:
        return RunManifest.load(p).model_dump(mode="json")

    path = as_path(path)  # a bucket URL (s3://…) too

    if path.is_dir():
        has_shards = any(path.glob("*.parquet"))
        one_stage, run, above = (
            RunFolder(path, single=True),
            RunFolder(path),
            RunFolder(path.parent),
        )
        if has_shards and one_stage.manifest.is_file():
            manifest = load(one_stage.manifest)
            stages = list(manifest["stages"])
            return path, manifest, stages[-1] if stages else None
        if has_shards and above.manifest.is_file():
            manifest = load(above.manifest)
            return path, manifest, path.name if path.name in manifest["stages"] else None
        if not has_shards and run.manifest.is_file():
            manifest = load(run.manifest)
            for sid in reversed(list(manifest["stages"])):
                st = manifest["stages"][sid]
                folder = run.stage(sid)
                if st.get("status") == "done" and folder.is_dir() and any(folder.glob("*.parquet")):
                    return folder, manifest, sid
            raise InputNotFoundError(f"{path}: the run has no finished stage with rows")
    return path, None, None


def _stage_folder(run_dir: Path, sid: str) -> Path | None:
    from ..store.layout import RunFolder

    for layout in (RunFolder(run_dir), RunFolder(run_dir, single=True)):
        folder = layout.stage(sid)
        if folder.is_dir() and any(folder.glob("*.parquet")):
            return folder
    return None


def collect_report(run_dir: Path) -> Any:
    """Read a run folder (or a one-stage output folder) into a
    :class:`~trajsynth.quality.report.ReportData`."""
    import pyarrow.compute as pc

    from ..quality.report import ReportData
    from ..quality.stats import STATS_COLUMNS, cluster_stats, dataset_stats, manifest_summary
    from ..store.integrity import verify_shards
    from ..store.layout import RunFolder
    from ..store.manifest import RunManifest
    from ..store.shards import read_table

    where = RunFolder(run_dir).manifest
    if not where.is_file():
        raise InputNotFoundError(
            f"{run_dir}: no {where.name} here",
            hint="give a run folder (trajsynth run --out) or a stage output folder",
        )
    manifest = RunManifest.load(where).model_dump(mode="json")
    data = ReportData(title=f"trajsynth quality report: {manifest.get('pipeline', run_dir.name)}")
    data.summary = manifest_summary(manifest)
    data.final_output = manifest.get("final_output") or {}
    tables: dict[str, Any] = {}
    for sid, st in manifest["stages"].items():
        outs = st.get("outputs", {}).get("main", {}).get("shards", [])
        data.stages.append(
            {
                "id": sid,
                "uses": st.get("uses", ""),
                "rows_in": st.get("rows_in", 0),
                "rows_out": sum(s["rows"] for s in outs),
                "seconds": st.get("seconds", 0.0),
            }
        )
        folder = _stage_folder(run_dir, sid)
        if folder is None or st.get("status") != "done" or not outs:
            continue
        files = [folder / s["file"] for s in outs]
        verify_shards(files)
        tables[sid] = read_table(files, columns=STATS_COLUMNS)
    # quality after every stage that has scores and changed the row count (score, filter,
    # dedup, balance: annotating stages would only repeat the previous histogram)
    for sid, t in tables.items():
        q = t.column("quality_score")
        if q.null_count == t.num_rows:
            continue
        values = pc.drop_null(q).to_numpy(zero_copy_only=False)
        last = list(data.quality.values())[-1] if data.quality else None
        if last is None or len(last) != len(values):
            data.quality[sid] = values
    if len(data.quality) > 4:  # the first and the last three
        keys = list(data.quality)
        data.quality = {k: data.quality[k] for k in [keys[0], *keys[-3:]]}
    # difficulty before/after balancing
    balance = data.summary.get("balance")
    if balance:
        plan = balance[-1]
        data.difficulty = {"before balance": plan["available"], "after balance": plan["final"]}
        data.target_mix = plan.get("mix")
    else:
        for sid, t in reversed(tables.items()):
            d = t.column("difficulty")
            if d.null_count < t.num_rows:
                vc = pc.value_counts(pc.drop_null(d)).to_pylist()
                data.difficulty = {sid: {x["values"]: x["counts"] for x in vc}}
                break
    # clusters: the diversity stage's summary, else computed from the data
    div = data.summary.get("diversity")
    if div:
        data.clusters = div[-1]
    else:
        for t in reversed(tables.values()):
            summary = cluster_stats(t)
            if summary:
                data.clusters = summary
                break
    # success per capability on the earliest stage that knows success
    for sid, t in tables.items():
        if t.column("success").null_count < t.num_rows:
            data.capability_success = dataset_stats(t)["by_capability"]
            data.capability_stage = sid
            break
    return data


@app.command("report", rich_help_panel="Quality")
def report_cmd(
    run_dir: Annotated[Path, typer.Argument(help="Run folder (or a stage's output folder).")],
    out: Annotated[
        Path, typer.Option("--out", "-o", help="report.html, or report.md (+ PNG files).")
    ] = Path("report.html"),
) -> None:
    """Write a run's quality report (HTML, or Markdown + PNG).

    The report shows the quality distribution, the filter rules, dedup, the difficulty mix
    before and after balancing, clusters, and success per capability.
    """
    from ..quality.report import render_report

    if not run_dir.exists():
        raise InputNotFoundError(f"{run_dir} does not exist")
    data = collect_report(run_dir)
    files = render_report(data, out)
    console.print(
        f"report → {files[0]}" + (f" (+ {len(files) - 1} images)" if len(files) > 1 else "")
    )
