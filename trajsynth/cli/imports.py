r"""``trajsynth import``: bring trajectories written by others into trajsynth shards.

    trajsynth import tau-trajectories \
        tau-bench/historical_trajectories/gpt-4o-airline.json --out data/tau
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from ..core.errors import UserError
from . import app
from ._common import console

import_app = typer.Typer(
    name="import",
    help="Import trajectories written by others as shards.",
    no_args_is_help=True,
    rich_markup_mode="rich",
)
app.add_typer(import_app, name="import", rich_help_panel="Data")


@import_app.command("tau-trajectories")
def tau_trajectories_cmd(
    src: Annotated[Path, typer.Argument(help="A tau-bench historical trajectories JSON file.")],
    # typer marks a required option by the default ``...``
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder.")] = ...,  # type: ignore[assignment]
    tools: Annotated[
        Path | None, typer.Option(help="The domain's tools_openai.json (found next to SRC).")
    ] = None,
    domain: Annotated[
        Literal["airline", "retail"] | None,
        typer.Option(help="The tau-bench domain (default: from the file name)."),
    ] = None,
) -> None:
    """Import tau-bench runs, one row each.

    Each row holds the run's messages, tools, gold actions, tau-bench's reward and the pass
    counts of its task.
    """
    from ..store.importers import tau_trajectories, write_rows

    rows = tau_trajectories(src, tools=tools, domain=domain)
    if not rows:
        raise UserError(
            f"no trajectories imported from {src}",
            hint="expected tau-bench historical trajectories: a JSON list of "
            "{task_id, trial, reward, info, traj}",
        )
    shards = write_rows(rows, out)
    ok = sum(1 for r in rows if r.success)
    console.print(
        f"{len(rows):,} trajectories ({ok:,} successes, {len({r.task_id for r in rows}):,} "
        f"tasks) → {out} ({len(shards)} shard{'s' if len(shards) != 1 else ''})"
    )
