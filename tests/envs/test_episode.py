"""The shared episode runner and the layered episode verifier, driven by scripted policies on
the built-in domains' example tasks (no LLM).

Run: PYTHONPATH=. python -m pytest tests/envs/test_episode.py -q
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import pytest

from trajsynth.core.schema import Message, ToolCall
from trajsynth.core.task import GoldCall, GroundTruth
from trajsynth.envs import EnvFactory
from trajsynth.envs.episode import (
    NUDGE,
    Episode,
    EpisodeLimits,
    PolicyStep,
    run_episode,
    turn_starts,
)
from trajsynth.envs.verifiers.episode import verify_episode

FACTORY = EnvFactory()
TASKS = {t.task_id: t for t in FACTORY.example_tasks()}


def _call(c: GoldCall, i: int) -> ToolCall:
    return ToolCall(id=f"c{i}", name=c.name, arguments=json.dumps(c.arguments))


class GoldPolicy:
    """Plays the gold: asks first on clarify turns, then the gold steps, then an answer
    naming the required outputs. ``mutate(turn, step, calls)`` may change a step."""

    def __init__(self, gt: GroundTruth, mutate: Any = None, answer: str | None = None) -> None:
        self.gt = gt
        self.mutate = mutate
        self.answer = answer
        self.seen: list[list[Message]] = []

    async def __call__(self, messages: Sequence[Message], tools: list[dict[str, Any]]) -> Message:
        self.seen.append(list(messages))
        starts = turn_starts(messages)
        t = len(starts) - 1
        g = self.gt.turns[t]
        since = messages[starts[-1] :]
        asked = any(m.role == "assistant" and not m.tool_calls for m in since)
        done = sum(1 for m in since if m.role == "assistant" and m.tool_calls)
        if g.kind == "clarify" and not asked:
            q = g.answer if (g.answer or "").endswith("?") else "Which one do you mean?"
            return Message(role="assistant", content=q)
        if done < len(g.steps):
            calls = [_call(c, 100 * t + 10 * done + i) for i, c in enumerate(g.steps[done])]
            if self.mutate is not None:
                calls = self.mutate(t, done, calls)
            return Message(role="assistant", tool_calls=calls)
        text = self.answer or (g.answer or "Done.") + " " + " ".join(self.gt.required_outputs)
        return Message(role="assistant", content=text.strip() + " That is all.")


def play(task_id: str, policy: Any = None, **kw: Any):
    task = TASKS[task_id]
    gt = task.ground_truth
    env = FACTORY.make(task.domain, seed=gt.env_seed)
    tools = FACTORY.toolset(task.domain).to_openai()
    result = asyncio.run(
        run_episode(gt, env, policy or GoldPolicy(gt), tools=tools, system="sys", **kw)
    )
    return result, gt, tools


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_gold_play_passes_every_layer(task_id: str) -> None:
    result, gt, tools = play(task_id)
    verdict = verify_episode(result, gt, tools)
    assert verdict.ok, (verdict.layer, verdict.reason)
    assert result.final_state_hash == gt.final_state_hash
    assert result.end == "done"
    assert result.steps == sum(1 for m in result.messages if m.role == "assistant")
    # every call is answered by one tool message right after its assistant message
    for i, m in enumerate(result.messages):
        if m.role == "assistant" and m.tool_calls:
            answers = result.messages[i + 1 : i + 1 + len(m.tool_calls)]
            assert [a.tool_call_id for a in answers] == [c.id for c in m.tool_calls]


def test_clarify_turn_gets_the_gold_clarification_then_calls() -> None:
    result, gt, _ = play("travel-clarify-trip")
    roles = [m.role for m in result.messages[:5]]
    assert roles == ["system", "user", "assistant", "user", "assistant"]
    assert result.messages[3].content == gt.turns[0].clarification
    assert result.messages[4].tool_calls  # acts after the answer
    assert [i["turn"] for i in result.step_info] == [0] * result.steps


def test_needless_question_gets_a_nudge_and_no_tool_turn_needs_no_call() -> None:
    gt = TASKS["travel-convert"].ground_truth
    asked: list[int] = []

    async def asks_once(messages: Sequence[Message], tools: Any) -> Message:
        if not asked:
            asked.append(1)
            return Message(role="assistant", content="Which currency did you mean?")
        return await GoldPolicy(gt)(messages, tools)

    result, gt, tools = play("travel-convert", asks_once)
    assert result.messages[3].content == NUDGE
    assert verify_episode(result, gt, tools).ok
    # a call on a no-tool turn fails the turn-shape check
    spurious = GoldPolicy(TASKS["math-definition"].ground_truth)
    calls: list[int] = []

    async def calls_anyway(messages: Sequence[Message], tools: Any) -> Message:
        if not calls:
            calls.append(1)
            return Message(
                role="assistant",
                tool_calls=[ToolCall(id="x", name="calculate", arguments='{"expression": "1+1"}')],
            )
        return await spurious(messages, tools)

    result, gt, tools = play("math-definition", calls_anyway)
    verdict = verify_episode(result, gt, tools)
    assert (verdict.layer, verdict.ok) == ("call_match", False)
    assert "needs no tool" in (verdict.reason or "")


def test_format_errors_and_the_layer_order() -> None:
    gt = TASKS["travel-convert"].ground_truth

    def breaker(kind: str):
        def mutate(t: int, s: int, calls: list[ToolCall]) -> list[ToolCall]:
            c = calls[0]
            if kind == "unknown":
                return [c.model_copy(update={"name": "convert_money"})]
            if kind == "malformed":
                return [c.model_copy(update={"arguments": "{'amount': 250"})]
            if kind == "execution":
                args = json.loads(c.arguments) | {"from_currency": "XXX"}
                return [c.model_copy(update={"arguments": json.dumps(args)})]
            args = json.loads(c.arguments) | {"amount": 251}
            return [c.model_copy(update={"arguments": json.dumps(args)})]

        return mutate

    layers = {}
    for kind in ("unknown", "malformed", "execution", "wrong_value"):
        result, gt, tools = play("travel-convert", GoldPolicy(gt, breaker(kind)))
        v = verify_episode(result, gt, tools)
        layers[kind] = (v.layer, v.components)
        if kind in ("unknown", "malformed"):
            assert result.format_errors and result.format_errors[0].startswith("step 0: ")
    assert layers["unknown"][0] == "format" and layers["malformed"][0] == "format"
    assert layers["execution"] == ("execution", {"format": 1.0, "execution": 0.0})
    # a wrong amount executes fine and ends in the same (read-only) state, and this policy
    # still quotes the gold output: only the call match catches it
    assert layers["wrong_value"] == (
        "call_match",
        {"format": 1.0, "execution": 1.0, "final_state": 1.0, "outputs": 1.0, "call_match": 0.0},
    )


def test_expected_errors_are_allowed_but_others_are_not() -> None:
    result, gt, tools = play("travel-soldout-recovery")
    assert [e["type"] for e in result.tool_errors] == ["unavailable"]
    assert verify_episode(result, gt, tools).ok
    # the same error on a call the gold does not expect to fail is an execution failure
    gt2 = gt.model_copy(update={"extra": {**gt.extra, "expected_errors": []}})
    v = verify_episode(result, gt2, tools)
    assert (v.ok, v.layer) == (False, "execution")


def test_call_match_exact_rejects_extra_calls_contains_allows_them() -> None:
    def add_read(t: int, s: int, calls: list[ToolCall]) -> list[ToolCall]:
        extra = ToolCall(id="extra", name="get_user", arguments='{"user_id": "mia_chen"}')
        return [*calls, extra] if s == 0 else calls

    gt = TASKS["travel-book-cheapest-nonstop"].ground_truth
    result, gt, tools = play("travel-book-cheapest-nonstop", GoldPolicy(gt, add_read))
    assert verify_episode(result, gt, tools, call_match="contains").ok
    v = verify_episode(result, gt, tools, call_match="exact")
    assert v.layer == "call_match" and "get_user" in (v.reason or "")


def test_limits_prefix_replay_and_stop_after_turn() -> None:
    gt = TASKS["travel-book-cheapest-nonstop"].ground_truth

    async def loops(messages: Sequence[Message], tools: Any) -> Message:
        return Message(
            role="assistant",
            tool_calls=[ToolCall(id="l", name="get_user", arguments='{"user_id": "mia_chen"}')],
        )

    result, *_ = play("travel-book-cheapest-nonstop", loops, limits=EpisodeLimits(8, 3, 2))
    assert (result.end, result.steps) == ("max_steps", 3)

    # a prefix with executed calls is replayed, so the state matches before the policy acts
    full, _, tools = play("travel-book-cheapest-nonstop")
    cut = next(
        i
        for i, m in enumerate(full.messages)
        if m.role == "tool" and "booking" in (m.content or "")
    )
    prefix = [*full.messages[: cut + 1], Message(role="user", content="Thanks! Anything else?")]
    env = FACTORY.make("travel", seed=gt.env_seed)
    ep = Episode(gt, env, tools=tools, prefix=prefix)
    asyncio.run(ep.start())
    assert env.state_hash() == gt.final_state_hash
    assert ep.turn == 1  # the last user message opened a new turn

    # stop_after_turn ends the episode once that turn is answered
    two = GroundTruth(turns=[gt.turns[0], gt.turns[0].model_copy(update={"steps": []})])
    env = FACTORY.make("travel", seed=gt.env_seed)
    res = asyncio.run(run_episode(two, env, GoldPolicy(two), tools=tools, stop_after_turn=0))
    assert res.end == "done" and sum(1 for m in res.messages if m.role == "user") == 1


def test_snapshot_restore_gives_identical_continuations() -> None:
    gt = TASKS["travel-book-cheapest-nonstop"].ground_truth
    tools = FACTORY.toolset("travel").to_openai()
    env = FACTORY.make("travel", seed=gt.env_seed)
    ep = Episode(gt, env, tools=tools, system="sys")
    policy = GoldPolicy(gt)

    async def go() -> tuple[str, str]:
        await ep.start()
        await ep.advance(await policy(ep.messages, tools))
        snap = ep.snapshot()
        while not ep.done:
            await ep.advance(PolicyStep(await policy(ep.messages, tools), ["x"]))
        first = (ep.result().final_state_hash, json.dumps([m.model_dump() for m in ep.messages]))
        ep.restore(snap)
        assert len(ep.result().format_errors) == 0
        while not ep.done:
            await ep.advance(PolicyStep(await policy(ep.messages, tools), ["x"]))
        return first, (
            ep.result().final_state_hash,
            json.dumps([m.model_dump() for m in ep.messages]),
        )

    a, b = asyncio.run(go())
    assert a == b
    assert a[0] == gt.final_state_hash
