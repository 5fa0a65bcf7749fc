"""Executable tools: a Python function plus the :class:`ToolSpec` generated from its signature.

A built-in tool is written once, as a typed function; its OpenAI spec and response schema come
from the annotations, so the spec a model sees and the code that runs can never drift apart::

    class Flight(TypedDict):
        flight_id: Annotated[str, "Flight id; pass it to book_flight."]
        price: Annotated[float, "Price per seat in USD."]

    @tool(writes=False)
    def get_flight(db: State, flight_id: Annotated[str, "Id from search_flights."]) -> Flight:
        \"\"\"Look up one flight.\"\"\"
        ...

Steps :func:`tool` takes:

1) the first parameter is the environment's :class:`~trajsynth.envs.state.State` and is not
   part of the spec; every other parameter must be ``Annotated[type, "description", *extras]``;
2) types map to JSON Schema (:func:`json_schema_of`): ``str``/``int``/``float``/``bool``,
   ``list[T]``, ``dict[str, T]``, ``Literal[...]`` (an ``enum``), ``T | None`` and
   ``TypedDict`` classes (objects with described fields); ``dict`` extras merge into the
   schema (``{"minimum": 1}``);
3) a parameter with a default is optional and the default is written into its schema;
4) the return annotation (a ``TypedDict``) becomes the response schema;
5) the docstring's first paragraph becomes the description.

A tool signals a failure the model should see (unknown id, sold-out flight, missing file) by
raising :class:`ToolError` with a category; the environment turns it into an error observation.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Union, get_args, get_origin, get_type_hints

from .spec import ToolSpec

__all__ = [
    "ERROR_CATEGORIES",
    "ToolError",
    "ToolImpl",
    "json_schema_of",
    "tool",
]

#: categories of tool errors (returned to the model as data, never raised out of step())
ERROR_CATEGORIES = {
    # the call itself is wrong (checked against the spec before the tool runs)
    "unknown_tool": "no tool of that name is offered",
    "malformed_arguments": "arguments are not a JSON object",
    "missing_required": "a required parameter is missing",
    "wrong_type": "a value has the wrong JSON type",
    "extra_parameter": "a parameter the tool does not take",
    "enum_violation": "a value outside the allowed set",
    "constraint_violation": "a value breaks a schema constraint (minimum, pattern, ...)",
    # the tool ran and refused
    "not_found": "an id, file or name that does not exist",
    "unavailable": "sold out, fully booked, out of stock",
    "conflict": "the object is in a state that forbids this (already cancelled, exists)",
    "invalid_value": "a value the tool cannot use (a date in the past, a bad expression)",
    "permission_denied": "the user may not do this",
    "limit_exceeded": "a quantity above what is allowed",
    # infrastructure
    "execution_failed": "the code or command failed in the sandbox",
    "not_recorded": "replay found no recorded result for this call",
    "tool_crashed": "the tool raised an unexpected exception (a bug in the tool)",
}


class ToolError(Exception):
    """Raised by a tool implementation: the call failed in a way the model should see."""

    def __init__(self, category: str, message: str) -> None:
        if category not in ERROR_CATEGORIES:
            raise ValueError(f"unknown tool error category {category!r}")
        super().__init__(message)
        self.category = category
        self.message = message

    def to_json(self) -> dict[str, str]:
        return {"type": self.category, "message": self.message}


_SIMPLE = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__required_keys__")


def json_schema_of(tp: Any) -> dict[str, Any]:
    """Step 2: a Python annotation → JSON Schema.

    >>> json_schema_of(list[int])
    {'type': 'array', 'items': {'type': 'integer'}}
    >>> json_schema_of(Annotated[Literal["economy", "business"], "Cabin class."])
    {'type': 'string', 'enum': ['economy', 'business'], 'description': 'Cabin class.'}
    """
    origin = get_origin(tp)
    if origin is Annotated:
        base, *extras = get_args(tp)
        schema = json_schema_of(base)
        for extra in extras:
            if isinstance(extra, str):
                schema["description"] = extra
            elif isinstance(extra, dict):
                schema.update(extra)
        return schema
    if tp in _SIMPLE:
        return {"type": _SIMPLE[tp]}
    if tp is Any:
        return {}
    if origin is Literal:
        values = list(get_args(tp))
        kinds = {_SIMPLE[type(v)] for v in values}
        enum: dict[str, Any] = {"enum": values}
        if len(kinds) == 1:
            enum = {"type": kinds.pop(), "enum": values}
        return enum
    if origin in (Union, types.UnionType):
        members = [a for a in get_args(tp) if a is not type(None)]
        nullable = len(members) < len(get_args(tp))
        if len(members) == 1:
            schema = json_schema_of(members[0])
            if nullable and isinstance(schema.get("type"), str):
                return {**schema, "type": [schema["type"], "null"]}
            if nullable:
                return {"anyOf": [schema, {"type": "null"}]}
            return schema
        alts = [json_schema_of(m) for m in members] + ([{"type": "null"}] if nullable else [])
        return {"anyOf": alts}
    if origin in (list, tuple, typing.Sequence) or tp is list:
        args = get_args(tp)
        return {"type": "array", **({"items": json_schema_of(args[0])} if args else {})}
    if origin is dict or tp is dict:
        args = get_args(tp)
        out: dict[str, Any] = {"type": "object"}
        if args:
            out["additionalProperties"] = json_schema_of(args[1])
        return out
    if _is_typeddict(tp):
        hints = get_type_hints(tp, include_extras=True)
        props = {name: json_schema_of(h) for name, h in hints.items()}
        schema = {"type": "object", "properties": props}
        required = [n for n in hints if n in tp.__required_keys__]
        if required:
            schema["required"] = required
        doc = inspect.getdoc(tp)
        if doc and doc != inspect.getdoc(dict):
            schema["description"] = doc.split("\n\n")[0].replace("\n", " ")
        return schema
    raise TypeError(f"no JSON Schema for annotation {tp!r}")


@dataclass
class ToolImpl:
    """A tool's spec and the function that runs it."""

    spec: ToolSpec
    fn: Callable[..., Any]
    writes: bool = False
    terminal: bool = False
    defaults: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.spec.name

    def __call__(self, state: Any, arguments: dict[str, Any]) -> Any:
        """Run with ``arguments`` (already checked against the spec) plus defaults."""
        return self.fn(state, **{**self.defaults, **arguments})


