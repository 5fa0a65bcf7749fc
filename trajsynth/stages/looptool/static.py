"""``looptool_static``: the static-data baseline LoopTool is measured against (Zhang et al. 2025,
"LoopTool: Closing the Data–Training Loop for Robust LLM Tool Calls", arXiv:2511.09148): the
same student trained for the same budget on as many rows of plain teacher rejection-sampling
data as the loop trained on, so the report can say what the loop's adaptive data bought. The
baseline may start from the checkpoint of an early round (``after_round``: the loop and the
baseline then share that start and differ only in the data that follows it).

Inputs (``from: [POOL, LOOP_DATA]``): the static pool (rows made by the stage named ``pool``,
e.g. a ``rejection_sampling`` stage on the training tasks) and everything the loop assembled
(``round.all``: the seed data and each round's next dataset).

1) split the rows by the stage that made them: ``stage_id == pool`` is the static pool, the
   rest is loop data;
2) the size to match: the loop data the student trained on after round ``after_round``: the
   seed rows (trained on in round 1; counted only when ``after_round`` is 0) and the datasets
   rounds ``after_round``…n−1 assembled (round k's dataset is trained on in round k+1; the
   last round's is never trained on);
3) keep that many pool rows, chosen by a seeded hash of their id (the same rows on every rerun);
   a pool smaller than that is used whole, and the shortfall is logged and put in the metrics
   (``loop_rows``, ``static_rows``, ``shortfall``), which the report prints.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pydantic import Field

from ...core.batch import to_records
from ...core.errors import DataError
from ...core.extras import LoopToolOrigin, get
from ...core.ids import stable_hash
from ...core.schema import Trajectory
from ..context import Context
from ..kinds import GlobalStage, Output, StageConfig
from ..registry import register

__all__ = ["LoopToolStatic", "LoopToolStaticConfig", "trained_rows"]


class LoopToolStaticConfig(StageConfig):
    pool: str = Field(
        description="Stage id whose rows are the static pool (e.g. a rejection_sampling stage)."
    )
    after_round: int = Field(
        0,
        ge=0,
        description="The baseline starts from this round's checkpoint (0: the base model); "
        "match the rows the loop trained on after it.",
    )


def trained_rows(rows: list[Trajectory], after_round: int = 0) -> int:
    """Step 2: rows of the loop's data trained on after round ``after_round`` (seed rows count
    as round 0's dataset; the last round's dataset is never trained on)."""
    rounds = [lt.iteration if (lt := get(r.extra, LoopToolOrigin)) else 0 for r in rows]
    last = max(rounds, default=0)
    return sum(1 for k in rounds if after_round <= k < last or (k == 0 and after_round == 0))


@register
class LoopToolStatic(GlobalStage[LoopToolStaticConfig]):
    """LoopTool's static baseline: as many teacher rows as the loop trained on."""

    name = "looptool_static"
    inputs_range = (2, None)

    def process(self, batches: Iterator[pa.RecordBatch], ctx: Context) -> Iterator[Output]:
        cfg = self.config
        # 1) pool and loop data
        pool: list[Trajectory] = []
        loop: list[Trajectory] = []
        for row in (r for b in batches for r in to_records(b)):
            (pool if row.stage_id == cfg.pool else loop).append(row)
        if not pool:
            raise DataError(
                f"stage {ctx.stage_id!r}: no rows from the pool stage {cfg.pool!r} "
                "(give it as the first input, with `pool:` naming it)"
            )
        # 2) the size to match
        n = trained_rows(loop, cfg.after_round)
        # 3) a seeded, stable choice
        ranked = sorted(pool, key=lambda r: stable_hash([ctx.seed, ctx.stage_id, r.id]))
        chosen = ranked[:n]
        shortfall = n - len(chosen)
        if shortfall:
            ctx.log.warning(
                "static pool %r has %d rows for the %d the loop trained on: using all of them",
                cfg.pool,
                len(pool),
                n,
            )
        ctx.metrics.set("loop_rows", n)
        ctx.metrics.set("static_rows", len(chosen))
        ctx.metrics.set("shortfall", shortfall)
        if chosen:
            yield chosen
