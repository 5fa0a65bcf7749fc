"""What every rollout stage needs, in one place: a task row's ground truth and opening
messages, a fresh environment for it, APIGen's optional semantic judge, and the trajectory row
made from a played episode.

- :func:`task_of`: (ground truth, opening messages) of a task row: its ``messages`` up to the
  first assistant message, or the shared system prompt and the first gold request;
- :func:`make_env`: ``ctx.envs.make`` for the row's domain, seeded as the task says;
- :func:`expected_steps`: how long a correct episode of the task is (the scheduling priority
  of the rollout stages: longest first);
- :func:`judge_episode`: APIGen's semantic checker (judge role): the requests, the calls and
  their results → ``{"thought", "passes": "yes"|"no"}``;
- :func:`episode_row`: a :class:`~trajsynth.core.Trajectory` from an episode and its verdict
  (messages, outcome columns, provenance; ``extra`` carries how the episode ended and its
  tool errors);
- :func:`play_policy`: a policy played through an episode until it ends, with the failure
  accounting every rollout shares: the policy's failure (:class:`~.policies.PolicyError`) is
  a rejection at the ``generation`` layer, the endpoint's (:class:`InfraError`) a unit lost
  (``ctx.lost_to_infra``), never an outcome.
"""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from ...core.errors import InfraError
from ...core.ids import stable_id
from ...core.prompts import system_prompt
from ...core.schema import Judge, Message, Trajectory
from ...core.task import GroundTruth
from ...envs.base import Environment
from ...envs.episode import Episode, EpisodeLimits, EpisodeResult, Policy, PolicyStep, play
from ...envs.verifiers.episode import EpisodeVerdict
from ..context import Context
from ..kinds import Emit, RowStage, StageConfig
from .policies import PolicyError

__all__ = [
    "JUDGE_PROMPT",
    "ROLLOUT_WRITES",
    "Played",
    "RolloutLimits",
    "RolloutStage",
    "env_version",
    "episode_row",
    "expected_steps",
    "judge_episode",
    "make_env",
    "passed_columns",
    "play_policy",
    "task_of",
]

#: APIGen's semantic checker (Liu et al. 2024, "APIGen: Automated Pipeline for Generating
#: Verifiable and Diverse Function-Calling Datasets", arXiv:2406.18518, §3.2; the prompt as
#: distilabel's re-implementation gives the original), adapted from one query to a conversation
JUDGE_PROMPT = """As a data quality evaluator, assess the alignment between the user's \
requests, the function calls the assistant made and the results they returned. Do not pass \
if: (1) the calls do not align with the requests' objective or the arguments are wrong; \
(2) the functions were not chosen from the available ones; (3) the number of calls does not \
match what the user intended; (4) the results are irrelevant to the functions' purpose; \
(5) the results contain errors or show that an execution failed. Answer with JSON only: \
{"thought": "<concise reasoning>", "passes": "yes" or "no"}."""


class RolloutLimits(StageConfig):
    """Episode limits shared by the rollout stages."""

    max_steps: int = 32
    max_steps_per_turn: int = 12
    max_followups: int = 2

    def limits(self) -> EpisodeLimits:
        return EpisodeLimits(self.max_steps, self.max_steps_per_turn, self.max_followups)


def task_of(row: Trajectory) -> tuple[GroundTruth | None, list[Message]]:
    """The row's ground truth and the messages an episode starts from."""
    gt = row.ground_truth
    opening = row.opening()
    if not opening:
        request = gt.turns[0].request if gt is not None and gt.turns else row.goal
        opening = [
            Message(role="system", content=system_prompt()),
            Message(role="user", content=request),
        ]
    return gt, opening


def expected_steps(row: Trajectory) -> float:
    """Assistant messages a correct episode of the task takes (gold steps, one answer per
    turn, one question per clarify turn): the rollout stages' scheduling priority."""
    gt = row.ground_truth
    if gt is None:
        return 0.0
    return float(sum(len(t.steps) + 1 + (t.kind == "clarify") for t in gt.turns))


def make_env(ctx: Context, row: Trajectory, gt: GroundTruth | None) -> Environment:
    """A fresh environment of the row's domain in the task's state."""
    seed = gt.env_seed if gt is not None else 0
    init = gt.initial_state if gt is not None else None
    return ctx.envs.make(row.domain, seed=seed, initial_state=init)


