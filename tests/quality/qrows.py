"""Crafted trajectory rows for the quality tests (imported by the test modules beside it).

``conversation(...)`` writes a conversation from a compact script, so that each test states
exactly the steps, calls and results it is about.
"""

from __future__ import annotations

import json
from typing import Any

from trajsynth.core import Message, ToolCall, Trajectory

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": name,
            "parameters": {
                "type": "object",
                "properties": {p: {"type": "string"} for p in params},
                "required": list(params),
            },
        },
    }
    for name, params in [
        ("search_flights", ["destination"]),
        ("book_flight", ["flight_id"]),
        ("get_weather", ["city"]),
        ("convert", ["amount"]),
    ]
]


def call(name: str, **args: Any) -> tuple[str, dict[str, Any]]:
    return (name, args)


def conversation(
    goal: str,
    steps: list[Any],
    *,
    system: str | None = None,
) -> list[Message]:
    """Messages for ``goal`` then ``steps``.

    A step is one of:
    - ``("think", text, [calls], [results])``: an assistant message with reasoning ``text``
      (or None), the calls, then one tool message per result (None = no tool message);
    - ``("say", text)``: an assistant text message;
    - ``("user", text)``: a user message.
    """
    messages = []
    if system:
        messages.append(Message(role="system", content=system))
    messages.append(Message(role="user", content=goal))
    k = 0
    for step in steps:
        if step[0] == "say":
            messages.append(Message(role="assistant", content=step[1]))
        elif step[0] == "user":
            messages.append(Message(role="user", content=step[1]))
        else:
            _, thought, calls, results = step
            tcs = []
            for name, args in calls:
                raw = args if isinstance(args, str) else json.dumps(args)
                tcs.append(ToolCall(id=f"c{k}", name=name, arguments=raw))
                k += 1
            messages.append(Message(role="assistant", reasoning=thought, tool_calls=tcs))
            for tc, result in zip(tcs, results, strict=True):
                if result is None:
                    continue
                content = result if isinstance(result, str) else json.dumps(result)
                messages.append(
                    Message(role="tool", tool_call_id=tc.id, name=tc.name, content=content)
                )
    return messages


def row(
    rid: str,
    goal: str,
    steps: list[Any],
    *,
    success: bool | None = True,
    **fields: Any,
) -> Trajectory:
    return Trajectory(
        id=rid,
        task_id=fields.pop("task_id", f"task-{rid}"),
        goal=goal,
        domain=fields.pop("domain", "travel"),
        tools=TOOLS,
        messages=conversation(goal, steps),
        success=success,
        **fields,
    )


def dicts(messages: list[Message]) -> list[dict[str, Any]]:
    return [m.model_dump() for m in messages]


#: a two-call booking and a one-call weather lookup (the dedup tests' actions), and a goal
BOOK = [
    ("think", "find", [call("search_flights", destination="Paris")], [{"f": ["FL1"]}]),
    ("think", "book", [call("book_flight", flight_id="FL1")], [{"ok": True}]),
    ("say", "Booked FL1."),
]
WEATHER = [("think", "w", [call("get_weather", city="Paris")], [{"sky": "sun"}]), ("say", "sun")]
GOAL = "Please book a flight to Paris for next Monday morning"
