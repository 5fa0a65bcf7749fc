"""``trajsynth arena``: ASTRA-style arena packages (:mod:`trajsynth.envs.arena`).

    trajsynth arena pack runs/demo/rollouts --out arenas/ [--code table|reference] [--distractors 3]
    trajsynth arena check arenas/          # checksums, gold reproduced, gold reward 1

``pack`` reads trajectory shards: rows that already carry a package (the ``arena`` stage's
output) are written as they are; other verified rows are packaged here. Each package is one
``<uuid>.json`` file; ``index.json`` lists them. A trainer reads such a folder with
:func:`trajsynth.envs.arena.arena_training_set` (task rows, an environment per episode, the
package's reward).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich.table import Table

from ..core.errors import UserError
from . import app
from ._common import console

arena_app = typer.Typer(
    name="arena",
    help="Package verified tasks as self-contained RL arenas.",
    no_args_is_help=True,
    rich_markup_mode="rich",
)
app.add_typer(arena_app, name="arena", rich_help_panel="Tools and environments")


@arena_app.command("pack")
def pack(
    path: Annotated[Path, typer.Argument(help="Trajectory shards (file, folder or glob).")],
    # typer marks a required option by the default ``...``
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for the packages.")] = ...,  # type: ignore[assignment]
    code: Annotated[
        Literal["table", "reference"],
        typer.Option(help="table (generated mock-data code) or reference (built-in tools)."),
    ] = "table",
    distractors: Annotated[int, typer.Option(help="Look-alike tools added per arena.")] = 3,
    limit: Annotated[int | None, typer.Option(help="Pack at most this many.")] = None,
) -> None:
    """Package verified trajectories as arenas (ASTRA-style).

    One JSON file each; the arena's code is checked in the sandbox against the gold outputs,
    and the rows that fail are listed by reason.
    """
    from ..envs.arena import ArenaError, ArenaPackage, pack_arena
    from ..envs.sandbox import Sandbox
    from ..store.shards import read_records

    rows = read_records(path)
    if not rows:
        raise UserError(f"{path} holds no rows")
    out.mkdir(parents=True, exist_ok=True)
    reasons: Counter[str] = Counter()
    index: list[dict[str, Any]] = []
    with Sandbox() as sandbox:
        for row in rows:
            if limit is not None and len(index) >= limit:
                break
            try:
                given = row.extra.get("arena") if isinstance(row.extra, dict) else None
                if isinstance(given, dict):
                    package = ArenaPackage.model_validate(given)
                    if package.checksum != package.digest():
                        raise ArenaError(f"row {row.id}: its arena package was modified")
                else:
                    package = pack_arena(
                        row,
                        code=code,
                        distractors=distractors,
                        sandbox=sandbox,
                    )
            except ArenaError as exc:
                reasons[exc.message.split(": ", 1)[-1][:80]] += 1
                continue
            (out / f"{package.uuid}.json").write_text(package.model_dump_json(indent=1) + "\n")
            index.append(
                {
                    "uuid": package.uuid,
                    "domain": package.domain,
                    "sub_goals": len(package.sub_goals),
                    "tools": len(package.tools),
                    "implementation": package.implementation.kind,
                    "source_row": package.source.get("row_id"),
                }
            )
    (out / "index.json").write_text(json.dumps(index, indent=1) + "\n")
    console.print(f"{len(index):,} arenas → {out}  ({sum(reasons.values())} rows not packed)")
    for why, n in reasons.most_common(8):
        console.print(f"  [dim]{n:>5}[/] {why}")
    if not index:
        raise UserError(f"no row of {path} could be packed", hint="pack verified trajectories")


@arena_app.command("check")
def check(
    folder: Annotated[Path, typer.Argument(help="A folder of arena packages.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Verify arena packages (checksums, gold reward 1).

    For every package: its checksum, the gold calls reproduced by its tools, a gold reward
    of 1.
    """
    from ..envs.arena import arena_reward, load_arenas, validate_package
    from ..envs.sandbox import Sandbox

    packages = load_arenas(folder)
    rows = []
    with Sandbox() as sandbox:
        for p in packages:
            validate_package(p, sandbox=sandbox)
            gold = [(g.call.name, g.call.arguments) for g in p.sub_goals]
            rows.append(
                {
                    "uuid": p.uuid,
                    "domain": p.domain,
                    "implementation": p.implementation.kind,
                    "sub_goals": len(p.sub_goals),
                    "tools": len(p.tools),
                    "distractors": len(p.distractors),
                    "gold_reward": arena_reward(p, gold).reward,
                }
            )
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    table = Table(title=f"{len(rows)} arenas in {folder}: all verified", title_justify="left")
    for col in ("uuid", "domain", "implementation", "sub_goals", "tools", "gold_reward"):
        table.add_column(col)
    for r in rows:
        table.add_row(*(str(r[c]) for c in ("uuid", "domain", "implementation", "sub_goals",
                                              "tools", "gold_reward")))  # fmt: skip
    console.print(table)
