"""``label_noise``: a teacher whose labels are wrong at a known rate, the truth kept aside, so
that a label-verification method (LoopTool's JGLV, arXiv:2511.09148) has real errors to find
and its precision and recall can be measured.

A real generator's wrong label passes every rule: it is a valid call that executes, reaches
a consistent state and ends in a consistent answer, but it is not what the user asked. The
seeded simulated teacher never makes that kind of error, so this stage makes it, per row:

1) draw, from the row's id (seeded: the same rows on every run and sharding), whether the
   row's label is made wrong, with probability ``rate``;
2) the task's last step with calls (no later call depends on what it changes) gets one error
   (:func:`~trajsynth.stages.common.label_noise.corrupt_step`: a wrong ``value``, a
   ``swap`` of two arguments, a ``missing`` optional argument), the first of a seeded
   random order that still executes without an error;
3) the row's ground truth takes the wrong step (and the final state it reaches, so that
   ``verify`` passes it, as it would pass the generator's own wrong label), and its
   conversation is rebuilt by executing the new gold calls (the system prompt and the user's
   request are kept: the request still asks for the clean calls);
4) ``extra["label_noise"]`` records the truth: the flattened step index, kind, call and
   argument, the ``clean`` and the ``noisy`` calls. It never reaches what a student reads
   (messages, tools), and rows derived later (EDDE, ECHO) do not inherit it.

Rows keep their id and provenance (they are the teacher's rows, with a wrong label). A row
drawn for noise whose last step cannot be made wrong and still execute is left clean and
counted (``not_corruptible``). Metrics: ``rows``, ``injected``, ``injected.<kind>``,
``not_corruptible``.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Literal

from pydantic import Field

from ..core.ids import seed_from
from ..core.schema import Trajectory
from ..core.task import GroundTruth
from .common.label_noise import KINDS, NOISE_KEY, corrupt_step, last_call_step, step_index
from .common.looptool import calls_json, run_gold
from .context import Context
from .kinds import RowStage, StageConfig
from .registry import register

__all__ = ["LabelNoise", "LabelNoiseConfig"]


class LabelNoiseConfig(StageConfig):
    rate: float = Field(
        0.1,
        ge=0,
        le=1,
        description="Share of rows whose label is made wrong (LoopTool reports no measured "
        "rate for its generator; 0.1 by default).",
    )
    kinds: list[Literal["value", "swap", "missing"]] = Field(
        default_factory=lambda: list(KINDS),
        min_length=1,
        description="Kinds of error to make: a wrong value, two arguments swapped, an "
        "optional argument left out.",
    )


@register
class LabelNoise(RowStage[LabelNoiseConfig]):
    """Wrong labels at a seeded rate (value, swap, missing), the truth in extra.label_noise."""

    name = "label_noise"

    def process_row(self, row: Trajectory, ctx: Context) -> Iterable[Trajectory]:
        cfg = self.config
        ctx.metrics.inc("rows")
        # 1) the draw
        r = random.Random(seed_from(ctx.seed, ctx.stage_id, "label_noise", row.id))
        gt = GroundTruth.from_json(row.ground_truth)
        where = last_call_step(gt) if gt is not None else None
        if r.random() >= cfg.rate or gt is None:
            yield row
            return
        # 2) the error
        noisy = None
        if where is not None:
            t, s = where
            clean = gt.turns[t].steps[s]
            for calls, record in corrupt_step(clean, row.tools, r, cfg.kinds):
                turns = [turn.model_copy(deep=True) for turn in gt.turns]
                steps = list(turns[t].steps)
                steps[s] = calls
                turns[t] = turns[t].model_copy(update={"steps": steps})
                new_gt = gt.model_copy(update={"turns": turns, "final_state_hash": None})
                # 3) the conversation that follows the wrong label
                rebuilt = run_gold(row, new_gt, ctx, rehash=True)
                if rebuilt is None:
                    continue
                record = {
                    "step": step_index(gt, t, s),
                    **record,
                    "clean": calls_json(clean),
                    "noisy": calls_json(calls),
                }
                # 4) the truth, kept aside
                noisy = row.derive(
                    ground_truth=rebuilt.ground_truth,
                    messages=rebuilt.messages,
                    extra={**(row.extra or {}), NOISE_KEY: record},
                )
                ctx.metrics.inc("injected")
                ctx.metrics.inc(f"injected.{record['kind']}")
                break
        if noisy is None:
            ctx.metrics.inc("not_corruptible")
            yield row
            return
        yield noisy
