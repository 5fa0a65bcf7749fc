"""``expire``: rows whose environment changed since they were played, replayed now; those that
no longer hold are dropped (or relabelled).

A row records the version of its domain's environment (``env_version``: a hash of the tool
specs, the code that runs them and their data, :meth:`trajsynth.envs.factory.EnvFactory.version`).
For each row, against the environment of this run's settings (``defaults.env``):

- same version: the row still holds as it was verified; it passes unchanged;
- another version (or none recorded, with ``unrecorded: replay``): its calls are replayed in
  order in a fresh environment (:func:`~trajsynth.stages.common.replay.replay_calls`: every
  recorded tool result must be what the tool returns now), and where the row has ground truth
  with a gold final state, the final state must still be the gold's
  (:func:`~trajsynth.envs.verifiers.final_state_match`). A row that holds passes with the new
  ``env_version`` (and ``extra["expire"]``: the version it had); one that does not goes to the
  ``expired`` output with ``failure_layer: expired`` and the reason, or with ``relabel: true``
  stays on the main output marked ``success: false``;
- a domain this run has no environment for: the row passes unchanged (counted ``no_env``).

Counts: ``rows``, ``current``, ``replayed``, ``held``, ``expired``, ``no_env``.
``trajsynth expire PATH --out OUT`` runs it on shards.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ...core.schema import Trajectory
from ..common.replay import final_state_holds, replay_calls
from ..context import Context
from ..kinds import Emit, RowStage, StageConfig
from ..registry import register

__all__ = ["Expire", "ExpireConfig"]


class ExpireConfig(StageConfig):
    relabel: bool = Field(
        False,
        description="Keep rows that no longer hold on the main output, marked success: false "
        "(failure_layer: expired), instead of sending them to the `expired` output.",
    )
    unrecorded: Literal["replay", "keep"] = Field(
        "replay",
        description="Rows with no env_version (written before it was recorded): replay them "
        "like changed ones, or keep them as they are.",
    )
    final_state: bool = Field(
        True, description="Also require the gold final state where the row's task has one."
    )


@register
class Expire(RowStage[ExpireConfig]):
    """Replay rows whose environment changed since they were played; drop or relabel those
    that no longer hold."""

    name = "expire"
    writes = ("env_version", "success", "failure_layer", "failure_reason")
    outputs = ("main", "expired")
    concurrency = 32

    def process_row(self, row: Trajectory, ctx: Context) -> list[Any]:
        cfg = self.config
        ctx.metrics.inc("rows")
        try:
            current = ctx.envs.version(row.domain)
        except Exception:  # no environment for this domain here: nothing to compare
            ctx.metrics.inc("no_env")
            return [row]
        if row.env_version == current or (not row.env_version and cfg.unrecorded == "keep"):
            ctx.metrics.inc("current")
            return [row]
        ctx.metrics.inc("replayed")
        gt = row.ground_truth
        ok, reason = replay_calls(row, gt, ctx.envs)
        if ok and cfg.final_state and gt is not None and gt.final_state_hash is not None:
            ok, reason = final_state_holds(row, gt, ctx.envs)
        note = {"expire": {"from": row.env_version or None, "to": current}}
        extra = {**row.extra, **note} if isinstance(row.extra, dict) else note
        if ok:
            ctx.metrics.inc("held")
            return [row.model_copy(update={"env_version": current, "extra": extra})]
        ctx.metrics.inc("expired")
        expired = row.model_copy(
            update={
                "env_version": current,
                "success": False,
                "failure_layer": "expired",
                "failure_reason": f"the environment changed and the row no longer holds: {reason}",
                "extra": extra,
            }
        )
        return [expired] if cfg.relabel else [Emit("expired", [expired])]