async def judge_episode(
    ctx: Context, role: str, result: EpisodeResult, gt: GroundTruth | None, seed: int
) -> Judge:
    """APIGen's semantic check of one episode; an unreadable answer counts as a pass with
    the raw text kept as the rationale (the judge is advisory where it cannot be read)."""
    requests = [m.content or "" for m in result.messages if m.role == "user"]
    calls = [
        {"name": c.name, "arguments": c.parsed_arguments() or c.arguments} for c in result.calls
    ]
    results = [r.payload() for r in result.results]
    body = (
        f"Requests: {json.dumps(requests, ensure_ascii=False)}\n"
        f"Calls: {json.dumps(calls, ensure_ascii=False)}\n"
        f"Results: {json.dumps(results, ensure_ascii=False)[:6000]}"
    )
    meta: dict[str, Any] = {
        "role": role,
        "mode": "apigen",
        "query": " ".join(requests),
        "calls": [
            {
                "name": c["name"],
                "arguments": c["arguments"] if isinstance(c["arguments"], dict) else {},
            }
            for c in calls
        ],
        "results": results,
    }
    if gt is not None:
        meta["reference"] = [
            c.model_dump(mode="json", include={"name", "arguments"}) for c in gt.flat_calls()
        ]
    reply = await ctx.llm(role).chat(
        [Message(role="system", content=JUDGE_PROMPT), Message(role="user", content=body)],
        None,
        temperature=0.0,
        seed=seed,
        metadata=meta,
    )
    if not reply.ok:
        reply.raise_for_infra()  # the endpoint's failure: the rollout is lost, not judged
        return Judge(verdict="error", rationale=reply.error)
    text = reply.choices[0].message.content or ""
    try:
        data = json.loads(text[text.find("{") : text.rfind("}") + 1])
        passes = str(data.get("passes", "")).strip().lower()
        return Judge(
            verdict="pass" if passes == "yes" else "fail",
            score=1.0 if passes == "yes" else 0.0,
            rationale=str(data.get("thought", "")),
        )
    except (ValueError, AttributeError):
        return Judge(verdict="unreadable", rationale=text[:500])


def episode_row(
    ctx: Context,
    row: Trajectory,
    result: EpisodeResult,
    verdict: EpisodeVerdict | None,
    *,
    method: str,
    key: Any,
    generator: str = "",
    extra: dict[str, Any] | None = None,
    **columns: Any,
) -> Trajectory:
    """A trajectory row for ``result`` (``key`` makes its id unique among the row's
    rollouts; ``columns`` override any column)."""
    success = None if verdict is None else verdict.ok
    data: dict[str, Any] = {
        "id": stable_id(method, ctx.config_hash, row.id, key),
        "task_id": row.task_id,
        "goal": row.goal,
        "domain": row.domain,
        "env_version": env_version(ctx, row.domain),
        "capabilities": list(row.capabilities),
        "ground_truth": row.ground_truth,
        "tools": row.tools,
        "messages": result.messages,
        "success": success,
        "reward": None if success is None else float(success),
        "reward_components": dict(verdict.components) if verdict is not None else {},
        "format_errors": list(result.format_errors),
        "failure_layer": verdict.layer if verdict is not None else None,
        "failure_reason": verdict.reason if verdict is not None else None,
        "difficulty": row.difficulty,
        "extra": {
            "end": result.end,
            "tool_errors": result.tool_errors,
            "final_state_hash": result.final_state_hash,
            **(extra or {}),
        },
        **ctx.provenance(method=method, parent_ids=[row.id], generator=generator),
    }
    data.update(columns)
    if "step_diffs" not in columns:  # each step's state change, when the steps line up
        diffs = [info.get("state_diff", "[]") for info in result.step_info]
        steps = sum(1 for m in data["messages"] if _role(m) == "assistant")
        data["step_diffs"] = diffs if len(diffs) == steps else []
    return Trajectory.model_validate(data)


