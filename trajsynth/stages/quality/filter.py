"""``filter``: the reference quality filter, each rule named and switchable
(:mod:`trajsynth.quality.filters` holds the rules, their order and thresholds).

For each batch:

1) evaluate every enabled rule on whole columns (rows never scored are scored here, see
   :func:`~trajsynth.quality.filters.rule_failures`);
2) keep the rows no rule rejects; with ``keep_rejected`` the others go to the ``rejected``
   output unchanged;
3) count, per rule, the rows it dropped first (``dropped.<rule>``, these add up to the rows
   dropped) and every row it rejects (``failing.<rule>``); the runner stores the counts in the
   manifest and ``trajsynth filter`` prints them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from ...quality.filters import FilterRules, apply_filter
from ..context import Context
from ..kinds import Emit, MapStage, Output, StageConfig
from ..registry import register

__all__ = ["Filter", "FilterConfig"]


class FilterConfig(FilterRules, StageConfig):
    keep_rejected: bool = Field(
        False, description="Write the rejected rows to the `rejected` output too."
    )


@register
class Filter(MapStage[FilterConfig]):
    """Drop invalid, incoherent, too-easy, inefficient, low-quality and unverified rows
    (per-rule counts)."""

    name = "filter"
    outputs = ("main", "rejected")

    def process(self, batches: Iterator[pa.RecordBatch], ctx: Context) -> Iterator[Output]:
        cfg = self.config
        rules = FilterRules(**{k: getattr(cfg, k) for k in FilterRules.model_fields})
        ctx.metrics.set("rules", rules.enabled())
        ctx.metrics.set(
            "thresholds",
            {
                "min_quality": rules.min_quality,
                "min_coherence": rules.min_coherence,
                "min_turns": rules.min_turns,
                "max_calls": rules.max_calls,
            },
        )
        for batch in batches:
            # 1) every enabled rule
            outcome = apply_filter(batch, rules)
            # 2) keep / reject
            keep = pa.array(outcome.keep)
            yield batch.filter(keep)
            if cfg.keep_rejected:
                yield Emit("rejected", batch.filter(pc.invert(keep)))
            # 3) counts
            kept = int(outcome.keep.sum())
            ctx.metrics.inc("rows_in", batch.num_rows)
            ctx.metrics.inc("kept", kept)
            ctx.metrics.inc("dropped", batch.num_rows - kept)
            for rule, n in outcome.dropped.items():
                ctx.metrics.inc(f"dropped.{rule}", n)
            for rule, n in outcome.failing.items():
                ctx.metrics.inc(f"failing.{rule}", n)
            if outcome.computed:
                ctx.metrics.inc("scored_here", outcome.computed)
            ctx.advance(batch.num_rows)
