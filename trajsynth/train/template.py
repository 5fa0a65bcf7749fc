"""Trajectory → chat messages for the student's chat template, and the token ids that
continue an episode.

The template itself (ChatML with tools, calls as ``<tool_call>`` blocks, ``{% generation %}``
spans on what the assistant writes) lives in :mod:`trajsynth.llm.chat_template`, beside the
model registry that writes it into a model's folder; it is re-exported here. It is
prefix-preserving: rendering the first k messages gives a prefix of rendering k+1 (TRL checks
this; GRPO's token-in/token-out rollouts rely on it, see :func:`continuation_ids`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..core.schema import Message, Trajectory
from ..llm.chat_template import (
    ADDED_TOKENS,
    BOS,
    DEFAULT_SYSTEM,
    EOS,
    GENERATION_PROMPT,
    PAD,
    SPECIAL_TOKENS,
    chat_template,
)

__all__ = [
    "ADDED_TOKENS",
    "BOS",
    "DEFAULT_SYSTEM",
    "EOS",
    "GENERATION_PROMPT",
    "PAD",
    "SPECIAL_TOKENS",
    "chat_template",
    "continuation_ids",
    "hf_messages",
    "row_messages",
]


def _arguments(text: str) -> Any:
    """Call arguments as a JSON value when they parse (HF convention), else the raw text."""
    try:
        return json.loads(text) if text.strip() else {}
    except json.JSONDecodeError:
        return text


def hf_messages(
    messages: Sequence[Message | dict[str, Any]], *, reasoning: bool = True
) -> list[dict[str, Any]]:
    """Chat messages in the form HF chat templates take: OpenAI ``tool_calls`` entries with
    arguments as objects, ``reasoning`` as ``reasoning_content``, content never None.

    >>> call = {"id": "c1", "name": "f", "arguments": '{"a": 1}'}
    >>> hf_messages([Message(role="assistant", tool_calls=[call])])[0]["tool_calls"][0]["function"]
    {'name': 'f', 'arguments': {'a': 1}}
    """
    out: list[dict[str, Any]] = []
    for m in messages:
        msg = m if isinstance(m, Message) else Message.model_validate(m)
        d: dict[str, Any] = {"role": msg.role, "content": msg.content or ""}
        if msg.tool_calls:
            d["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": _arguments(c.arguments)},
                }
                for c in msg.tool_calls
            ]
        if msg.role == "tool":
            d["tool_call_id"] = msg.tool_call_id
            if msg.name:
                d["name"] = msg.name
        if reasoning and msg.reasoning:
            d["reasoning_content"] = msg.reasoning
        out.append(d)
    return out


def row_messages(row: Trajectory, *, reasoning: bool = True) -> list[dict[str, Any]]:
    """A trajectory row's conversation, ready for ``apply_chat_template`` (tools go separately:
    ``row.tools``). A task row (no messages yet) gives its first user request."""
    if row.messages:
        return hf_messages(row.messages, reasoning=reasoning)
    return [{"role": "user", "content": row.goal}]


def continuation_ids(
    tokenizer: Any,
    history: list[dict[str, Any]],
    new: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
) -> list[int]:
    """The token ids that follow an assistant turn's closing end-of-turn token when ``new``
    messages (tool results, a user turn) come after ``history`` (which ends with that
    assistant turn), up to and including the next generation prompt.

    GRPO rollouts append these ids to the ids the model generated, so what the model wrote is
    never re-tokenized. Both renderings are tokenized the way SFT tokenizes them
    (``apply_chat_template``), and the template must be prefix-preserving (checked here).
    """
    kwargs: dict[str, Any] = {"tools": tools or None, "tokenize": True, "return_dict": False}
    before = list(tokenizer.apply_chat_template(history, **kwargs))
    after = list(tokenizer.apply_chat_template(history + new, add_generation_prompt=True, **kwargs))
    eos = tokenizer.convert_tokens_to_ids(EOS)
    ends = [i for i, t in enumerate(before) if t == eos]
    if after[: len(before)] != before or not ends:
        raise ValueError("the chat template is not prefix-preserving after an assistant turn")
    return after[ends[-1] + 1 :]
