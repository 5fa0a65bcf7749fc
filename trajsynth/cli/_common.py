"""Shared CLI pieces: consoles, the rich progress reporter, the run summary."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
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

__all__ = [
    "CliConsole",
    "Quiet",
    "RichReporter",
    "console",
    "err_console",
    "live_console",
    "llm_usage_table",
    "rerun_lines",
    "summary_table",
]


class CliConsole(Console):
    """The consoles every command prints through.

    A message is one line whatever the terminal's width (``soft_wrap``: a path or a count is
    never broken across lines; the terminal folds a long line itself). Tables and panels fit
    a terminal's width; written to a pipe, a file or a log (not a terminal), they get the
    width they need instead of the 80 columns Rich assumes there, so every row stays whole
    for ``grep`` and for whoever reads the log.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(highlight=False, soft_wrap=True, **kwargs)

    def print(self, *objects: Any, **kwargs: Any) -> None:
        needed = 0 if self.is_terminal else max(map(self._natural_width, objects), default=0)
        if needed <= self.width:
            super().print(*objects, **kwargs)
            return
        own = self._width  # None: follow the terminal (or COLUMNS)
        self.width = needed
        try:
            super().print(*objects, **kwargs)
        finally:
            self._width = own

    def _natural_width(self, renderable: Any) -> int:
        """Columns ``renderable`` takes unwrapped (0 for text, which soft-wraps anyway)."""
        if isinstance(renderable, str):
            return 0
        options = self.options.update_width(10_000)
        width = Measurement.get(self, options, renderable).maximum
        title = getattr(renderable, "title", None)
        if isinstance(title, str):  # a table's title wraps to the table's width
            width = max(width, Text.from_markup(title).cell_len)
        return min(width, 10_000)


#: ``--quiet``/``-q`` of the commands that show progress
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress output.")]

console = CliConsole()
err_console = CliConsole(stderr=True)


def live_console() -> Console:
    """The console of a live progress display (on a terminal only): lines wrap at the
    terminal's width, since the display redraws by counting them (a soft-wrapped line longer
    than the terminal would throw the count off)."""
    return Console(stderr=True, highlight=False)


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
            console=live_console() if self.live else err_console,
            transient=False,
            disable=not self.live,
        )
        self.tasks: dict[str, TaskID] = {}
        self.started: dict[str, float] = {}
        self.notes: dict[str, str] = {}

    def run_started(self, pipeline: ResolvedPipeline, run_dir: Path) -> None:
        if not self.quiet:
            err_console.print(f"[bold]{pipeline.name}[/] → {run_dir}")
        self.progress.start()

    def stage_started(
        self, stage_id: str, uses: str, kind: str, total_rows: int | None, note: str
    ) -> None:
        self.started[stage_id] = time.perf_counter()
        self.notes[stage_id] = note  # why it runs again: said in full on its result line
        shown = "" if not note else ("resuming" if note.startswith("it ") else "rerun")
        self.tasks[stage_id] = self.progress.add_task(
            "", total=total_rows, stage=stage_id, uses=uses, note=shown
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
            )
            why = self.notes.get(stage_id, "")
            if outcome == "resumed":
                line += " [yellow]— resumed[/]" + (f" ({escape(why)})" if why else "")
            elif why:
                line += f" [yellow]— reran: {escape(why)}[/]"
        for finding in state.findings:  # what its metrics show, though nothing failed
            line += f"\n  [yellow]![/] {escape(finding)}"
        if self.live:
            self.progress.console.print(line)
        else:
            err_console.print(line)

    def run_finished(self, result: RunResult) -> None:
        self.progress.stop()

    def close(self) -> None:
        self.progress.stop()


def summary_table(result: RunResult) -> Table:
    """One row per stage: cached, ran, reran (:func:`rerun_lines` says why) or resumed, its
    rows and seconds."""
    table = Table(title=f"run {result.manifest.run_id}", title_justify="left")
    for col in ("stage", "uses", "status", "rows in", "rows out", "seconds"):
        table.add_column(col, justify="right" if col.startswith(("rows", "sec")) else "left")
    for sid, st in result.manifest.stages.items():
        if sid in result.skipped:
            status = "cached"
        elif sid in result.resumed:
            status = "resumed"
        else:
            status = "reran" if sid in result.reasons else "ran"
        row = [sid, st.uses, status, f"{st.rows_in:,}", f"{st.rows_out():,}", f"{st.seconds:.1f}"]
        table.add_row(*row)
    return table


def rerun_lines(result: RunResult) -> list[str]:
    """One line per stage that ran before and ran again in this run, saying why (which file
    changed on disk, with its fingerprints; which input or setting): a line each, not a
    column, so that a path is never squeezed into a narrow one."""
    return [
        f"[yellow]{escape(sid)} {'resumed' if sid in result.resumed else 'reran'}:[/] {escape(why)}"
        for sid, why in result.reasons.items()
    ]


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
