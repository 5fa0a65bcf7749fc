"""What a run's rows came to: the verdicts on each judging stage's output, and the check of
the run's final output.

- **Per stage**: after a stage that writes ``success`` finishes, its main output's rows are
  counted by verdict (:func:`stage_outcome`: ``success`` / ``failed`` / ``unknown``) into its
  metrics (``values.outcome``), so a stage that keeps rows it judged wrong on its main output
  (TSR and director-actor rollouts, ``verify`` with ``keep_failed``) says so in the run's
  summary line ("60 → 60 rows, 12 marked failed").
- **The run**: the *final output* is the main output of the last stage in run order that makes
  rows (stages that only make artifacts, a checkpoint or a report, are passed over).
  :func:`check_final_output` counts its rows by verdict; when more than
  :data:`UNVERIFIED_LIMIT` of its rows did not verify (``success`` false, or null: never
  verified), or it is empty while stages upstream set rows aside as wrong (a ``failed``,
  ``rejected`` or ``dropped`` output), the run's data is *mostly unverified*. The runner
  records the check in the manifest (``final_output``) and writes :func:`warning_lines` and
  :func:`verdict_line` to ``logs/run.log``; ``trajsynth run`` prints them as a warning block
  on stderr and exits 1 (:class:`~trajsynth.core.errors.UnverifiedOutput`) unless the
  pipeline allows it (``defaults.allow_unverified``, ``trajsynth run --allow-unverified``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..quality.stats import outcome_counts
from ..store.layout import RunFolder
from ..store.manifest import RunManifest
from ..store.shards import iter_batches
from .spec import ResolvedPipeline

__all__ = [
    "ACCEPT_HINT",
    "ASIDE_OUTPUTS",
    "UNVERIFIED_LIMIT",
    "check_final_output",
    "final_stage",
    "stage_outcome",
    "verdict_line",
    "warning_lines",
]

#: a final output with more than this share of rows not verified is "mostly unverified"
UNVERIFIED_LIMIT = 0.5

#: how to act on a mostly unverified final output
ACCEPT_HINT = (
    "check why rows fail (their failure_layer and failure_reason), or accept this output "
    "with --allow-unverified (defaults.allow_unverified: true)"
)

#: side outputs that hold rows a stage set aside as wrong (named in the warning)
ASIDE_OUTPUTS = ("failed", "rejected", "dropped")


def stage_outcome(shards: list[Path]) -> dict[str, int]:
    """Rows of ``shards`` by verdict (only the ``success`` column is read)."""
    if not shards:
        return {"success": 0, "failed": 0, "unknown": 0}
    return outcome_counts(b.column(0) for b in iter_batches(shards, columns=["success"]))


def final_stage(pipeline: ResolvedPipeline) -> str | None:
    """The stage whose main output is the run's final output (see the module docstring)."""
    for sid in reversed(pipeline.order):
        if not type(pipeline.stages[sid].stage).makes_artifact:
            return sid
    return None


def check_final_output(
    pipeline: ResolvedPipeline,
    manifest: RunManifest,
    folder: RunFolder,
) -> dict[str, Any]:
    """The check of the run's final output, as recorded in the manifest (``{}`` when the
    pipeline makes no rows): the stage, its rows by verdict, the share not verified, whether
    that makes the output *mostly unverified*, whether the pipeline allows it, and the rows
    upstream stages set aside as wrong (``aside``: ``"stage:output"`` → rows)."""
    sid = final_stage(pipeline)
    if sid is None or sid not in manifest.stages:
        return {}
    state = manifest.stages[sid]
    main = state.outputs.get("main")
    where = folder.output(sid)
    shards = [where / s.file for s in main.shards] if main is not None else []
    counts = stage_outcome(shards)
    rows = sum(counts.values())
    aside = {
        f"{up}:{name}": out.rows
        for up in manifest.upstream(sid)
        for name, out in manifest.stages[up].outputs.items()
        if name in ASIDE_OUTPUTS and out.rows
    }
    # an output left empty by rows set aside as wrong is as unverified as it gets; one that is
    # empty because nothing was made is not this check's concern (see min_rows)
    share = (counts["failed"] + counts["unknown"]) / rows if rows else float(bool(aside))
    return {
        "stage": sid,
        "uses": state.uses,
        "rows": rows,
        **counts,
        "unverified_share": share,
        "limit": UNVERIFIED_LIMIT,
        "mostly_unverified": share > UNVERIFIED_LIMIT,
        "allowed": pipeline.spec.defaults.allow_unverified,
        "aside": aside,
    }


def warning_lines(check: dict[str, Any]) -> list[str]:
    """What is wrong with a mostly unverified final output, a headline and its details (no
    lines when it is not)."""
    if not check.get("mostly_unverified"):
        return []
    sid, rows = check["stage"], check["rows"]
    where = f"stage {sid!r} ({check['uses']})"
    if rows:
        head = f"the run's final output is mostly unverified: {check['unverified_share']:.0%} "
        head += f"of its {rows:,} rows did not pass verification"
        detail = (
            f"{where}: {check['success']:,} verified, {check['failed']:,} failed, "
            f"{check['unknown']:,} never verified (more than {check['limit']:.0%} not verified)"
        )
    else:
        head = "the run's final output is empty: no row passed"
        detail = f"{where} wrote 0 rows"
    lines = [head, detail]
    if check["aside"]:
        shown = ", ".join(f"{k} {v:,}" for k, v in check["aside"].items())
        lines.append(
            f"set aside on the way (failed, rejected, dropped): {shown} rows, with their reasons"
        )
    return lines


def verdict_line(check: dict[str, Any]) -> str:
    """Whether the run accepts a mostly unverified final output, and how to change that."""
    if check.get("allowed"):
        return "accepted: allow_unverified is set"
    return f"not accepted (exit 1): {ACCEPT_HINT}"
