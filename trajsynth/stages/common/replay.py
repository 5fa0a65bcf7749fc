"""Replaying fixed assistant steps through the shared episode runner, for the repair methods
(ECHO's rewrites, STeCa's calibrated continuations and gold experts, HardGen's gold traces).

A repaired trajectory is never assembled by hand: its assistant steps are advanced through
:class:`~trajsynth.envs.episode.Episode` in a fresh environment, so every tool message is what
the tool returns *now* and the user's messages are the gold user's. What it offers:

- :func:`play_steps`: an episode from ``opening`` that advances the given assistant messages in
  order (as long as the episode runs) and returns the result and how many were played
  (:func:`advance_steps` does the same on an episode the caller made and keeps);
- :func:`gold_messages`: the assistant steps of a task's gold — per turn a clarifying question
  where the turn needs one, the gold call steps, then a text answer;
- :func:`calls_message`: an assistant message making the given calls (stable call ids);
- :func:`message_key`: what makes two sampled messages the same branch of a rollout tree
  (text, reasoning and calls, call ids aside);
- :func:`step_slices`: for each assistant step of a conversation, the index of its message and
  the end (exclusive) of the messages that answer it (tool results or the user's reply);
- :func:`replay_calls`: a row's calls replayed in order in a fresh environment of its domain,
  each recorded result compared with what the tool returns now (``verify``'s execution layer,
  ``expire``'s check of rows whose environment changed).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ...core.errors import EndpointError
from ...core.ids import canonical_json, stable_hash
from ...core.schema import Message, ToolCall, Trajectory
from ...core.task import GoldCall, GroundTruth
from ...core.volatile import same_result
from ...envs.base import Environment
from ...envs.episode import Episode, EpisodeLimits, EpisodeResult, is_question
from ...quality.trace import parse_trace

__all__ = [
    "advance_steps",
    "calls_message",
    "gold_messages",
    "message_key",
    "play_steps",
    "replay_calls",
    "step_slices",
]


def calls_message(
    calls: Sequence[GoldCall | dict[str, Any]],
    *,
    reasoning: str | None = None,
    content: str | None = None,
    key: Any = "",
) -> Message:
    """An assistant message making ``calls`` (ids derived from ``key`` and the calls)."""
    out = []
    for j, c in enumerate(calls):
        name = c.name if isinstance(c, GoldCall) else str(c["name"])
        args = c.arguments if isinstance(c, GoldCall) else c.get("arguments", {})
        text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        out.append(
            ToolCall(id="call_" + stable_hash([key, j, name, text], digest_size=6), name=name,
                     arguments=text)
        )  # fmt: skip
    return Message(role="assistant", content=content, tool_calls=out, reasoning=reasoning)


def gold_messages(gt: GroundTruth, *, key: Any = "gold") -> list[Message]:
    """The assistant steps of the task's gold, turn by turn (module docstring)."""
    out: list[Message] = []
    last = len(gt.turns) - 1
    for t, turn in enumerate(gt.turns):
        if turn.kind == "clarify" and turn.clarification:
            ask = turn.answer if is_question(turn.answer) else None
            out.append(
                Message(
                    role="assistant",
                    content=ask or "Could you give me the detail I still need for this?",
                )
            )
        for s, step in enumerate(turn.steps):
            out.append(calls_message(step, key=[key, t, s]))
        if turn.kind == "clarify" and not turn.steps and turn.answer:
            continue  # a request for a tool that is not offered: the question is the answer
        answer = turn.answer if turn.answer and not is_question(turn.answer) else "Done."
        if t == last and gt.required_outputs:
            answer = answer.rstrip(".") + ": " + "; ".join(gt.required_outputs) + "."
        out.append(Message(role="assistant", content=answer))
    return out


def message_key(message: Message) -> str:
    """Equal for two messages that say and do the same (call ids aside)."""
    calls = [[c.name, c.arguments] for c in message.tool_calls]
    return canonical_json([message.content, message.reasoning, calls])


def step_slices(messages: Sequence[Message]) -> list[tuple[int, int]]:
    """(index of the assistant message, end of the messages answering it) per step."""
    idx = [i for i, m in enumerate(messages) if m.role == "assistant"]
    out = []
    for k, i in enumerate(idx):
        nxt = idx[k + 1] if k + 1 < len(idx) else len(messages)
        end = i + 1
        while end < nxt and messages[end].role in ("tool", "user"):
            end += 1
        out.append((i, end))
    return out


