"""Shared CLI pieces: consoles, the rich progress reporter, the run summary."""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from ..pipeline.runner import Reporter, RunResult
from ..pipeline.spec import ResolvedPipeline
from ..store.manifest import StageState

__all__ = ["RichReporter", "console", "err_console", "llm_usage_table", "summary_table"]

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


class RowsPerSecond(ProgressColumn):
    """rows/s over the task's elapsed time."""

    def render(self, task: Task) -> Text:
        elapsed = task.elapsed or 0.0
        rate = task.completed / elapsed if elapsed > 0 else 0.0
        return Text(f"{rate:,.0f} rows/s", style="cyan")


class RichReporter(Reporter):
    """Progress bars with rows/s for each stage, then a one-line result per stage.

    On a terminal every stage gets a live bar; elsewhere (CI logs, pipes) only the result
    lines are printed, so logs stay readable.
    """

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self.live = err_console.is_terminal and not quiet
        self.progress = Progress(
            TextColumn("[bold]{task.fields[stage]}[/] [dim]{task.fields[uses]}[/]"),
            BarColumn(),
            MofNCompleteColumn(),
            RowsPerSecond(),
            TimeElapsedColumn(),
            TextColumn("[yellow]{task.fields[note]}"),
            console=err_console,
            transient=False,
            disable=not self.live,
        )
        self.tasks: dict[str, TaskID] = {}
        self.started: dict[str, float] = {}

    def run_started(self, pipeline: ResolvedPipeline, run_dir: Path) -> None:
        if not self.quiet:
            err_console.print(f"[bold]{pipeline.name}[/] → {run_dir}")
        self.progress.start()

    def stage_started(
        self, stage_id: str, uses: str, kind: str, total_rows: int | None, note: str
    ) -> None:
        self.started[stage_id] = time.perf_counter()
        self.tasks[stage_id] = self.progress.add_task(
            "", total=total_rows, stage=stage_id, uses=uses, note=note
        )

    def advance(self, stage_id: str, rows: int) -> None:
        task = self.tasks.get(stage_id)
        if task is not None and rows:
            self.progress.advance(task, rows)

    def stage_finished(self, stage_id: str, state: StageState, outcome: str) -> None:
        task = self.tasks.get(stage_id)
        if task is not None:
            t = self.progress.tasks[self.tasks[stage_id]]
            self.progress.update(task, total=t.completed or t.total, note=outcome)
        if self.quiet:
            return
        rows = state.rows_out()
        # rows a judging stage kept on its main output although it found them wrong
        marked = (state.metrics.get("values", {}).get("outcome") or {}).get("failed", 0)
        note = f", {marked:,} marked failed" if marked else ""
        if outcome == "skipped":
            line = f"[dim]· {stage_id} ({state.uses}): unchanged, {rows:,} rows{note} (cached)[/]"
        else:
            secs = time.perf_counter() - self.started.get(stage_id, time.perf_counter())
            rate = (state.rows_in or rows) / secs if secs > 0 else 0
            sides = ", ".join(f"{n} {o.rows:,}" for n, o in state.outputs.items() if n != "main")
            extra = f" (+ {sides})" if sides else ""
            line = (
                f"[green]✓[/] {stage_id} ({state.uses}): {state.rows_in:,} → {rows:,} rows"
                f"{note}{extra} in {secs:.1f}s ({rate:,.0f} rows/s)"
                + (" — resumed" if outcome == "resumed" else "")
            )
        if self.live:
            self.progress.console.print(line)
        else:
            err_console.print(line)

    def run_finished(self, result: RunResult) -> None:
        self.progress.stop()

    def close(self) -> None:
        self.progress.stop()


def summary_table(result: RunResult) -> Table:
    table = Table(title=f"run {result.manifest.run_id}", title_justify="left")
    for col in ("stage", "uses", "status", "rows in", "rows out", "seconds"):
        table.add_column(col, justify="right" if col.startswith(("rows", "sec")) else "left")
    for sid, st in result.manifest.stages.items():
        status = (
            "cached" if sid in result.skipped else ("resumed" if sid in result.resumed else "ran")
        )
        table.add_row(
            sid,
            st.uses,
            status,
            f"{st.rows_in:,}",
            f"{st.rows_out():,}",
            f"{st.seconds:.1f}",
        )
    return table


def llm_usage_table(result: RunResult) -> Table | None:
    """Token usage and cost per stage and LLM role (None when no stage called an LLM); the
    caption gives the run's cost per accepted trajectory (``trajsynth.llm.usage.run_cost``).
    Roles on ``backend: openai_batch`` are priced at their batch price."""
    from ..llm.usage import llm_usage, run_cost

    rows = []
    for sid, st in result.manifest.stages.items():
        for role, u in sorted(llm_usage(st.metrics).items()):
            rows.append((sid, role, u))
    if not rows:
        return None
    cost = run_cost(result.manifest.stages)
    per = cost["cost_per_accepted"]
    caption = (
        f"cost per accepted trajectory: ${per:,.6f} "
        f"(${cost['cost_usd']:,.4f} / {cost['accepted']:,} rows of {cost['accepted_stage']})"
        if per is not None
        else "cost per accepted trajectory: - (no rows accepted)"
    )
    table = Table(title="LLM usage", title_justify="left", caption=caption, caption_justify="left")
    for col in (
        "stage",
        "role",
        "requests",
        "cached",
        "http",
        "errors",
        "prompt tok",
        "completion tok",
        "cost $",
    ):
        table.add_column(col, justify="left" if col in ("stage", "role") else "right")
    for sid, role, u in rows:
        table.add_row(
            sid,
            role,
            f"{u.get('requests', 0):,.0f}",
            f"{u.get('cache_hits', 0):,.0f}",
            f"{u.get('http_requests', 0):,.0f}",
            f"{u.get('errors', 0):,.0f}",
            f"{u.get('prompt_tokens', 0):,.0f}",
            f"{u.get('completion_tokens', 0):,.0f}",
            f"{u.get('cost_usd', 0):,.4f}",
        )
    return table
