"""``label_noise``: a teacher whose labels are wrong at a known rate, the truth kept aside, so
that a label-verification method (LoopTool's JGLV, arXiv:2511.09148) has real errors to find
and its precision and recall can be measured.

A real generator's wrong label passes every rule: it is a valid call that executes, reaches
a consistent state and ends in a consistent answer, but it is not what the user asked. The
seeded simulated teacher never makes that kind of error, so this stage makes it:

1) the rows in a seeded order of their ids (the same rows on every run, whatever the input
   order or sharding), and as many of them as ``rate`` asks for (``round(rate × rows)``);
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

Rows keep their id, order and provenance (they are the teacher's rows, with a wrong label).
A row whose last step cannot be made wrong and still execute is left clean and counted
(``not_corruptible``), and the next row in the order is taken instead. Metrics: ``rows``,
``injected``, ``injected.<kind>``, ``not_corruptible``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Literal

import pyarrow as pa
from pydantic import Field

from ...core.batch import to_records
from ...core.ids import seed_from, stable_hash
from ...core.schema import Trajectory
from ..common.label_noise import (
    KINDS,
    NOISE_KEY,
    corrupt_step,
    last_call_step,
    noise_of,
    step_index,
)
from ..common.looptool import calls_json, run_gold
from ..context import Context
from ..kinds import GlobalStage, Output, StageConfig
from ..registry import register

__all__ = ["LabelNoise", "LabelNoiseConfig"]


class LabelNoiseConfig(StageConfig):
    rate: float = Field(
        0.1,
        ge=0,
        le=1,
        description="Share of rows whose label is made wrong, exactly (LoopTool reports no "
        "measured rate for its generator; 0.1 by default).",
    )
    kinds: list[Literal["value", "swap", "missing"]] = Field(
        default_factory=lambda: list(KINDS),
        min_length=1,
        description="Kinds of error to make: a wrong value, two arguments swapped, an "
        "optional argument left out.",
    )


@register
class LabelNoise(GlobalStage[LabelNoiseConfig]):
    """Wrong labels at an exact seeded rate (value, swap, missing), the truth in
    extra.label_noise."""

    name = "label_noise"

    def process(self, batches: Iterator[pa.RecordBatch], ctx: Context) -> Iterator[Output]:
        cfg = self.config
        rows = [r for b in batches for r in to_records(b)]
        ctx.metrics.inc("rows", len(rows))
        # 1) the rows, in a seeded order of their ids; as many as the rate asks for
        target = round(cfg.rate * len(rows))
        order = sorted(
            range(len(rows)), key=lambda i: stable_hash([ctx.seed, ctx.stage_id, rows[i].id])
        )
        injected = 0
        for i in order:
            if injected == target:
                break
            wrong = self._corrupt(rows[i], ctx)
            if wrong is None:
                ctx.metrics.inc("not_corruptible")
                continue
            rows[i] = wrong
            injected += 1
            noise = noise_of(wrong.extra)
            assert noise is not None, "corrupt_step marks the rows it corrupts"
            ctx.metrics.inc(f"injected.{noise['kind']}")
        ctx.metrics.inc("injected", injected)
        if injected < target:
            ctx.log.warning(
                "label_noise: %d wrong labels of the %d asked for (the other rows cannot be "
                "made wrong and still execute)",
                injected,
                target,
            )
        if rows:
            yield rows

    def _corrupt(self, row: Trajectory, ctx: Context) -> Trajectory | None:
        """Steps 2-4 for one row, or None when its last call step cannot be made wrong."""
        gt = row.ground_truth
        where = last_call_step(gt) if gt is not None else None
        if gt is None or where is None:
            return None
        r = random.Random(seed_from(ctx.seed, ctx.stage_id, "label_noise", row.id))
        t, s = where
        clean = gt.turns[t].steps[s]
        # 2) the error: the first of a seeded order that still executes
        for calls, record in corrupt_step(clean, row.tools, r, self.config.kinds):
            turns = [turn.model_copy(deep=True) for turn in gt.turns]
            steps = list(turns[t].steps)
            steps[s] = calls
            turns[t] = turns[t].model_copy(update={"steps": steps})
            new_gt = gt.model_copy(update={"turns": turns, "final_state_hash": None})
            # 3) the conversation that follows the wrong label
            rebuilt = run_gold(row, new_gt, ctx, rehash=True)
            if rebuilt is None:
                continue
            # 4) the truth, kept aside
            truth = {
                "step": step_index(gt, t, s),
                **record,
                "clean": calls_json(clean),
                "noisy": calls_json(calls),
            }
            return row.derive(
                ground_truth=rebuilt.ground_truth,
                messages=rebuilt.messages,
                extra={**(row.extra or {}), NOISE_KEY: truth},
            )
        return None