@dataclass(frozen=True)
class Played:
    """An episode a policy played: to its end, or as far as it got before the policy
    failed."""

    result: EpisodeResult
    error: str | None = None  # the policy's failure (PolicyError): the episode is cut there

    @property
    def failed(self) -> EpisodeVerdict | None:
        """The rejection at the ``generation`` layer when the policy failed, else None."""
        return None if self.error is None else EpisodeVerdict(False, "generation", self.error)


async def play_policy(
    ctx: Context,
    ep: Episode,
    policy: Policy | Callable[..., Any],
    *,
    unit: str,
    first: PolicyStep | None = None,
    first_error: str | None = None,
) -> Played | None:
    """Play ``policy`` through ``ep`` until the episode ends
    (:func:`~trajsynth.envs.episode.play`). A :class:`PolicyError` (the policy's or the
    user's request failed for good) ends it as a rejection at the ``generation`` layer
    (:attr:`Played.failed`, with the episode as far as it got); an :class:`InfraError` (the
    endpoint failed) is no outcome: one ``unit`` lost is counted (``ctx.lost_to_infra``) and
    None returned. ``first``: the first assistant message, already sampled (rejection
    sampling's shared first step); ``first_error``: that sample's failure, which fails the
    episode once it has started."""
    try:
        try:
            if first_error is not None:
                await ep.start()
                raise PolicyError(first_error)
            result = await play(ep, policy, first=first)
        except PolicyError as exc:
            return Played(ep.result(), str(exc))
    except InfraError as exc:  # the endpoint's failure, not the model's: no outcome
        ctx.lost_to_infra(exc, unit=unit)
        return None
    return Played(result)


def env_version(ctx: Context, domain: str) -> str:
    """The version of ``domain``'s environment in this run ('' when it has none)."""
    try:
        return ctx.envs.version(domain)
    except Exception:  # a domain without an environment (imported rows): not recorded
        return ""


def _role(message: Any) -> str | None:
    return message.get("role") if isinstance(message, dict) else getattr(message, "role", None)


def passed_columns(result: EpisodeResult, verdict: EpisodeVerdict) -> dict[str, Any]:
    """The conversation and outcome columns of an episode that passed verification."""
    return {
        "messages": result.messages,
        "success": True,
        "reward": 1.0,
        "reward_components": dict(verdict.components),
        "format_errors": list(result.format_errors),
    }


#: the outcome columns every rollout stage fills
ROLLOUT_WRITES: tuple[str, ...] = (
    "success",
    "reward",
    "reward_components",
    "format_errors",
    "failure_layer",
    "failure_reason",
)

C = TypeVar("C", bound=StageConfig)


class RolloutStage(RowStage[C]):
    """A row stage that plays episodes of each task row (rejection sampling, director/actor,
    TSR, Magnet pairs): I/O-bound, longest expected episodes first, every row counted in
    ``tasks``; a row without ground truth is skipped (``skipped.no_ground_truth``) unless the
    stage overrides :meth:`rollout_without_task`.

    An LLM request that fails because of the endpoint raises
    :class:`~trajsynth.core.errors.InfraError` out of the policies; a stage that does not
    catch it per rollout (as rejection sampling and director/actor do) loses the task row's
    outputs, counted by :class:`~trajsynth.stages.kinds.RowStage` (``infra.lost``)."""

    writes = ROLLOUT_WRITES
    io_bound = True
    concurrency = 64

    def priority(self, row: Trajectory) -> float:
        return expected_steps(row)  # longest episodes first

    async def aprocess_row(self, row: Trajectory, ctx: Context) -> list[Trajectory | Emit]:
        gt, opening = task_of(row)
        ctx.metrics.inc("tasks")
        if gt is None:
            return await self.rollout_without_task(row, opening, ctx)
        return await self.rollout(row, gt, opening, ctx)

    @abstractmethod
    async def rollout(
        self, row: Trajectory, gt: GroundTruth, opening: list[Message], ctx: Context
    ) -> list[Trajectory | Emit]:
        """The rows made from task ``row``, whose episodes start from ``opening``."""

    async def rollout_without_task(
        self, row: Trajectory, opening: list[Message], ctx: Context
    ) -> list[Trajectory | Emit]:
        ctx.metrics.inc("skipped.no_ground_truth")
        return []