def tool(
    *, writes: bool = False, terminal: bool = False, name: str | None = None
) -> Callable[[Callable[..., Any]], ToolImpl]:
    """Make a :class:`ToolImpl` from a typed function (steps 1-5 of the module docstring).

    ``writes``: the tool may change the state (read-only tools never do); ``terminal``: calling
    it ends the episode (e.g. a hand-off to a human).
    """

    def wrap(fn: Callable[..., Any]) -> ToolImpl:
        sig = inspect.signature(fn)
        hints = get_type_hints(fn, include_extras=True)
        params = list(sig.parameters.values())[1:]  # 1) skip the state
        props: dict[str, Any] = {}
        required: list[str] = []
        defaults: dict[str, Any] = {}
        for p in params:
            hint = hints.get(p.name)
            if get_origin(hint) is not Annotated:
                raise TypeError(f"{fn.__name__}.{p.name}: annotate as Annotated[type, 'desc']")
            schema = json_schema_of(hint)  # 2)
            if p.default is inspect.Parameter.empty:
                required.append(p.name)
            else:  # 3)
                defaults[p.name] = p.default
                if p.default is not None:
                    schema["default"] = p.default
            props[p.name] = schema
        parameters: dict[str, Any] = {"type": "object", "properties": props}
        if required:
            parameters["required"] = required
        returns = hints.get("return")
        response = json_schema_of(returns) if returns is not None else None  # 4)
        doc = inspect.getdoc(fn) or ""
        spec = ToolSpec(
            name=name or fn.__name__,
            description=doc.split("\n\n")[0].replace("\n", " ").strip(),  # 5)
            parameters=parameters,
            response=response,
            extra={"writes": writes, **({"terminal": True} if terminal else {})},
        )
        problems = spec.problems()
        if problems:
            raise TypeError(f"tool {spec.name}: {'; '.join(problems)}")
        return ToolImpl(spec=spec, fn=fn, writes=writes, terminal=terminal, defaults=defaults)

    return wrap
