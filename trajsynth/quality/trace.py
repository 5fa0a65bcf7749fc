"""A read-only view of one trajectory's messages: steps, calls, observations, errors, values.

Scores (:mod:`trajsynth.quality.scores`) and the difficulty heuristic
(:mod:`trajsynth.quality.difficulty`) both need the same facts about a conversation: which
call got which tool result, whether that result was an error, which values the user or a tool
had said before a call. :func:`parse_trace` computes them once from plain message dicts (as
``pa.Table.to_pylist`` gives them; no pydantic objects, so it is cheap per row).

Conventions, documented once here:

- a *step* is an assistant message; a *call* is one entry of its ``tool_calls``;
- a call's *observation* is the tool message whose ``tool_call_id`` is the call's id; tool
  messages without ids are matched to the calls of the preceding assistant message in order;
  a call with no tool message has no observation;
- an observation is an *error* (:func:`is_error_observation`) when it is a JSON object with
  a truthy ``error`` key or a ``status`` of error/failed/failure, or text that starts with
  "error" or "exception" or holds a Python traceback;
- *values* of a JSON document (:func:`leaf_values`) are its string and number leaves;
  booleans and nulls are not values, strings shorter than 2 characters are ignored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.ids import canonical_json
from ..core.jsonvalues import json_leaves
from ..core.surface import other_form

__all__ = [
    "Call",
    "Trace",
    "is_error_observation",
    "leaf_values",
    "number_set",
    "parse_trace",
    "tool_names",
    "value_in_text",
]

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
_ERROR_STATUS = {"error", "failed", "failure"}


def _get(m: Any, key: str) -> Any:
    return m.get(key) if isinstance(m, dict) else getattr(m, key, None)


def is_error_observation(content: str | None) -> bool:
    """Whether a tool result reports a failure (see the module docstring).

    >>> is_error_observation('{"error": {"type": "not_found", "message": "no flight"}}')
    True
    >>> is_error_observation('{"status": "ok", "flights": []}')
    False
    >>> is_error_observation("Error: user not found"), is_error_observation("42")
    (True, False)
    """
    if content is None:
        return False
    text = content.strip()
    if text[:1] in ("{", "["):
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if isinstance(value, dict):
            if value.get("error"):
                return True
            status = value.get("status")
            return isinstance(status, str) and status.lower() in _ERROR_STATUS
        if value is not None:
            return False
    lower = text.lower()
    return lower.startswith(("error", "exception")) or "traceback (most recent call last)" in lower


def leaf_values(value: Any) -> list[str | float]:
    """String and number leaves of a JSON value (strings casefolded, stripped; see above).

    >>> leaf_values({"a": "Paris", "b": [1, 2.5, True, None, "x"], "c": {"d": "HAT136"}})
    ['paris', 1.0, 2.5, 'hat136']
    """
    out: list[str | float] = []
    for v in json_leaves(value):
        if isinstance(v, bool) or v is None:
            continue
        if isinstance(v, (int, float)):
            out.append(float(v))
        elif isinstance(v, str):
            s = v.strip().casefold()
            if len(s) >= 2:
                out.append(s)
    return out


def number_set(text: str) -> set[float]:
    """Every number written in ``text`` (thousands separators allowed).

    >>> sorted(number_set("pay $1,250.50 for 2 bags, ref 7"))
    [2.0, 7.0, 1250.5]
    """
    return {float(x) for x in _NUMBER.findall(_THOUSANDS.sub("", text))}


def value_in_text(value: str | float, text: str, numbers: set[float]) -> bool:
    """Whether a leaf value occurs in ``text`` (casefolded) or, for numbers, ``numbers`` —
    or is written there in a form that maps back to exactly it ("March 5, 2024" for
    "2024-03-05", "two" for 2; :mod:`trajsynth.core.surface`)."""
    if isinstance(value, float):
        return value in numbers or other_form(value, text) is not None
    return value in text or other_form(value, text) is not None


def tool_names(tools: Any) -> set[str]:
    """Names of the functions in an OpenAI ``tools`` list (also accepts bare functions)."""
    names: set[str] = set()
    for t in tools or []:
        if not isinstance(t, dict):
            continue
        fn = t.get("function", t)
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            names.add(fn["name"])
    return names


def _schema_values(tools: Any) -> list[str | float]:
    """Enum values and defaults in the tools' parameter schemas (values the tools give)."""
    out: list[str | float] = []
    stack: list[dict[str, Any] | list[Any]] = [t for t in tools or [] if isinstance(t, dict)]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, v in node.items():
                if (key == "enum" and isinstance(v, list)) or key == "default":
                    out.extend(leaf_values(v))
                elif isinstance(v, (dict, list)):
                    stack.append(v)
        elif isinstance(node, list):
            stack.extend(x for x in node if isinstance(x, (dict, list)))
    return out


