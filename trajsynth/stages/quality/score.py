"""``score``: the reference quality score, rewards and coherence for every row
(:mod:`trajsynth.quality.scores` holds the formulas and their definitions).

For each row:

1) parse the conversation once (calls, results, errors, values said before each call);
2) compute efficiency, completeness and the reference quality score → ``quality_score``;
3) compute coherence (grounding, repeat-free, answer grounded), the effective-call ratio,
   error recovery, process quality and the three-part agent reward;
4) compute the penalised reward ``R_task − λ_eff·T − λ_format·1(format error)``, taking
   ``R_task`` from verify's ``reward_components["task"]`` (else from ``success``);
5) write ``reward`` (the penalised reward, or the agent reward with ``reward: agent``) and
   merge every part into ``reward_components`` next to what verify wrote.

The rows keep their id and provenance: scoring annotates a trajectory, it does not make a new
one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Literal

import numpy as np
import pyarrow as pa
from pydantic import Field

from ...core.schema import CONTEXT_FLAG
from ...quality.scores import ScoreWeights, score_conversation
from ..common.columns import replace_columns
from ..context import Context
from ..kinds import MapStage, Output, StageConfig
from ..registry import register

__all__ = ["Score", "ScoreConfig"]

_COMPONENTS_TYPE = pa.map_(pa.string(), pa.float64())


class ScoreConfig(ScoreWeights, StageConfig):
    reward: Literal["penalized", "agent"] = Field(
        "penalized",
        description="Which reward fills the `reward` column: penalized (R_task − λ_eff·T − "
        "λ_format·1(format error)) or agent (0.5 completion + 0.3 process + 0.2 efficiency).",
    )


def _existing(batch: pa.RecordBatch, name: str) -> list:
    if name in batch.schema.names:
        return batch.column(name).to_pylist()
    return [None] * batch.num_rows


@register
class Score(MapStage[ScoreConfig]):
    """Reference quality score, penalised and agent rewards, coherence."""

    name = "score"
    writes = ("quality_score", "reward", "reward_components")

    def process(self, batches: Iterator[pa.RecordBatch], ctx: Context) -> Iterator[Output]:
        cfg = self.config
        weights = ScoreWeights(**{k: getattr(cfg, k) for k in ScoreWeights.model_fields})
        reward_key = "penalized_reward" if cfg.reward == "penalized" else "agent_reward"
        for batch in batches:
            messages = batch.column("messages").to_pylist()
            tools = batch.column("tools").to_pylist()
            success = _existing(batch, "success")
            errors = _existing(batch, "format_errors")
            prior = _existing(batch, "reward_components")
            flags = _existing(batch, "step_flags")
            quality, reward, components = [], [], []
            for m, t, s, e, p, f in zip(
                messages, tools, success, errors, prior, flags, strict=True
            ):
                # 1)-4) every score of the row
                before = dict(p or [])
                parts = score_conversation(
                    m or [],
                    json.loads(t) if t else None,
                    success=s,
                    format_errors=e or (),
                    components=before,
                    weights=weights,
                    context_steps={i for i, fl in enumerate(f or []) if CONTEXT_FLAG in fl},
                )
                quality.append(parts["quality"])
                reward.append(parts[reward_key])
                # 5) merge next to verify's components
                components.append(list({**before, **parts}.items()))
            yield replace_columns(
                batch,
                {
                    "quality_score": pa.array(quality, pa.float64()),
                    "reward": pa.array(reward, pa.float64()),
                    "reward_components": pa.array(components, _COMPONENTS_TYPE),
                },
            )
            ctx.metrics.inc("rows", batch.num_rows)
            ctx.metrics.inc("quality_sum", float(np.sum(quality)))
            ctx.metrics.inc("reward_sum", float(np.sum(reward)))
            ctx.metrics.inc(
                "format_error_rows", sum(1 for c in components if dict(c)["format_error"] > 0)
            )
            ctx.advance(batch.num_rows)
