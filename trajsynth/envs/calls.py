"""What every executable environment does with a call before running it.

Each backend (the built-in domains, the simulated world, Python classes, MCP servers) answers
a call it cannot run with the same error results, in the same order:

1) an unknown tool → ``unknown_tool``;
2) arguments that are not JSON, or not a JSON object → ``malformed_arguments``;
3) with ``validate``, the first schema issue of the arguments against the tool's spec
   (missing, unknown or mistyped parameters...) → that issue's category.
"""

from __future__ import annotations

import json
from typing import Any

from ..core.schema import ToolCall
from .base import ToolResult
from .spec import ToolSpec
from .tools import ToolError
from .verifiers.schema import check_arguments

__all__ = ["error_result", "read_arguments"]


def error_result(
    call: ToolCall, args: dict[str, Any] | None, category: str, message: str
) -> ToolResult:
    """The result of ``call`` that failed with ``category`` (a :class:`ToolError`)."""
    return ToolResult(
        call_id=call.id, name=call.name, arguments=args,
        error=ToolError(category, message).to_json(),
    )  # fmt: skip


def read_arguments(
    call: ToolCall, spec: ToolSpec | None, *, validate: bool = True
) -> dict[str, Any] | ToolResult:
    """``call``'s arguments as a JSON object, or the error result to answer with instead
    (module docstring: steps 1-3). ``spec`` None means the environment has no such tool."""
    if spec is None:
        return error_result(call, None, "unknown_tool", f"unknown tool {call.name!r}")
    try:
        args = json.loads(call.arguments) if call.arguments.strip() else {}
    except json.JSONDecodeError as exc:
        return error_result(
            call, None, "malformed_arguments", f"arguments are not JSON ({exc.msg})"
        )
    if not isinstance(args, dict):
        return error_result(call, None, "malformed_arguments", "arguments must be a JSON object")
    if validate:
        issues = check_arguments(spec, args)
        if issues:
            return error_result(
                call, args, issues[0].category, "; ".join(i.message for i in issues)
            )
    return args
