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

Two forms, by ``outline_to``:

- ``user`` (the default, LoopTool's planner → user form): the outline goes to the user only
  and names no tool; the actor never sees it;
- ``actor`` (the director–actor form of the data-synthesis literature: the director's plan
  goes to the actor, which "fills in the details"): the director plans each turn's need *and*
  the tools the assistant should use for it (``{"turn", "type", "need", "tools": [...]}``;
  an outline naming a tool the task does not offer is rejected); the user still plays the
  needs, and every actor gets the plan in its system prompt. Each row records whether its
  actor followed the plan (``extra["outline_followed"]``: every planned tool called, in the
  planned order; ``extra["outline_tools_called"]``: the share of planned tools it called),
  and the stage counts ``outline.planned`` and ``outline.followed`` — how often the actor
  followed its outline.

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

from ...core.config import StrictModel
from ...core.errors import InfraError
from ...core.prompts import system_prompt
from ...core.schema import Message, Trajectory
from ...core.task import GroundTruth
from ...envs.episode import Episode
from ...envs.verifiers.episode import verify_episode
from ..common.policies import LLMPolicy, LLMUser, sim_task
from ..common.rollouts import RolloutLimits, RolloutStage, episode_row, make_env, play_policy
from ..context import Context
from ..kinds import Emit, StageConfig
from ..registry import register

__all__ = [
    "ACTOR_DIRECTOR_PROMPT",
    "DIRECTOR_PROMPT",
    "ActorSpec",
    "DirectorActor",
    "DirectorActorConfig",
    "outline_adherence",
    "plan_text",
]


DIRECTOR_PROMPT = """You plan a conversation between a user and an AI assistant that can use \
the tools listed below. Write exactly {n} turns. For each turn give only what the USER needs \
(never a tool or function name), labelled tool_call (needs the tools), non_tool (a question \
the assistant answers from knowledge), chit_chat (small talk) or clarify (the user leaves \
out a detail the assistant must ask for). Adjacent turns must be related, and at least one \
need must take several tools. Answer with JSON only: \
{{"turns": [{{"turn": 1, "type": "tool_call", "need": "..."}}, ...]}}

Tools:
{tools}"""

#: the director's prompt when the outline goes to the actor: needs and the tools for each
ACTOR_DIRECTOR_PROMPT = """You plan a conversation between a user and an AI assistant that can \
use the tools listed below; your plan is given to the ASSISTANT, who follows it and fills in \
the details. Write exactly {n} turns. For each turn give what the user needs and the tools \
the assistant should call for it, in order (an empty list when no tool is needed), labelled \
tool_call, non_tool, chit_chat or clarify (the user leaves out a detail the assistant must \
ask for). Adjacent turns must be related, and at least one need must take several tools. \
Answer with JSON only: \
{{"turns": [{{"turn": 1, "type": "tool_call", "need": "...", "tools": ["..."]}}, ...]}}

Tools:
{tools}"""

PLAN_HEADER = (
    "The conversation's plan, from the director: follow it, turn by turn, filling in the "
    "details (the exact arguments come from the user and from the tools' results)."
)

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
    outline_to: Literal["user", "actor"] = Field(
        "user",
        description="Who gets the director's outline: the user only (LoopTool's planner → "
        "user form; the outline names no tool) or also the actor (the director–actor form: "
        "needs and the tools per turn, a plan the actor follows).",
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
        prompt = DIRECTOR_PROMPT
        if cfg.outline_to == "actor":
            meta["plan_for"] = "actor"
            prompt = ACTOR_DIRECTOR_PROMPT
        result = await ctx.llm(cfg.director_role).chat(
            [
                Message(role="system", content=prompt.format(n=n, tools=described)),
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
            result.choices[0].message.content,
            [t["function"]["name"] for t in row.tools],
            plan=cfg.outline_to == "actor",
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
        if cfg.outline_to == "actor":
            system = f"{system}\n\n{plan_text(outline)}"
        ep = Episode(task, env, tools=row.tools, system=system, user=user,
                     limits=cfg.limits.limits())  # fmt: skip
        played = await play_policy(ctx, ep, policy, unit="conversations")
        if played is None:  # the endpoint's failure, not the actor's
            return None
        if played.failed is not None:
            ctx.metrics.inc("rejected.generation")
            ctx.log.debug("director_actor %s actor %d: %s", row.id, k, played.error)
            return None
        result = played.result
        # 3) the row
        verdict = verify_episode(result, gt, row.tools, call_match=cfg.call_match) if gt else None
        ctx.metrics.inc("conversations")
        followed: dict[str, Any] = {}
        if cfg.outline_to == "actor":
            called = [c.name for m in result.messages for c in m.tool_calls]
            followed = outline_adherence(outline, called)
            ctx.metrics.inc("outline.planned")
            ctx.metrics.inc("outline.followed", int(followed["outline_followed"]))
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
                "outline_to": cfg.outline_to,
                **followed,
            },
            goal=next((m.content or "" for m in result.messages if m.role == "user"), row.goal),
        )


def plan_text(outline: list[dict[str, Any]]) -> str:
    """The outline as the actor reads it in its system prompt."""
    lines = [PLAN_HEADER]
    for t in outline:
        tools = t.get("tools") or []
        use = f" — use: {', '.join(tools)}" if tools else " — no tool"
        lines.append(f"{t['turn']}. [{t['type']}] {t['need']}{use}")
    return "\n".join(lines)


def outline_adherence(outline: list[dict[str, Any]], called: list[str]) -> dict[str, Any]:
    """Did the actor follow its plan? ``outline_followed``: every planned tool was called, in
    the planned order (other calls between them allowed); ``outline_tools_called``: the share
    of the planned tools it called at all (1.0 for a plan without tools)."""
    planned = [name for t in outline for name in t.get("tools") or []]
    it = iter(called)
    in_order = all(any(c == name for c in it) for name in planned)
    share = sum(1 for n in planned if n in called) / len(planned) if planned else 1.0
    return {"outline_followed": in_order, "outline_tools_called": round(share, 4)}


def _read_outline(
    content: str | None, tool_names: list[str], *, plan: bool = False
) -> list[dict[str, Any]] | None:
    """The director's turns, or None when they cannot be read or (a user's outline) name a
    tool; a plan for the actor (``plan``) lists each turn's ``tools``, which must be offered."""
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
        if plan:
            tools = t.get("tools", [])
            if not isinstance(tools, list) or any(n not in tool_names for n in tools):
                return None
            out.append({"turn": i + 1, "type": kind, "need": t["need"], "tools": list(tools)})
            continue
        for name in tool_names:
            if len(name) > 2 and re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", t["need"]):
                return None
        out.append({"turn": i + 1, "type": kind, "need": t["need"]})
    return out