async def play_steps(
    task: GroundTruth,
    env: Environment,
    opening: Sequence[Message],
    steps: Sequence[Message],
    *,
    tools: list[dict[str, Any]],
    limits: EpisodeLimits | None = None,
    stop_after_turn: int | None = None,
) -> tuple[EpisodeResult, int]:
    """Advance ``steps`` in a fresh episode of ``task`` from ``opening`` (module docstring);
    returns the episode's result and the number of steps played before it ended."""
    ep = Episode(
        task, env, tools=tools, prefix=list(opening), limits=limits,
        stop_after_turn=stop_after_turn,
    )  # fmt: skip
    played = await advance_steps(ep, steps)
    return ep.result(), played


async def advance_steps(ep: Episode, steps: Sequence[Message]) -> int:
    """Start ``ep`` and advance ``steps`` in order as long as it runs (:func:`play_steps`
    on an episode the caller keeps, e.g. to snapshot where the steps leave it); returns the
    number of steps played."""
    await ep.start()
    played = 0
    for msg in steps:
        if ep.done:
            break
        await ep.advance(msg)
        played += 1
    return played


def same_observation(recorded: str, replayed: str) -> bool:
    """Whether a recorded tool result is the replayed one (as text, or as the same JSON), but
    for volatile parts (times, minted ids: :mod:`trajsynth.core.volatile`)."""
    return recorded.strip() == replayed.strip() or same_result(recorded, replayed)


def replay_calls(
    row: Trajectory,
    gt: GroundTruth | None,
    envs: Any,
    *,
    tool_errors_fail: bool = False,
    match_observations: bool = True,
) -> tuple[bool, str]:
    """``(holds, why not)``: ``row``'s calls replayed in order in a fresh environment of its
    domain (``envs``: the stage's ``ctx.envs``), in the task's seed and initial state. It
    does not hold when a recorded result differs from the replayed one, when (with
    ``tool_errors_fail``) a call returns an error, or when the replay raises. An endpoint's
    failure (a simulated tool's LLM) is raised, never a verdict."""
    trace = parse_trace([m.model_dump() for m in row.messages], row.tools)
    try:
        env = envs.make(
            row.domain,
            seed=gt.env_seed if gt else 0,
            initial_state=gt.initial_state if gt else None,
        )
        env.reset(gt)
        for i, (call, seen) in enumerate(zip(row.calls(), trace.calls, strict=True)):
            result = env.execute(ToolCall(id=call.id, name=call.name, arguments=call.arguments))
            if tool_errors_fail and not result.ok:
                return False, f"call {i} {call.name}: {result.category}: {result.error}"
            if match_observations and seen.observation is not None:
                replayed = env.format_observation(result)
                if not same_observation(seen.observation, replayed):
                    return False, (
                        f"call {i} {call.name}: the recorded result differs from the "
                        f"replayed one ({replayed[:120]!r})"
                    )
    except EndpointError:  # a simulated tool's endpoint failed: no replay at all
        raise
    except Exception as exc:  # a tool that crashes is an execution failure of this row
        return False, f"replay raised {type(exc).__name__}: {exc}"
    return True, ""


def final_state_holds(
    row: Trajectory, gt: GroundTruth, envs: Any, *, use_cached: bool = False
) -> tuple[bool, str]:
    """``(holds, why not)``: ``row``'s calls and the gold's, each replayed on a fresh
    environment, end in the same state (tau-bench's check,
    :func:`~trajsynth.envs.verifiers.final_state_match`); ``use_cached`` trusts the gold's
    recorded state hash instead of replaying it."""
    from ...envs.verifiers import final_state_match

    def make_env() -> Any:
        return envs.make(row.domain, seed=gt.env_seed, initial_state=gt.initial_state)

    try:
        res = final_state_match(row, gt, make_env, use_cached=use_cached)
    except EndpointError:  # a simulated tool's endpoint failed: no replay at all
        raise
    except Exception as exc:
        return False, f"final-state replay raised {type(exc).__name__}: {exc}"
    if res.ok:
        return True, ""
    what = "; ".join(res.diff.describe()[:3]) if res.diff is not None else ""
    return False, "final state differs from the gold state" + (f": {what}" if what else "")
