r"""``trajsynth import``: bring trajectories written by others into trajsynth shards.

    trajsynth import tau-trajectories \
        tau-bench/historical_trajectories/gpt-4o-airline.json --out data/tau
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from ..core.errors import InputNotFoundError, UserError
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


def _report(rows: list, skipped: dict[str, int], src: Path, out: Path, what: str) -> None:
    from ..store.importers import write_rows

    skipped = dict(skipped)
    dropped = skipped.pop("unstated_optional", 0)  # arguments, not instructions
    passed = ", ".join(f"{k} {v}" for k, v in sorted(skipped.items()))
    if not rows:
        raise UserError(
            f"no {what} imported from {src}" + (f" (passed over: {passed})" if passed else ""),
            hint=f"expected {what} laid out as the source project ships them",
        )
    shards = write_rows(rows, out)
    plural = "s" if len(shards) != 1 else ""
    console.print(
        f"{len(rows):,} {what} → {out} ({len(shards)} shard{plural})"
        + (f"; passed over: {passed}" if passed else "")
        + (f"; {dropped} optional arguments the request never states dropped" if dropped else "")
    )


@import_app.command("apibank-dialogues")
def apibank_dialogues_cmd(
    src: Annotated[Path, typer.Argument(help="An API-Bank dialogue (.jsonl) or a folder of them.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder.")] = ...,  # type: ignore[assignment]
    apis: Annotated[
        Path | None,
        typer.Option(help="API-Bank's level-1-api.json (found in a folder above SRC)."),
    ] = None,
) -> None:
    """Import API-Bank's level-1 dialogues, one row each.

    Each row holds the dialogue as people wrote it (requests, the assistant's questions, the
    calls with their recorded results) and the APIs it calls as tools.
    """
    from ..envs.importers import import_apibank
    from ..store.apibank_dialogues import apibank_dialogues, find_apis

    if not src.exists():
        raise InputNotFoundError(f"{src} does not exist")
    toolset = import_apibank(apis or find_apis(src if src.is_dir() else src.parent))
    tools = {spec.original_name(): spec.to_openai() for spec in toolset.tools}
    rows, skipped = apibank_dialogues(src, tools)
    _report(rows, dict(skipped), src, out, "dialogues")


@import_app.command("toolalpaca-answers")
def toolalpaca_answers_cmd(
    src: Annotated[
        Path, typer.Argument(help="ToolAlpaca's eval_*.json, or the folder holding them.")
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder.")] = ...,  # type: ignore[assignment]
) -> None:
    """Import ToolAlpaca's instructions and first calls.

    One row per instruction: the instruction, the API's functions as tools and the first
    calls of the golden answer (nothing was run: success is left unset).
    """
    from ..envs.importers import import_toolalpaca
    from ..store.toolalpaca_answers import toolalpaca_answers

    toolset = import_toolalpaca(src)
    tools: dict[str, dict[str, dict]] = {}
    for spec in toolset.tools:
        tools.setdefault(str(spec.extra.get("api", "")), {})[spec.original_name()] = (
            spec.to_openai()
        )
    rows, skipped = toolalpaca_answers(src, tools)
    _report(rows, dict(skipped), src, out, "instructions")
