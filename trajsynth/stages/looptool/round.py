"""``looptool``: the round boundary of LoopTool's closed loop (Zhang et al. 2025, "LoopTool: Closing
the Data–Training Loop for Robust LLM Tool Calls", arXiv:2511.09148): the next round's dataset

    D_{j+1} = D_ES ∪ D_EE ∪ H_j ∪ D_seed_new

from EDDE's expanded samples (D_ES), JGLV's relabelled samples (D_EE), GCP's high-perplexity
mastered samples (H_j) and fresh seed samples (for diversity) — plus, when the pipeline runs
them between iterations, ECHO's hindsight rewrites of the student's failed episodes and
HardGen's hard samples. The loop itself is a pipeline ``loop:`` block
(``pipelines/looptool.yaml``): train → ``gcp`` → ``jglv`` → ``edde`` (→ ``echo``,
``hardgen``) → ``looptool``, the model and the data carried from one iteration to the next.

1) read every input row and name its origin from its provenance: ``edde`` rows are
   *expanded*, ``jglv`` rows *corrected*, rows GCP marked ``hard`` *high_ppl*, ``echo`` rows
   *hindsight*, ``hardgen`` rows *hard*, all others *seed*;
2) one new row per distinct input (first one wins), stamped with this iteration:
   ``extra["looptool"] = {"origin", "iteration"}``, a new id (the same sample may come back in
   a later round as a new row of that round) and ``iteration``; GCP's, JGLV's and EDDE's
   annotations stay in ``extra`` as provenance;
3) counts by origin into the metrics (``counts.<origin>``), and the total.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pyarrow as pa

from ...core.batch import to_records
from ...core.extras import LoopToolOrigin, with_
from ...core.ids import stable_id
from ...core.schema import Trajectory
from ..common.looptool import ORIGINS, origin_of
from ..context import Context
from ..kinds import GlobalStage, Output, StageConfig
from ..registry import register

__all__ = ["LoopToolRound"]


@register
class LoopToolRound(GlobalStage[StageConfig]):
    """LoopTool round boundary: next data = expanded ∪ corrected ∪ high-PPL ∪ fresh seed
    (∪ ECHO hindsight ∪ HardGen hard, when configured)."""

    name = "looptool"
    inputs_range = (1, None)

    def process(self, batches: Iterator[pa.RecordBatch], ctx: Context) -> Iterator[Output]:
        seen: set[str] = set()
        out: list[Trajectory] = []
        counts: Counter[str] = Counter()
        for row in (r for b in batches for r in to_records(b)):
            if row.id in seen:
                continue
            seen.add(row.id)
            # 1) origin; 2) the new row
            origin = origin_of(row)
            counts[origin] += 1
            extra = with_(row.extra, LoopToolOrigin(origin=origin, iteration=ctx.iteration))
            out.append(
                row.derive(
                    id=stable_id("looptool", row.id, ctx.iteration),
                    iteration=ctx.iteration,
                    extra=extra,
                )
            )
        # 3) counts
        for origin in ORIGINS:
            ctx.metrics.set(f"counts.{origin}", counts.get(origin, 0))
        ctx.metrics.set("rows", len(out))
        if out:
            yield out
