"""OpenAI fine-tuning JSONL: chat examples with tool calls, and the format checks.

One JSON object per line: ``messages`` (``system`` / ``user`` / ``assistant`` with optional
``tool_calls`` ``[{"id", "type": "function", "function": {"name", "arguments"}}]``, the
arguments as JSON text, / ``tool`` answering a call by ``tool_call_id``), ``tools``
(``[{"type": "function", "function": {"name", "description", "parameters"}}]``) and
``parallel_tool_calls`` (true iff some assistant turn makes more than one call). Reasoning is
left out (the format has no field for it).

:func:`check_example` runs the checks of OpenAI's cookbook notebook "Data preparation and
analysis for chat model fine-tuning" (each example a dict with a ``messages`` list, only known
keys and roles, content where it is required, an assistant message per example) plus the
rules the fine-tuning API applies to tool calls: every call answered by a following tool
message of its id before the conversation moves on, every called function offered in
``tools``, arguments that parse as JSON objects, function names matching
``^[a-zA-Z0-9_-]{1,64}$``, and ``parallel_tool_calls`` false only when no turn calls twice.
:func:`check_file` applies it to every line of a file. The export converts a row, checks it,
and skips (and counts by its first error) any row the format cannot express.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

from ..core.schema import Trajectory

__all__ = ["check_example", "check_file", "to_openai_ft_row"]

ROLES = ("system", "user", "assistant", "tool")
MESSAGE_KEYS = {
    "system": {"role", "content", "name", "weight"},
    "user": {"role", "content", "name", "weight"},
    "assistant": {"role", "content", "name", "weight", "tool_calls", "function_call"},
    "tool": {"role", "content", "tool_call_id"},
}
FUNCTION_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def _tool(tool: Any) -> dict[str, Any] | None:
    if not isinstance(tool, dict):
        return None
    fn = tool["function"] if isinstance(tool.get("function"), dict) else tool
    if not isinstance(fn.get("name"), str):
        return None
    params = fn.get("parameters")
    return {
        "type": "function",
        "function": {
            "name": fn["name"],
            "description": fn.get("description") or "",
            "parameters": params if isinstance(params, dict) else {"type": "object"},
        },
    }


def to_openai_ft_row(t: Trajectory) -> dict[str, Any]:
    """The fine-tuning example of a row (check it with :func:`check_example`)."""
    messages: list[dict[str, Any]] = []
    parallel = False
    for m in t.messages:
        if m.role == "assistant":
            msg: dict[str, Any] = {"role": "assistant"}
            if m.content:
                msg["content"] = m.content
            if m.tool_calls:
                parallel = parallel or len(m.tool_calls) > 1
                msg["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments},
                    }
                    for c in m.tool_calls
                ]
            messages.append(msg)
        elif m.role == "tool":
            messages.append(
                {"role": "tool", "tool_call_id": m.tool_call_id or "", "content": m.content or ""}
            )
        else:
            messages.append({"role": m.role, "content": m.content or ""})
    tools = [x for x in (_tool(tool) for tool in t.tools or []) if x is not None]
    return {"messages": messages, "tools": tools, "parallel_tool_calls": parallel}


def _check_tools(tools: Any, errors: list[str]) -> set[str]:
    names: set[str] = set()
    if tools is None:
        return names
    if not isinstance(tools, list):
        errors.append("tools_not_a_list")
        return names
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or tool.get("type") != "function":
            errors.append(f"tool_malformed: tools[{i}]")
            continue
        name = fn.get("name")
        if not isinstance(name, str) or not FUNCTION_NAME.match(name):
            errors.append(f"tool_name_invalid: tools[{i}] {name!r}")
        elif name in names:
            errors.append(f"tool_name_repeated: {name!r}")
        else:
            names.add(name)
        params = fn.get("parameters")
        if params is not None and not isinstance(params, dict):
            errors.append(f"tool_parameters_not_an_object: {name!r}")
    return names


def _check_call(call: Any, where: str, offered: set[str], errors: list[str]) -> str | None:
    call_id = call.get("id") if isinstance(call, dict) else None
    if not isinstance(call, dict) or not isinstance(call_id, str) or not call_id:
        errors.append(f"tool_call_missing_id: {where}")
        return None
    fn = call.get("function")
    if call.get("type") != "function" or not isinstance(fn, dict):
        errors.append(f"tool_call_malformed: {where}")
        return call_id
    name, args = fn.get("name"), fn.get("arguments")
    if not isinstance(name, str) or not FUNCTION_NAME.match(name):
        errors.append(f"function_name_invalid: {where} {name!r}")
    elif name not in offered:
        errors.append(f"function_not_in_tools: {where} {name!r}")
    if not isinstance(args, str):
        errors.append(f"arguments_not_a_string: {where}")
    else:
        try:
            parsed = json.loads(args)
        except ValueError:
            errors.append(f"arguments_invalid_json: {where}")
        else:
            if not isinstance(parsed, dict):
                errors.append(f"arguments_not_an_object: {where}")
    return call_id


def check_example(example: Any) -> list[str]:
    """Every format error of one fine-tuning example, each ``"<code>: <where>"`` (empty: ok)."""
    if not isinstance(example, dict):
        return ["data_type: the example is not a JSON object"]
    errors: list[str] = []
    unknown = set(example) - {"messages", "tools", "parallel_tool_calls", "functions"}
    if unknown:
        errors.append(f"example_unrecognized_key: {sorted(unknown)}")
    messages = example.get("messages")
    if not isinstance(messages, list) or not messages:
        return [*errors, "missing_messages_list"]
    offered = _check_tools(example.get("tools"), errors)
    parallel = example.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        errors.append("parallel_tool_calls_not_a_bool")
    pending: list[str] = []  # call ids of the last assistant turn not yet answered
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or "role" not in m:
            errors.append(f"message_missing_key: {where} role")
            continue
        role = m["role"]
        if role not in ROLES:
            errors.append(f"unrecognized_role: {where} {role!r}")
            continue
        extra = set(m) - MESSAGE_KEYS[role]
        if extra:
            errors.append(f"message_unrecognized_key: {where} {sorted(extra)}")
        content = m.get("content")
        if content is not None and not isinstance(content, str):
            errors.append(f"content_not_a_string: {where}")
        if role == "tool":
            cid = m.get("tool_call_id")
            if cid not in pending:
                errors.append(f"tool_message_without_call: {where} {cid!r}")
            else:
                pending.remove(cid)
            if not isinstance(content, str):
                errors.append(f"missing_content: {where}")
            continue
        if pending:
            errors.append(f"tool_calls_unanswered: before {where} {pending}")
            pending = []
        if role == "assistant":
            calls = m.get("tool_calls")
            if calls is not None and (not isinstance(calls, list) or not calls):
                errors.append(f"tool_calls_not_a_list: {where}")
                calls = None
            if not content and not calls and "function_call" not in m:
                errors.append(f"missing_content: {where} (no content or tool_calls)")
            ids = [
                _check_call(c, f"{where}.tool_calls[{j}]", offered, errors)
                for j, c in enumerate(calls or [])
            ]
            pending = [c for c in ids if c is not None]
            if len(set(pending)) != len(pending):
                errors.append(f"tool_call_id_repeated: {where}")
            if len(pending) > 1 and parallel is False:
                errors.append(f"parallel_calls_not_allowed: {where}")
        elif not isinstance(content, str) or not content:
            errors.append(f"missing_content: {where}")
    if pending:
        errors.append(f"tool_calls_unanswered: at the end {pending}")
    if not any(isinstance(m, dict) and m.get("role") == "assistant" for m in messages):
        errors.append("example_missing_assistant_message")
    return errors


def check_file(path: str | Path) -> tuple[int, Counter[str]]:
    """Check every line of a fine-tuning JSONL file: (examples, error code → count)."""
    errors: Counter[str] = Counter()
    n = 0
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            n += 1
            try:
                example = json.loads(line)
            except ValueError:
                errors["invalid_json"] += 1
                continue
            for err in check_example(example):
                errors[err.split(":", 1)[0]] += 1
    return n, errors
