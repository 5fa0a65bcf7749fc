"""Replaying fixed assistant steps through the shared episode runner, for the repair methods
(ECHO's rewrites, STeCa's calibrated continuations and gold experts, HardGen's gold traces).

A repaired trajectory is never assembled by hand: its assistant steps are advanced through
:class:`~trajsynth.envs.episode.Episode` in a fresh environment, so every tool message is what
the tool returns *now* and the user's messages are the gold user's. What it offers:

- :func:`play_steps`: an episode from ``opening`` that advances the given assistant messages in
  order (as long as the episode runs) and returns the result and how many were played;
- :func:`gold_messages`: the assistant steps of a task's gold — per turn a clarifying question
  where the turn needs one, the gold call steps, then a text answer;
- :func:`calls_message`: an assistant message making the given calls (stable call ids);
- :func:`message_key`: what makes two sampled messages the same branch of a rollout tree
  (text, reasoning and calls, call ids aside);
- :func:`step_slices`: for each assistant step of a conversation, the index of its message and
  the end (exclusive) of the messages that answer it (tool results or the user's reply).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ...core.ids import canonical_json, stable_hash
from ...core.schema import Message, ToolCall
from ...core.task import GoldCall, GroundTruth
from ...envs.base import Environment
from ...envs.episode import Episode, EpisodeLimits, EpisodeResult, is_question

__all__ = [
    "calls_message",
    "gold_messages",
    "message_key",
    "play_steps",
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
) -> tuple[EpisodeResult, int]:
    """Advance ``steps`` in a fresh episode of ``task`` from ``opening`` (module docstring);
    returns the episode's result and the number of steps played before it ended."""
    ep = Episode(task, env, tools=tools, prefix=list(opening), limits=limits)
    await ep.start()
    played = 0
    for msg in steps:
        if ep.done:
            break
        await ep.advance(msg)
        played += 1
    return ep.result(), played
