"""``single_turn``: each trajectory's first decision as a training row of its own.

Single-turn benchmarks (BFCL's simple, multiple, parallel, irrelevance and live categories)
score one thing: given the offered functions and one request, the first assistant message —
the right call or calls with the right arguments, or no call when no function fits or a
required value is missing. A multi-turn trajectory spends most of its tokens on tool results,
later turns and the final answer; a student trained on a budget of tokens (a small model on a
CPU) sees a few hundred such rows and few of the first decisions that a benchmark asks for.
This stage makes the first decisions cheap to train on:

1) each row's opening (system prompt, the user's request: every message before the first
   assistant message) and that first assistant message form the view; a row without an
   assistant message is passed over (``no_assistant``);
2) the view is classed by its decision: ``none`` (no call: an answer or a question),
   ``one`` (one call) or ``several`` (calls in one turn);
3) it is emitted ``repeat[class]`` times (default once each; e.g. ``{none: 3}`` to give
   no-call decisions a larger share when the rows are mostly calls), with ids derived from
   the row's id, ``parent_ids`` naming it, and ``extra["single_turn"]`` saying the class and
   copy; step-level fields (rewards, flags, state changes) keep the first step's values;
4) with ``keep_rows`` the original rows flow on too (after their views).

Metrics: ``rows``, ``views``, ``views.<class>``, ``no_assistant``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import pyarrow as pa
from pydantic import Field, field_validator

from ...core.batch import to_records
from ...core.schema import Trajectory
from ..context import Context
from ..kinds import MapStage, Output, StageConfig
from ..registry import register

__all__ = ["SingleTurn", "SingleTurnConfig", "decision_class", "first_decision"]

Decision = Literal["none", "one", "several"]
CLASSES: tuple[Decision, ...] = ("none", "one", "several")


class SingleTurnConfig(StageConfig):
    repeat: dict[str, int] = Field(
        default_factory=dict,
        description="Copies of a view per decision class (none, one, several); a class not "
        "named is emitted once, 0 drops it.",
    )
    keep_rows: bool = Field(False, description="Pass the original rows on too.")

    @field_validator("repeat")
    @classmethod
    def _known(cls, value: dict[str, int]) -> dict[str, int]:
        unknown = sorted(set(value) - set(CLASSES))
        if unknown:
            raise ValueError(f"unknown decision class {unknown}; the classes: {list(CLASSES)}")
        if any(n < 0 for n in value.values()):
            raise ValueError("repeat counts are 0 or more")
        return value


def decision_class(row: Trajectory) -> Decision:
    """The class of a view's (or a row's last) assistant message."""
    calls = len(row.messages[-1].tool_calls or [])
    return "none" if calls == 0 else "one" if calls == 1 else "several"


def first_decision(row: Trajectory) -> Trajectory | None:
    """Step 1: the opening and the first assistant message (None: no assistant message)."""
    first = next((i for i, m in enumerate(row.messages) if m.role == "assistant"), None)
    if first is None:
        return None
    return row.derive(  # step-level fields keep the first assistant step's values
        messages=row.messages[: first + 1],
        step_rewards=row.step_rewards[:1],
        step_flags=row.step_flags[:1],
        step_diffs=row.step_diffs[:1],
    )


@register
class SingleTurn(MapStage[SingleTurnConfig]):
    """Each row's opening and first assistant message as a row of its own."""

    name = "single_turn"

    def process(self, batches: Iterator[pa.RecordBatch], ctx: Context) -> Iterator[Output]:
        repeat = self.config.repeat
        for batch in batches:
            out: list[Trajectory] = []
            for row in to_records(batch):
                ctx.metrics.inc("rows")
                view = first_decision(row)
                if view is None:
                    ctx.metrics.inc("no_assistant")
                else:
                    kind = decision_class(view)  # 2)
                    for copy in range(repeat.get(kind, 1)):  # 3)
                        out.append(
                            view.derive(
                                id=Trajectory.make_id(row.id, "single_turn", copy),
                                parent_ids=[row.id],
                                extra={
                                    **(row.extra or {}),
                                    "single_turn": {"class": kind, "copy": copy},
                                },
                            )
                        )
                        ctx.metrics.inc("views")
                        ctx.metrics.inc(f"views.{kind}")
                if self.config.keep_rows:  # 4)
                    out.append(row)
            if out:
                yield out
