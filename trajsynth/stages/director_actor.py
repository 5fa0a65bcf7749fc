"""``director_actor``: a director plans the user's needs turn by turn, a simulated user acts them
out, and K actors answer with real tool execution (LoopTool's seed-data simulation, Zhang et al.
2025, "LoopTool: Closing the Data–Training Loop for Robust LLM Tool Calls", arXiv:2511.09148;
official code ``dialog_generation/``: Planner → User → Assistant → Tool).

For each task row:

1) the **director** (``director`` role) writes an outline of the conversation: exactly
   ``num_turns`` turns (default: the task's), each labelled ``tool_call``, ``non_tool``,
   ``chit_chat`` or ``clarify`` with the user's *need only* — never a tool or function name;
   adjacent turns related, at least one need that takes several tools (LoopTool's planner
   rules). An outline that cannot be read, or that names a tool, is rejected (the row counts
   under ``rejected.outline``);
2) for each of the K ``actors`` (model roles or temperature variants): the **user**
   (``user`` role) opens with the first need and speaks again after each answer — answering
   questions, moving to the next need, saying its stop token when done — in a persona drawn
   per actor; the **actor** answers; every call runs in a fresh environment of the task's
   domain (the shared episode runner);
3) each conversation becomes a row: success from the layered verifier when the task has
   ground truth (format → execution → final state → outputs → call match), the outline, the
   persona and the actor in ``extra``.

The simulated roles read the task's ground truth from the request metadata (the simulator
cannot read prompts); real models read the prompts, in which the ground truth never appears.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from typing import Any, Literal

from pydantic import Field

from ..core.config import StrictModel
from ..core.errors import InfraError
from ..core.prompts import system_prompt
from ..core.schema import Message, Trajectory
from ..core.task import GroundTruth
from ..envs.episode import run_episode
from ..envs.verifiers.episode import verify_episode
from .common.policies import LLMPolicy, LLMUser, PolicyError, sim_task
from .common.rollouts import RolloutLimits, RolloutStage, episode_row, make_env
from .context import Context
from .kinds import Emit, StageConfig
from .registry import register

__all__ = ["DIRECTOR_PROMPT", "ActorSpec", "DirectorActor", "DirectorActorConfig"]


DIRECTOR_PROMPT = """You plan a conversation between a user and an AI assistant that can use \
the tools listed below. Write exactly {n} turns. For each turn give only what the USER needs \
(never a tool or function name), labelled tool_call (needs the tools), non_tool (a question \
the assistant answers from knowledge), chit_chat (small talk) or clarify (the user leaves \
out a detail the assistant must ask for). Adjacent turns must be related, and at least one \
need must take several tools. Answer with JSON only: \
{{"turns": [{{"turn": 1, "type": "tool_call", "need": "..."}}, ...]}}

