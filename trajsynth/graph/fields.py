"""Step 1 of :mod:`.build`: a tool's response schema flattened into return fields, and the
concrete values of a field path in an actual output."""

from __future__ import annotations

import re
from typing import Any

from ..envs.spec import ToolSpec
from .compat import UNTYPED, _nullable, _types
from .container import ReturnField


def return_fields(spec: ToolSpec, max_depth: int = 3) -> list[ReturnField]:
    """Step 1: the flattened fields of ``spec``'s response (``result`` when it has none)."""
    if spec.response is None:
        return [ReturnField(spec.name, "result", (UNTYPED,), f"{spec.name}: {spec.description}")]
    out: list[ReturnField] = []

    def walk(schema: Any, path: str, depth: int) -> None:
        if not isinstance(schema, dict) or depth > max_depth:
            return
        types = _types(schema)
        if path:
            items = schema.get("items") if "array" in types else None
            out.append(
                ReturnField(
                    spec.name,
                    path,
                    types,
                    str(schema.get("description") or ""),
                    _types(items) if isinstance(items, dict) else (),
                    _nullable(schema),
                )
            )
        if "object" in types:
            for name, sub in (schema.get("properties") or {}).items():
                walk(sub, f"{path}.{name}" if path else name, depth + 1)
        if "array" in types and isinstance(schema.get("items"), dict):
            items = schema["items"]
            if "object" in _types(items):
                for name, sub in (items.get("properties") or {}).items():
                    walk(sub, f"{path}[].{name}", depth + 1)
            elif path:
                desc = str(items.get("description") or schema.get("description") or "")
                out.append(ReturnField(spec.name, f"{path}[]", _types(items), desc))

    walk(spec.response, "", 0)
    if not out:  # an object with no declared properties, or a scalar response
        out.append(
            ReturnField(
                spec.name,
                "result",
                _types(spec.response),
                str(spec.response.get("description") or spec.description),
            )
        )
    return out


def resolve_field(output: Any, path: str) -> list[tuple[str, Any]]:
    """Every concrete value of a field path in an output: ``[(concrete path, value)]``.

    >>> resolve_field({"flights": [{"flight_id": "A"}, {"flight_id": "B"}]}, "flights[].flight_id")
    [('flights[0].flight_id', 'A'), ('flights[1].flight_id', 'B')]
    >>> resolve_field({"x": 1}, "result")
    [('', {'x': 1})]
    """
    if path == "result" and not (isinstance(output, dict) and "result" in output):
        return [("", output)]
    found: list[tuple[str, Any]] = [("", output)]
    for part in re.findall(r"\[\]|[^.\[\]]+", path):
        nxt: list[tuple[str, Any]] = []
        for concrete, value in found:
            if part == "[]":
                if isinstance(value, list):
                    nxt += [(f"{concrete}[{i}]", v) for i, v in enumerate(value)]
            elif isinstance(value, dict) and part in value:
                nxt.append((f"{concrete}.{part}" if concrete else part, value[part]))
        found = nxt
    return [(c, v) for c, v in found if v is not None]
