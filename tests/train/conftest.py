"""Fixtures for the trainer tests: a hand-written multi-turn conversation and a tiny student
built from it (tokenizer trained on it, random weights), shared by the module."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trajsynth.core.schema import Message, ToolCall, Trajectory

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "book_flight",
            "description": "Book a flight.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "seats": {"type": "integer", "enum": [1, 2]},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    },
]


def _args(**kwargs: object) -> str:
    return json.dumps(kwargs)


def conversation(i: int = 0, city: str = "Paris") -> Trajectory:
    """System, user, assistant (reasoning + two parallel calls), two tool results, assistant
    text, a second user turn, a call, its result, a final answer."""
    messages = [
        Message(role="system", content="You book trips."),
        Message(role="user", content=f"Book 2 seats to {city} and check the weather there."),
        Message(
            role="assistant",
            reasoning="Two independent calls.",
            tool_calls=[
                ToolCall(
                    id="c1", name="book_flight", arguments=f'{{"city": "{city}", "seats": 2}}'
                ),
                ToolCall(id="c2", name="get_weather", arguments=f'{{"city": "{city}"}}'),
            ],
        ),
        Message(
            role="tool", tool_call_id="c1", name="book_flight", content=f'{{"booking": "B{i}"}}'
        ),
        Message(role="tool", tool_call_id="c2", name="get_weather", content='{"sky": "sunny"}'),
        Message(role="assistant", content=f"Booked B{i}; it is sunny."),
        Message(role="user", content="And one seat to Rome?"),
        Message(
            role="assistant",
            tool_calls=[ToolCall(id="c3", name="book_flight", arguments='{"city": "Rome"}')],
        ),
        Message(role="tool", tool_call_id="c3", name="book_flight", content='{"booking": "R1"}'),
        Message(role="assistant", content="Booked R1."),
    ]
    return Trajectory(id=f"conv-{i}", task_id=f"t{i}", tools=TOOLS, messages=messages)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from trajsynth.train.tiny import TinyConfig, build_tiny

    rows = [conversation(i, city) for i, city in enumerate(["Paris", "Oslo", "Lima", "Rome"] * 5)]
    out = tmp_path_factory.mktemp("tiny")
    return build_tiny(rows, out, TinyConfig(vocab_size=400, hidden_size=32, intermediate_size=64))


@pytest.fixture(scope="module")
def tiny(tiny_dir: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(tiny_dir), AutoTokenizer.from_pretrained(tiny_dir)
