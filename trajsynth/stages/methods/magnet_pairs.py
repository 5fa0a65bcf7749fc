"""``magnet_pairs``: Magnet's positive and negative trajectories (Yin et al. 2025, "Magnet:
Multi-turn Tool-use Data Synthesis and Distillation via Graph Translation", arXiv:2503.07826,
§3.3-3.4): positives by context distillation, negatives from the policy's own errors, as
chosen/rejected pairs for (m)DPO.

For each task row:

1) **positive** (τ_w): the ``teacher`` plays the task with the gold calls of each turn
   appended to that turn's request as a ``[Hint]`` (context distillation); the trajectory is
   stored *without* the hint. Magnet's rule filter drops it when a tool returned an error
   (failure strings such as "Bad request"); it must also pass the layered verifier. A task
   without a positive gives nothing;
2) **negatives**: the ``policy`` plays the task ``negatives`` times (Magnet samples 10 from
   its SFT model); in each, the first turn whose calls differ from the gold turn's (BFCL call
   matching, order-free within the turn) is flagged — the rule stands in for Magnet's LLM
   judge, which ``judge: true`` adds (APIGen's semantic checker on the rollout);
3) **rejected** (τ_l): from τ_w's conversation up to that turn's request, the teacher plays the
   turn again with the policy's wrong calls as a *misleading* hint, so the rejected
   continuation is the teacher's own rendering of the policy's error;
4) **pairs**: prompt = τ_w up to the turn's request, chosen = τ_w's messages for that turn,
   rejected = the regenerated ones; one pair per distinct (turn, wrong calls), at most
   ``max_pairs`` per task. Positives go to the main output (SFT data, Magnet's L_SFT); pairs
   go to the ``pairs`` output as rows holding τ_w in ``messages`` and
   ``extra["dpo"] = {"turn", "prompt_len", "chosen_len", "rejected"}``, which
   ``trajsynth export --format dpo`` turns into TRL's prompt/chosen/rejected records.

Deviation: the mDPO loss itself belongs to the trainer; this stage makes its data.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from pydantic import Field

from ...core.extras import DpoPair, with_
from ...core.ids import canonical_json, stable_id
from ...core.schema import Message, ToolCall, Trajectory
from ...core.task import GoldCall, GroundTruth
from ...envs.episode import EpisodeResult, run_episode, turn_starts
from ...envs.spec import Toolset
from ...envs.verifiers.call_match import match_parallel
from ...envs.verifiers.episode import verify_episode
from ..common.policies import LLMPolicy, PolicyError
from ..common.rollouts import (
    RolloutLimits,
    RolloutStage,
    episode_row,
    judge_episode,
    make_env,
)
from ..context import Context
from ..kinds import Emit, StageConfig
from ..registry import register

__all__ = ["MagnetPairs", "MagnetPairsConfig", "first_wrong_turn"]


class MagnetPairsConfig(StageConfig):
    teacher_role: str = Field("teacher", description="Role that writes positives (with hints).")
    policy_role: str = Field("policy", description="Role whose own errors become negatives.")
    negatives: int = Field(10, ge=1, le=64, description="Policy rollouts per task (Magnet: 10).")
    temperature: float = Field(0.7, ge=0, description="Sampling temperature.")
    max_pairs: int = Field(4, ge=1, description="Pairs per task at most.")
    judge: bool = Field(False, description="Also flag negatives with the judge role.")
    limits: RolloutLimits = Field(default_factory=RolloutLimits, description="Episode limits.")


def _turn_calls(messages: list[Message], turn: int) -> list[ToolCall]:
    starts = turn_starts(messages)
    if turn >= len(starts):
        return []
    end = starts[turn + 1] if turn + 1 < len(starts) else len(messages)
    return [c for m in messages[starts[turn] : end] if m.role == "assistant" for c in m.tool_calls]


def first_wrong_turn(
    result: EpisodeResult, gt: GroundTruth, tools: list[dict[str, Any]]
) -> tuple[int, list[ToolCall]] | None:
    """Step 2: the first turn whose calls differ from the gold turn's (None: all match).

    A turn matches when its calls equal the gold calls as BFCL's order-free matching counts
    them; a clarify turn also needs the question before any call."""
    toolset = Toolset.from_openai(tools)
    for t, g in enumerate(gt.turns):
        calls = _turn_calls(result.messages, t)
        gold = [c for step in g.steps for c in step]
        if not gold and not calls:
            continue
        if not match_parallel(calls, gold, toolset):
            return t, calls
    return None


@register
class MagnetPairs(RolloutStage[MagnetPairsConfig]):
    """Magnet positives (hinted teacher, stored without hint) and negatives from own errors."""

    name = "magnet_pairs"
    writes = ("success", "reward", "reward_components", "format_errors")
    outputs = ("main", "pairs")
    concurrency = 32

    async def rollout(
        self, row: Trajectory, gt: GroundTruth, opening: list[Message], ctx: Context
    ) -> list[Trajectory | Emit]:
        cfg = self.config
        limits = cfg.limits.limits()
        teacher = LLMPolicy(
            ctx, cfg.teacher_role, task=gt, seed=ctx.row_seed(row.id, "positive"),
            temperature=cfg.temperature, hint=True,
        )  # fmt: skip
        try:
            # 1) the positive, with hints in what is sent only
            pos = await run_episode(
                gt, make_env(ctx, row, gt), teacher, tools=row.tools, prefix=opening, limits=limits
            )
            verdict = verify_episode(pos, gt, row.tools)
            if pos.tool_errors or not verdict.ok:
                ctx.metrics.inc("no_positive")
                return []
            # 2) negatives from the policy's own rollouts
            rollouts = await asyncio.gather(
                *(
                    run_episode(
                        gt,
                        make_env(ctx, row, gt),
                        LLMPolicy(
                            ctx,
                            cfg.policy_role,
                            task=gt,
                            seed=ctx.row_seed(row.id, "neg", k),
                            temperature=cfg.temperature,
                        ),
                        tools=row.tools,
                        prefix=opening,
                        limits=limits,
                    )
                    for k in range(cfg.negatives)
                )
            )
        except PolicyError as exc:
            ctx.metrics.inc("rejected.generation")
            ctx.log.debug("magnet_pairs %s: %s", row.id, exc)
            return []
        positive = episode_row(
            ctx, row, pos, verdict, method="magnet_pairs", key="positive",
            generator=ctx.llm(cfg.teacher_role).model, extra={"hinted": True},
        )  # fmt: skip
        wrong: list[tuple[int, list[ToolCall], int]] = []
        seen: set[str] = set()
        for k, res in enumerate(rollouts):
            flagged = first_wrong_turn(res, gt, row.tools)
            if flagged is None and cfg.judge:
                judge = await judge_episode(ctx, "judge", res, gt, ctx.row_seed(row.id, "j", k))
                if judge.verdict == "fail":
                    flagged = next(
                        ((t, _turn_calls(res.messages, t)) for t in range(len(gt.turns))), None
                    )
            if flagged is None:
                continue
            t, calls = flagged
            key = canonical_json([t, [(c.name, c.arguments) for c in calls]])
            if key not in seen:
                seen.add(key)
                wrong.append((t, calls, k))
        ctx.metrics.inc("negatives_flagged", len(wrong))
        # 3) rejected turns: the teacher misled by the policy's calls
        pairs = await asyncio.gather(
            *(
                self._pair(ctx, row, gt, positive, t, calls, k)
                for t, calls, k in wrong[: cfg.max_pairs]
            )
        )
        pair_rows = [p for p in pairs if p is not None]
        ctx.metrics.inc("pairs", len(pair_rows))
        out: list[Trajectory | Emit] = [positive]
        if pair_rows:
            out.append(Emit("pairs", pair_rows))
        return out

    async def _pair(
        self,
        ctx: Context,
        row: Trajectory,
        gt: GroundTruth,
        positive: Trajectory,
        turn: int,
        calls: list[ToolCall],
        k: int,
    ) -> Trajectory | None:
        cfg = self.config
        messages = list(positive.messages)
        starts = turn_starts(messages)
        if turn >= len(starts):
            return None
        prompt_len = starts[turn] + 1
        end = starts[turn + 1] if turn + 1 < len(starts) else len(messages)
        misleading = [[GoldCall(name=c.name, arguments=c.parsed_arguments() or {}) for c in calls]]
        if not calls:  # the policy answered without calling: the hint is to call nothing
            misleading = []
        teacher = LLMPolicy(
            ctx, cfg.teacher_role, task=gt, seed=ctx.row_seed(row.id, "rejected", turn, k),
            temperature=cfg.temperature, hint_steps={turn: misleading},
        )  # fmt: skip
        try:
            res = await run_episode(
                gt, make_env(ctx, row, gt), teacher, tools=row.tools,
                prefix=messages[:prompt_len], limits=cfg.limits.limits(), stop_after_turn=turn,
            )  # fmt: skip
        except PolicyError:
            return None
        rejected = res.messages[prompt_len:]
        chosen = messages[prompt_len:end]
        if _same(chosen, rejected):
            ctx.metrics.inc("pairs_without_contrast")
            return None
        return positive.model_copy(
            update={
                "id": stable_id("magnet_pairs", ctx.config_hash, row.id, "pair", turn, k),
                "parent_ids": [row.id, positive.id],
                "extra": with_(
                    positive.extra,
                    DpoPair(
                        turn=turn,
                        prompt_len=prompt_len,
                        chosen_len=len(chosen),
                        rejected=rejected,
                        negative_rollout=k,
                    ),
                ),
            }
        )


def _same(a: list[Message], b: list[Message]) -> bool:
    def sig(ms: list[Message]) -> Counter[str]:
        return Counter(
            canonical_json([c.name, c.parsed_arguments()]) for m in ms for c in m.tool_calls
        )

    texts_a = [m.content for m in a if m.role == "assistant" and not m.tool_calls]
    texts_b = [m.content for m in b if m.role == "assistant" and not m.tool_calls]
    return sig(a) == sig(b) and texts_a == texts_b
