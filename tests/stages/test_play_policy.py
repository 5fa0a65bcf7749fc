"""``play_policy`` (stages/common/rollouts.py), the one loop every rollout stage plays a policy
with: a policy played to the end gives the episode; its ``PolicyError`` is a rejection at the
generation layer with the episode as far as it got; an ``InfraError`` is no outcome, one unit
counted lost; a first step sampled beforehand is played first, and its failure fails the
episode. ``advance_steps`` and ``play_steps(stop_after_turn=)`` replay fixed steps.

Run: PYTHONPATH=. python -m pytest tests/stages/test_play_policy.py -q
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from minutes_task import FACTORY, GOLD, OPENING, TOOLS, WRITE

from trajsynth.core import GroundTruth, Message
from trajsynth.core.errors import InfraError
from trajsynth.core.task import GoldTurn
from trajsynth.envs.episode import Episode, PolicyStep
from trajsynth.stages import Context, ContextSpec
from trajsynth.stages.common.policies import PolicyError
from trajsynth.stages.common.replay import advance_steps, calls_message, play_steps
from trajsynth.stages.common.rollouts import play_policy

CALL = calls_message([{"name": "write_file", "arguments": WRITE}], key="w")
DONE = Message(role="assistant", content="Done.")


class Scripted:
    """A policy that says ``replies`` in order; an exception in the list is raised."""

    def __init__(self, *replies: Message | Exception) -> None:
        self.replies = list(replies)
        self.asked = 0

    async def __call__(self, messages: Sequence[Message], tools: list[dict[str, Any]]) -> Message:
        reply = self.replies[self.asked]
        self.asked += 1
        if isinstance(reply, Exception):
            raise reply
        return reply


def episode() -> Episode:
    return Episode(GOLD, FACTORY.make("files", seed=0), tools=TOOLS, prefix=OPENING)


def counters(ctx: Context) -> dict[str, Any]:
    return ctx.metrics.snapshot()["counters"]


def test_a_policy_played_to_the_end_gives_its_episode() -> None:
    ctx = Context(ContextSpec(stage_id="t"))
    played = asyncio.run(play_policy(ctx, episode(), Scripted(CALL, DONE), unit="rollouts"))
    assert played is not None and played.error is None and played.failed is None
    assert [m.role for m in played.result.messages] == ["system", "user", "assistant", "tool",
                                                       "assistant"]  # fmt: skip
    assert played.result.end != "running"
    assert "infra.lost" not in counters(ctx)


def test_a_policy_error_is_a_generation_rejection_with_the_episode_so_far() -> None:
    ctx = Context(ContextSpec(stage_id="t"))
    policy = Scripted(CALL, PolicyError("the endpoint refused the request"))
    played = asyncio.run(play_policy(ctx, episode(), policy, unit="rollouts"))
    assert played is not None and played.error == "the endpoint refused the request"
    verdict = played.failed
    assert verdict is not None and not verdict.ok
    assert (verdict.layer, verdict.reason) == ("generation", "the endpoint refused the request")
    assert [m.role for m in played.result.messages] == ["system", "user", "assistant", "tool"]
    assert "infra.lost" not in counters(ctx)


def test_an_infra_error_is_no_outcome_and_one_unit_lost() -> None:
    ctx = Context(ContextSpec(stage_id="t"))
    policy = Scripted(CALL, InfraError("503 after 4 retries"))
    assert asyncio.run(play_policy(ctx, episode(), policy, unit="probes")) is None
    snap = ctx.metrics.snapshot()
    assert snap["counters"]["infra.lost"] == 1
    assert snap["values"]["infra.unit"] == "probes"
    assert snap["values"]["infra.last_error"] == "503 after 4 retries"


def test_a_first_step_is_played_before_the_policy_is_asked() -> None:
    ctx = Context(ContextSpec(stage_id="t"))
    policy = Scripted(DONE)
    played = asyncio.run(
        play_policy(ctx, episode(), policy, unit="rollouts", first=PolicyStep(CALL))
    )
    assert played is not None and played.error is None and policy.asked == 1
    assert played.result.messages[2].tool_calls[0].name == "write_file"
    assert played.result.messages[-1].content == "Done."


def test_a_failed_first_sample_fails_the_started_episode() -> None:
    ctx = Context(ContextSpec(stage_id="t"))
    policy = Scripted(DONE)
    played = asyncio.run(
        play_policy(ctx, episode(), policy, unit="rollouts", first_error="no choices")
    )
    assert played is not None and played.failed is not None and policy.asked == 0
    assert played.failed.reason == "no choices"
    assert [m.role for m in played.result.messages] == ["system", "user"]


def test_advance_steps_leaves_the_episode_to_its_caller() -> None:
    ep = episode()
    assert asyncio.run(advance_steps(ep, [CALL])) == 1
    assert not ep.done and ep.turn == 0
    assert [m.role for m in ep.messages] == ["system", "user", "assistant", "tool"]


def test_play_steps_stops_after_the_turn_asked() -> None:
    two = GroundTruth(turns=[*GOLD.turns, GoldTurn(request="Now list the folder.", steps=[])])
    env = FACTORY.make("files", seed=0)
    steps = [CALL, DONE, DONE]
    result, played = asyncio.run(
        play_steps(two, env, OPENING, steps, tools=TOOLS, stop_after_turn=0)
    )
    assert played == 2  # the second turn is never opened
    assert [m.role for m in result.messages][-1] == "assistant"
    assert sum(1 for m in result.messages if m.role == "user") == 1