Tools:
{tools}"""

KINDS = ("tool_call", "non_tool", "chit_chat", "clarify")


class ActorSpec(StrictModel):
    """One actor: a role and its sampling temperature."""

    role: str = Field("actor", description="LLM role of the actor.")
    temperature: float | None = Field(None, ge=0, description="Sampling temperature.")


class DirectorActorConfig(StageConfig):
    director_role: str = Field("director", description="LLM role that writes the outline.")
    user_role: str = Field("user", description="LLM role that plays the user.")
    actors: list[ActorSpec] = Field(
        default_factory=lambda: [ActorSpec(temperature=0.7), ActorSpec(temperature=1.0)],
        min_length=1,
        description="The K actors (model or temperature variants).",
    )
    num_turns: int | None = Field(
        None, ge=1, le=20, description="Turns the director plans (default: the task's)."
    )
    personas: list[str] = Field(
        default_factory=lambda: ["busy professional", "student", "retiree", "developer"],
        description="User personas, one drawn per conversation.",
    )
    call_match: Literal["contains", "exact", "off"] = Field(
        "contains", description="Verifier's call-match layer (with ground truth)."
    )
    limits: RolloutLimits = Field(default_factory=RolloutLimits, description="Episode limits.")


@register
class DirectorActor(RolloutStage[DirectorActorConfig]):
    """LoopTool's planner → user → assistant → tool simulation, with K actors per outline."""

    name = "director_actor"

    async def rollout(
        self, row: Trajectory, gt: GroundTruth, opening: list[Message], ctx: Context
    ) -> list[Trajectory | Emit]:
        return await self.direct(row, gt, opening, ctx)

    async def rollout_without_task(
        self, row: Trajectory, opening: list[Message], ctx: Context
    ) -> list[Trajectory | Emit]:
        return await self.direct(row, None, opening, ctx)

    async def direct(
        self, row: Trajectory, gt: GroundTruth | None, opening: list[Message], ctx: Context
    ) -> list[Trajectory | Emit]:
        cfg = self.config
        # 1) the outline (an endpoint failure loses the row's conversations, counted)
        ctx.metrics.inc("infra.units", len(cfg.actors))
        try:
            outline = await self.outline(ctx, row, gt)
        except InfraError as exc:
            ctx.lost_to_infra(exc, len(cfg.actors), unit="conversations")
            return []
        if outline is None:
            ctx.metrics.inc("rejected.outline")
            return []
        system = next((m.content for m in opening if m.role == "system"), None) or system_prompt()
        task = gt or GroundTruth()
        # 2) K actors
        rows = await asyncio.gather(
            *(self.act(ctx, row, task, gt, outline, system, k, a) for k, a in enumerate(cfg.actors))
        )
        return [r for r in rows if r is not None]

    async def outline(
        self, ctx: Context, row: Trajectory, gt: GroundTruth | None
    ) -> list[dict[str, Any]] | None:
        cfg = self.config
        n = cfg.num_turns or (len(gt.turns) if gt is not None and gt.turns else 3)
        described = "\n".join(
            f"- {t['function']['name']}: {t['function'].get('description', '')}" for t in row.tools
        )
        meta: dict[str, Any] = {"role": cfg.director_role, "num_turns": n}
        if gt is not None:
            meta["ground_truth"] = sim_task(gt)
        result = await ctx.llm(cfg.director_role).chat(
            [
                Message(role="system", content=DIRECTOR_PROMPT.format(n=n, tools=described)),
                Message(role="user", content=f"Domain: {row.domain}. Plan the conversation."),
            ],
            row.tools,
            seed=ctx.row_seed(row.id, "director"),
            metadata=meta,
        )
        if not result.ok:
            result.raise_for_infra()
            return None
        return _read_outline(
            result.choices[0].message.content, [t["function"]["name"] for t in row.tools]
        )

    async def act(
        self,
        ctx: Context,
        row: Trajectory,
        task: GroundTruth,
        gt: GroundTruth | None,
        outline: list[dict[str, Any]],
        system: str,
        k: int,
        actor: ActorSpec,
    ) -> Trajectory | None:
        cfg = self.config
        rng = random.Random(ctx.row_seed(row.id, "persona", k))
        persona = rng.choice(cfg.personas) if cfg.personas else None
        user = LLMUser(
            ctx, cfg.user_role, task=gt, seed=ctx.row_seed(row.id, "user", k),
            outline=outline, persona=persona, max_turns=len(outline) + 2,
        )  # fmt: skip
        policy = LLMPolicy(
            ctx, actor.role, task=gt, seed=ctx.row_seed(row.id, "actor", k),
            temperature=actor.temperature,
        )  # fmt: skip
        env = make_env(ctx, row, gt)
        try:
            result = await run_episode(
                task, env, policy, tools=row.tools, system=system, user=user,
                limits=cfg.limits.limits(),
            )  # fmt: skip
        except PolicyError as exc:
            ctx.metrics.inc("rejected.generation")
            ctx.log.debug("director_actor %s actor %d: %s", row.id, k, exc)
            return None
        except InfraError as exc:  # the endpoint's failure, not the actor's
            ctx.lost_to_infra(exc, unit="conversations")
            return None
        # 3) the row
        verdict = verify_episode(result, gt, row.tools, call_match=cfg.call_match) if gt else None
        ctx.metrics.inc("conversations")
        if verdict is not None:
            ctx.metrics.inc("passed" if verdict.ok else f"rejected.{verdict.layer}")
        return episode_row(
            ctx,
            row,
            result,
            verdict,
            method="director_actor",
            generator=ctx.llm(actor.role).model,
            key=k,
            extra={
                "outline": outline,
                "persona": persona,
                "actor": actor.model_dump(),
                "user_turns": sum(1 for m in result.messages if m.role == "user"),
            },
            goal=next((m.content or "" for m in result.messages if m.role == "user"), row.goal),
        )


def _read_outline(content: str | None, tool_names: list[str]) -> list[dict[str, Any]] | None:
    """The director's turns, or None when they cannot be read or name a tool."""
    text = content or ""
    try:
        data = json.loads(text[text.find("{") : text.rfind("}") + 1])
    except ValueError:
        return None
    turns = data.get("turns") if isinstance(data, dict) else None
    if not isinstance(turns, list) or not turns:
        return None
    out = []
    for i, t in enumerate(turns):
        if not isinstance(t, dict) or not isinstance(t.get("need"), str):
            return None
        kind = str(t.get("type", "tool_call"))
        if kind not in KINDS:
            return None
        for name in tool_names:
            if len(name) > 2 and re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", t["need"]):
                return None
        out.append({"turn": i + 1, "type": kind, "need": t["need"]})
    return out