@dataclass
class Call:
    """One tool call and what came back."""

    index: int  # position among all calls
    step: int  # position of its assistant message among assistant messages
    name: str
    arguments: str  # raw JSON text
    args: dict[str, Any] | None  # parsed, None when not a JSON object
    observation: str | None  # the tool message's content, None when there is none
    error: bool  # the observation reports a failure
    known_tool: bool  # the name is among the offered tools (True when no tools are known)
    grounded: list[bool] = field(default_factory=list)  # per argument value: seen before?

    @property
    def signature(self) -> str:
        """Name plus canonical arguments: equal for two identical calls."""
        body = canonical_json(self.args) if self.args is not None else self.arguments
        return f"{self.name}\x1f{body}"

    @property
    def succeeded(self) -> bool:
        return self.observation is not None and not self.error


@dataclass
class Trace:
    """Everything the scores need from one conversation."""

    steps: list[dict[str, Any]]  # the assistant messages, as dicts
    calls: list[Call]
    user_turns: int
    replies: list[tuple[int, str]]  # (message position, text) of assistant text content
    first_success_at: int | None  # message position of the first successful observation
    observation_values: list[list[str | float]]  # per call: values of its observation
    messages: int

    @property
    def num_calls(self) -> int:
        return len(self.calls)


def _parse_args(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return {}
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _observation_values(content: str | None) -> list[str | float]:
    if content is None:
        return []
    try:
        value = json.loads(content)
    except ValueError:
        value = content
    if isinstance(value, str):
        # free text: keep tokens that carry data (contain a digit) and numbers
        tokens = [t.casefold() for t in re.findall(r"[\w.-]{3,}", value) if re.search(r"\d", t)]
        return [*tokens, *sorted(number_set(value))]
    return leaf_values(value)


def parse_trace(messages: Sequence[Any], tools: Any = None) -> Trace:
    """Parse a conversation (message dicts or :class:`~trajsynth.core.Message` objects)."""
    names = tool_names(tools)
    corpus_parts: list[str] = []
    for v in _schema_values(tools):
        corpus_parts.append(str(v) if isinstance(v, str) else repr(v))
    corpus = "\n".join(corpus_parts)
    numbers = number_set(corpus)
    steps: list[dict[str, Any]] = []
    calls: list[Call] = []
    by_id: dict[str, Call] = {}
    pending: list[Call] = []  # calls of the last assistant message still without a result
    replies: list[tuple[int, str]] = []
    first_success_at: int | None = None
    user_turns = 0
    for pos, m in enumerate(messages):
        role = _get(m, "role")
        content = _get(m, "content")
        if role in ("system", "user"):
            if role == "user":
                user_turns += 1
            if content:
                corpus += "\n" + content.casefold()
                numbers |= number_set(content)
        elif role == "assistant":
            step_index = len(steps)
            steps.append(m if isinstance(m, dict) else m.model_dump())
            pending = []
            for c in _get(m, "tool_calls") or []:
                name = _get(c, "name") or ""
                raw = _get(c, "arguments")
                args = _parse_args(raw)
                call = Call(
                    index=len(calls),
                    step=step_index,
                    name=name,
                    arguments=raw if raw is not None else "{}",
                    args=args,
                    observation=None,
                    error=False,
                    known_tool=(not names) or name in names,
                )
                call.grounded = [value_in_text(v, corpus, numbers) for v in leaf_values(args or {})]
                calls.append(call)
                pending.append(call)
                cid = _get(c, "id")
                if cid:
                    by_id[cid] = call
            if content and content.strip():
                replies.append((pos, content))
        elif role == "tool":
            cid = _get(m, "tool_call_id")
            answered = by_id.get(cid) if cid else None
            if answered is None or answered.observation is not None:
                answered = next((c for c in pending if c.observation is None), None)
            if answered is not None:
                answered.observation = content if content is not None else ""
                answered.error = is_error_observation(answered.observation)
                if answered.succeeded and first_success_at is None:
                    first_success_at = pos
            if content:
                corpus += "\n" + content.casefold()
                numbers |= number_set(content)
    return Trace(
        steps=steps,
        calls=calls,
        user_turns=user_turns,
        replies=replies,
        first_success_at=first_success_at,
        observation_values=[_observation_values(c.observation) for c in calls],
        messages=len(messages),
    )
