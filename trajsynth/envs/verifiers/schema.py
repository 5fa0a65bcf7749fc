"""Schema check of a tool call against the tools offered: each kind of error its own category.

The first layer of verification (format) and the environment's guard before a tool runs. Given
a call and the ``tools`` list (a :class:`~trajsynth.envs.spec.Toolset`, the OpenAI list, or
its JSON text), it returns every problem as data, one :class:`SchemaIssue` each:

- ``unknown_tool``: the name is not among the tools;
- ``malformed_arguments``: the arguments are not a JSON object;
- ``missing_required``: a required parameter is absent;
- ``wrong_type``: a value's JSON type is not the declared one (``integer`` takes no floats and
  no booleans, ``number`` takes integers; as in BFCL's AST checker,
  ``bfcl_eval/eval_checker/ast_eval/ast_checker.py``);
- ``extra_parameter``: a parameter the tool does not declare (top level always; nested
  objects when ``additionalProperties`` is false);
- ``enum_violation``: a value outside ``enum``;
- ``constraint_violation``: minimum/maximum, length, pattern, item counts.

Nested values are checked recursively (array items, object properties, ``anyOf``), with the
path of the offending value (``passengers[1].dob``).

>>> tools = [{"type": "function", "function": {"name": "book", "parameters": {
...     "type": "object", "properties": {"cabin": {"type": "string", "enum": ["economy"]},
...     "seats": {"type": "integer"}}, "required": ["seats"]}}}]
>>> [i.category for i in check_call({"name": "book", "arguments": '{"cabin": "first"}'}, tools)]
['missing_required', 'enum_violation']
>>> check_call({"name": "book", "arguments": {"seats": 2}}, tools)
[]
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from ...core.jsonvalues import PATTERN_TIMEOUT_S, json_type, pattern_search
from ...core.schema import ToolCall, Trajectory
from ..spec import Toolset, ToolSpec

__all__ = [
    "SCHEMA_CATEGORIES",
    "SchemaIssue",
    "check_arguments",
    "check_call",
    "check_trajectory",
    "normalize_call",
    "to_toolset",
]

Category = Literal[
    "unknown_tool",
    "malformed_arguments",
    "missing_required",
    "wrong_type",
    "extra_parameter",
    "enum_violation",
    "constraint_violation",
]
SCHEMA_CATEGORIES: tuple[str, ...] = get_args(Category)


@dataclass(frozen=True)
class SchemaIssue:
    """One problem with one call."""

    category: Category
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.category}: {self.message}"


def type_ok(value: Any, expected: str) -> bool:
    """``value`` is of JSON Schema type ``expected`` (an integer is also a number)."""
    actual = json_type(value)
    return actual == expected or (expected == "number" and actual == "integer")


def _same(value: Any, allowed: Any) -> bool:
    """JSON equality: 1 == 1.0, but True is not 1."""
    if isinstance(value, bool) or isinstance(allowed, bool):
        return type(value) is type(allowed) and value == allowed
    return bool(value == allowed)


def _check(value: Any, schema: Any, path: str, out: list[SchemaIssue], top: bool) -> None:
    if not isinstance(schema, dict) or not schema:
        return
    # type
    expected = schema.get("type")
    if expected is not None:
        allowed = expected if isinstance(expected, list) else [expected]
        if not any(type_ok(value, t) for t in allowed if isinstance(t, str)):
            want = " or ".join(str(t) for t in allowed)
            out.append(
                SchemaIssue(
                    "wrong_type",
                    path,
                    f"{path or 'arguments'} must be {want}, got {json_type(value)} "
                    f"{json.dumps(value, ensure_ascii=False)[:60]}",
                )
            )
            return
    for key in ("anyOf", "oneOf"):
        alts = schema.get(key)
        if isinstance(alts, list) and alts:
            trials: list[list[SchemaIssue]] = []
            for alt in alts:
                trial: list[SchemaIssue] = []
                _check(value, alt, path, trial, top)
                if not trial:
                    break
                trials.append(trial)
            else:
                fewest = min(trials, key=len)
                out.extend(fewest)
                return
    # enum
    enum = schema.get("enum")
    if isinstance(enum, list) and not any(_same(value, e) for e in enum):
        shown = ", ".join(json.dumps(e, ensure_ascii=False) for e in enum[:8])
        out.append(
            SchemaIssue(
                "enum_violation",
                path,
                f"{path} is {json.dumps(value, ensure_ascii=False)[:60]}, not one of [{shown}"
                + (", ...]" if len(enum) > 8 else "]"),
            )
        )
        return
    # constraints
    _constraints(value, schema, path, out)
    # containers
    if isinstance(value, dict):
        props = schema["properties"] if isinstance(schema.get("properties"), dict) else {}
        required = schema["required"] if isinstance(schema.get("required"), list) else []
        for name in required:
            if isinstance(name, str) and name not in value:
                where = f"{path}.{name}" if path else name
                out.append(SchemaIssue("missing_required", where, f"missing required {where}"))
        extra_rule = schema.get("additionalProperties")
        for name, item in value.items():
            where = f"{path}.{name}" if path else name
            if name in props:
                _check(item, props[name], where, out, False)
            elif isinstance(extra_rule, dict):
                _check(item, extra_rule, where, out, False)
            elif extra_rule is False or (top and extra_rule is not True):
                out.append(SchemaIssue("extra_parameter", where, f"unexpected parameter {where}"))
    elif isinstance(value, list):
        prefix = schema.get("prefixItems")
        items = schema.get("items")
        for i, item in enumerate(value):
            if isinstance(prefix, list) and i < len(prefix):
                _check(item, prefix[i], f"{path}[{i}]", out, False)
            elif isinstance(items, dict):
                _check(item, items, f"{path}[{i}]", out, False)


_CONSTRAINTS = frozenset(
    {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength",
     "pattern", "minItems", "maxItems"}
)  # fmt: skip


def _constraints(value: Any, schema: dict[str, Any], path: str, out: list[SchemaIssue]) -> None:
    if _CONSTRAINTS.isdisjoint(schema):
        return
    problems = []
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        for key, ok in (
            ("minimum", lambda b: value >= b),
            ("maximum", lambda b: value <= b),
            ("exclusiveMinimum", lambda b: value > b),
            ("exclusiveMaximum", lambda b: value < b),
        ):
            bound = schema.get(key)
            if isinstance(bound, (int, float)) and not isinstance(bound, bool) and not ok(bound):
                problems.append(f"{path} = {value} breaks {key} {bound}")
    elif isinstance(value, str):
        if isinstance(schema.get("minLength"), int) and len(value) < schema["minLength"]:
            problems.append(f"{path} is shorter than {schema['minLength']} characters")
        if isinstance(schema.get("maxLength"), int) and len(value) > schema["maxLength"]:
            problems.append(f"{path} is longer than {schema['maxLength']} characters")
        pattern = schema.get("pattern")
        if isinstance(pattern, str):
            try:
                if pattern_search(pattern, value) is False:  # None: the pattern is invalid
                    problems.append(f"{path} does not match pattern {pattern}")
            except TimeoutError:
                problems.append(
                    f"{path} ({len(value):,} characters) could not be matched against pattern "
                    f"{pattern} within {PATTERN_TIMEOUT_S:g} s"
                )
    elif isinstance(value, list):
        if isinstance(schema.get("minItems"), int) and len(value) < schema["minItems"]:
            problems.append(f"{path} has fewer than {schema['minItems']} items")
        if isinstance(schema.get("maxItems"), int) and len(value) > schema["maxItems"]:
            problems.append(f"{path} has more than {schema['maxItems']} items")
    out.extend(SchemaIssue("constraint_violation", path, p) for p in problems)


def check_arguments(spec: ToolSpec | dict[str, Any], arguments: Any) -> list[SchemaIssue]:
    """Problems with ``arguments`` (a dict, or JSON text) against one tool's parameters."""
    params = spec.parameters if isinstance(spec, ToolSpec) else spec
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            return [SchemaIssue("malformed_arguments", "", f"arguments are not JSON ({exc.msg})")]
    if not isinstance(arguments, dict):
        return [
            SchemaIssue(
                "malformed_arguments",
                "",
                f"arguments must be a JSON object, got {json_type(arguments)}",
            )
        ]
    out: list[SchemaIssue] = []
    _check(arguments, {**params, "type": "object"}, "", out, True)
    return out


