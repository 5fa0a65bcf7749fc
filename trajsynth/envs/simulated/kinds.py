"""The entity kinds of a toolset for :mod:`trajsynth.envs.simulated`: each kind's id names and
fields (what a new episode's population holds), the kinds whose ids only a tool can give, the
response schemas inferred for tools that declare none, and new ids."""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..spec import Toolset
from .effects import ToolEffect, id_kind, is_id_param, tool_effect
from .values import _types


@dataclass
class _Kind:
    id_names: list[str]
    id_schema: dict[str, Any]
    fields: dict[str, dict[str, Any]]


def _id_schema(fields: _Kind | None) -> dict[str, Any]:
    return fields.id_schema if fields else {"type": "string"}


def _id_fields(toolset: Toolset, effects: Mapping[str, ToolEffect]) -> dict[str, _Kind]:
    """Every entity kind an id parameter names, with the names its id goes by and the scalar
    fields the specs give it (create parameters, read responses)."""
    kinds: dict[str, _Kind] = {}
    for spec in toolset:
        props = spec.properties()
        for p, schema in props.items():
            if not is_id_param(p, schema) or p.endswith(("_ids", "Ids")) or p == "ids":
                continue
            kind = effects[spec.name].kind if p == effects[spec.name].key else id_kind(p)
            if kind is None:
                continue
            entry = kinds.setdefault(kind, _Kind([], _scalar_schema(schema), {}))
            if p not in entry.id_names:
                entry.id_names.append(p)
    for spec in toolset:
        eff = effects[spec.name]
        k = kinds.get(eff.kind)
        if k is None:
            continue
        if eff.status:
            k.fields.setdefault("status", {"type": "string"})
        if eff.action in ("create", "update"):
            for p, schema in spec.properties().items():
                if _scalar(schema) and not is_id_param(p, schema):
                    k.fields.setdefault(p, schema)
        if eff.action == "read" and spec.response is not None:
            for p, schema in (spec.response.get("properties") or {}).items():
                if isinstance(schema, dict) and _scalar(schema) and p not in k.id_names:
                    k.fields.setdefault(p, schema)
    for k in kinds.values():
        k.id_names.sort()
    return kinds


def with_responses(toolset: Toolset) -> Toolset:
    """The toolset with a response schema inferred for each tool that declares none, from
    what the simulator will answer (step 2's effect): a create returns the new entity's id,
    a read its record, a search ``results`` (records), an update or delete the id and a
    ``status``; a compute tool keeps no schema (its answer is an untyped ``result``).
    Inferred schemas are marked ``extra["response_inferred"]``; the tools offered to a model
    (``to_openai``) do not change."""
    effects = {t.name: tool_effect(t) for t in toolset}
    kinds = _id_fields(toolset, effects)
    tools = []
    for spec in toolset:
        eff = effects[spec.name]
        k = kinds.get(eff.kind)
        if spec.response is not None or k is None or eff.action == "compute":
            tools.append(spec)
            continue
        ident = {n: dict(k.id_schema) for n in k.id_names}
        record = {**ident, **{f: dict(s) for f, s in sorted(k.fields.items())}}
        if eff.action == "create":
            props = {**ident, "status": {"type": "string"}}
        elif eff.action == "read":
            props = record
        elif eff.action == "search":
            props = {"results": {"type": "array", "items": {"type": "object",
                                 "properties": record}}}  # fmt: skip
        else:
            props = {**ident, "status": {"type": "string"}, "success": {"type": "boolean"}}
        response = {"type": "object", "properties": props}
        extra = {**spec.extra, "response_inferred": True}
        tools.append(spec.model_copy(update={"response": response, "extra": extra}))
    data = {k: getattr(toolset, k) for k in type(toolset).model_fields if k != "tools"}
    return Toolset(**data, tools=tools)


def _closed_kinds(toolset: Toolset, effects: Mapping[str, ToolEffect]) -> set[str]:
    """Kinds whose ids a task can only get from a tool (one creates or lists them, or a
    declared response carries them): an unknown id of these is an error. Ids of other kinds
    are known to the user from elsewhere, and the world takes them."""
    closed = {e.kind for e in effects.values() if e.action in ("create", "search")}

    def walk(schema: Any, depth: int) -> None:
        if not isinstance(schema, Mapping) or depth > 4:
            return
        for name, sub in (schema.get("properties") or {}).items():
            if isinstance(sub, Mapping) and is_id_param(name, sub) and (k := id_kind(name)):
                closed.add(k)
            walk(sub, depth + 1)
        walk(schema.get("items"), depth + 1)

    for spec in toolset:
        walk(spec.response, 0)
    return closed


def _scalar(schema: Mapping[str, Any]) -> bool:
    kinds = _types(schema)
    return bool(kinds) and kinds[0] in ("string", "integer", "number", "boolean")


def _scalar_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    if "integer" in _types(schema):
        return {"type": "integer"}
    return {"type": "string"}


def _new_id(kind: str, schema: Mapping[str, Any], rng: random.Random) -> Any:
    if "integer" in _types(schema):
        return rng.randint(1000, 99999)
    prefix = re.sub(r"[^a-z0-9]", "", kind.lower())[:3] or "id"
    return f"{prefix}_{rng.randint(10000, 99999)}"
