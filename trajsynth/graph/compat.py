"""Step 3 of :mod:`.build`: the JSON types a schema admits and whether a return field's types
may be passed as a parameter's, and step 6's evidence that a parameter is an id."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..core.jsonvalues import json_type
from .container import ReturnField
from .scorers import _ID_WORD, _content, words

UNTYPED = "any"


def _types(schema: Any) -> tuple[str, ...]:
    """JSON types a schema admits (null dropped); ("any",) when it does not say."""
    if not isinstance(schema, dict):
        return (UNTYPED,)
    t = schema.get("type")
    found: list[str] = []
    if isinstance(t, str):
        found = [t]
    elif isinstance(t, list):
        found = [x for x in t if isinstance(x, str)]
    for key in ("anyOf", "oneOf"):
        for alt in schema.get(key) or []:
            found += [x for x in _types(alt) if x != UNTYPED]
    if not found and "enum" in schema:
        found = sorted({json_type(v, null="string") for v in schema["enum"]})
    found = [x.lower() for x in found if x and x.lower() != "null"]
    aliases = {"float": "number", "int": "integer", "dict": "object", "tuple": "array"}
    found = [aliases.get(x, x) for x in found]
    return tuple(dict.fromkeys(found)) or (UNTYPED,)


def _nullable(schema: dict[str, Any]) -> bool:
    t = schema.get("type")
    if t == "null" or (isinstance(t, list) and "null" in t):
        return True
    return any(
        isinstance(alt, dict) and _nullable(alt)
        for key in ("anyOf", "oneOf")
        for alt in schema.get(key) or []
    )


_NUMERIC = frozenset({"integer", "number"})


def _scalar_ok(source: str, target: str) -> bool:
    return (
        source in (target, UNTYPED)
        or target == UNTYPED
        or (source in _NUMERIC and target in _NUMERIC)
    )


def types_compatible(
    source: Sequence[str],
    target: Sequence[str],
    source_items: Sequence[str] = (),
    target_items: Sequence[str] = (),
) -> bool:
    """Step 3: can a value of the source types be passed where the target types are expected?

    >>> types_compatible(["integer"], ["number"]), types_compatible(["number"], ["integer"])
    (True, True)
    >>> types_compatible(["string"], ["integer"])
    False
    >>> types_compatible(["array"], ["array"], ["string"], ["integer"])
    False
    """
    for s in source:
        for t in target:
            if not _scalar_ok(s, t):
                continue
            items_clash = (
                s == "array"
                and t == "array"
                and source_items
                and target_items
                and not any(_scalar_ok(a, b) for a in source_items for b in target_items)
            )
            if not items_clash:
                return True
    return False


def _name_key(name: str) -> tuple[str, ...]:
    """A name's words with ``ids`` read as ``id`` (``attendee_ids`` names attendee ids)."""
    return tuple("id" if w == "ids" else w for w in words(name))


def _name_keys(f: ReturnField) -> set[tuple[str, ...]]:
    """The names a return field goes by: its leaf's words, and for a generic leaf (``id``,
    ``name``) the words of its parent too (``users[].id`` is a ``user id``)."""
    leaf = _name_key(f.leaf)
    keys = {leaf} if leaf else set()
    if leaf and not _content(f.leaf):
        parts = [p for p in re.split(r"[.\[\]]+", f.path) if p]
        if len(parts) >= 2:
            keys.add((*_name_key(parts[-2]), *leaf))
    return keys


class _IdEvidence:
    """Which parameters are ids, from evidence across tools (step 6): a parameter is id-like
    when its name is an identifier's (``…_id``, ``…Id``, ``uuid``, ``key``, ``token``,
    ``code``) *and* another tool returns a value of that name and a compatible type (a typed
    return field, or an undescribed result of a tool whose name says it, e.g.
    ``find_user_id_by_email``). A suffix alone, or "ID" in a description, is no evidence:
    ``css_code`` is no id when no tool returns a ``css_code``."""

    def __init__(self, fields: dict[str, list[ReturnField]]) -> None:
        self.producers: dict[tuple[str, ...], list[ReturnField]] = {}
        for tool_fields in fields.values():
            for f in tool_fields:
                if f.path == "result" and f.types == (UNTYPED,):
                    name = _name_key(f.tool)
                    # every contiguous run of the tool's name words ending in an id word
                    for end in range(len(name)):
                        if _ID_WORD.search(name[end]):
                            for start in range(end + 1):
                                self.producers.setdefault(name[start : end + 1], []).append(f)
                    continue
                for key in _name_keys(f):
                    self.producers.setdefault(key, []).append(f)

    def __call__(self, tool: str, param: str, schema: dict[str, Any]) -> bool:
        if not _ID_WORD.search(param):
            return False
        ptypes = _types(schema)
        return any(
            f.tool != tool and types_compatible(f.types, ptypes)
            for f in self.producers.get(_name_key(param), ())
        )