def to_toolset(tools: Toolset | Sequence[dict[str, Any]] | str) -> Toolset:
    """A :class:`Toolset` from any of the forms tools travel in (built once per tools JSON,
    shared: read-only)."""
    return Toolset.shared(tools)


def normalize_call(call: ToolCall | Mapping[str, Any] | tuple[str, Any]) -> tuple[str, Any]:
    """(name, arguments) from a ToolCall, an OpenAI tool-call dict, {name, arguments} or a pair.
    Arguments stay as given (dict or JSON text)."""
    if isinstance(call, ToolCall):
        return call.name, call.arguments
    if isinstance(call, tuple):
        return call[0], call[1]
    if isinstance(call, Mapping):
        fn = call["function"] if isinstance(call.get("function"), Mapping) else call
        return str(fn.get("name", "")), fn.get("arguments", {})
    raise TypeError(f"not a tool call: {call!r}")


def check_call(
    call: ToolCall | dict[str, Any] | tuple[str, Any],
    tools: Toolset | Sequence[dict[str, Any]] | str,
) -> list[SchemaIssue]:
    """Every problem with one call against the tools offered (empty when the call is valid)."""
    name, arguments = normalize_call(call)
    spec = to_toolset(tools).get(name)
    if spec is None:
        return [SchemaIssue("unknown_tool", "", f"unknown tool {name!r}")]
    return check_arguments(spec, arguments)


def check_trajectory(traj: Trajectory, tools: Iterable[Any] | None = None) -> list[str]:
    """Format errors of every call in a trajectory, one string each, ready for the
    ``format_errors`` column (``"call 2 book_flight: missing_required: missing required x"``).

    Calls of steps kept only as context (``Trajectory.context_steps``: STeCa's deviated step)
    are not checked: they are wrong on purpose.
    """
    toolset = to_toolset(list(tools) if tools is not None else traj.tools or [])
    skip = traj.context_steps()
    out = []
    i = 0
    for step, msg in enumerate(traj.assistant_steps()):
        for call in msg.tool_calls:
            if step not in skip:
                for issue in check_call(call, toolset):
                    out.append(f"call {i} {call.name}: {issue}")
            i += 1
    return out
