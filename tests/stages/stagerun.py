"""Run one stage on in-memory rows and collect what it wrote, by output; for the stage tests
(not part of the package)."""

from __future__ import annotations

from typing import Any

from trajsynth.core import Trajectory, to_batch, to_records
from trajsynth.stages import Context, Emit, build_stage


def run_outputs(
    name: str, cfg: dict[str, Any], rows: list[Trajectory], ctx: Context
) -> dict[str, list[Trajectory]]:
    """{output name: rows} of stage ``name`` (``main`` for the main output) on ``rows``."""
    stage = build_stage(name, cfg)
    stage.setup(ctx)
    out: dict[str, list[Trajectory]] = {}
    for item in stage.process(iter([to_batch(rows)]), ctx):
        key, data = (item.name, item.data) if isinstance(item, Emit) else ("main", item)
        out.setdefault(key, []).extend(data if isinstance(data, list) else to_records(data))
    return out
