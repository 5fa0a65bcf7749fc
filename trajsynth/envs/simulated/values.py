"""Schema-valid values for :mod:`trajsynth.envs.simulated`: seeded values of a schema's type
(dates, emails, ids, names...) and step 5's filling of a response schema from known facts."""

from __future__ import annotations

import datetime as dt
import random
import re
from collections.abc import Mapping
from typing import Any

from .. import vocab
from ..values import everyday
from ..verifiers.schema import type_ok
from .effects import _singular, id_kind, is_id_param


def _types(schema: Mapping[str, Any]) -> list[str]:
    t = schema.get("type")
    if isinstance(t, str):
        return [t]
    if isinstance(t, list):
        return [x for x in t if isinstance(x, str) and x != "null"] or ["null"]
    if "properties" in schema:
        return ["object"]
    if "items" in schema:
        return ["array"]
    if schema.get("enum"):
        return [_json_kind(schema["enum"][0])]
    return []


def _json_kind(v: Any) -> str:
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return "null"


def _fits(value: Any, schema: Mapping[str, Any]) -> bool:
    if not isinstance(schema, Mapping) or not schema:
        return True
    if schema.get("enum") and value not in schema["enum"]:
        return False
    kinds = _types(schema)
    return (
        not kinds
        or any(type_ok(value, k) for k in kinds if k != "null")
        or (value is None and "null" in (schema.get("type") or []))
    )


def make_value(name: str, schema: Mapping[str, Any], rng: random.Random, depth: int = 0) -> Any:
    """A seeded value valid against ``schema`` (named ``name``, which guides strings)."""
    if not isinstance(schema, Mapping):
        schema = {}
    if schema.get("enum"):
        return rng.choice(list(schema["enum"]))
    if "const" in schema:
        return schema["const"]
    for alt_key in ("anyOf", "oneOf"):
        alts = [a for a in schema.get(alt_key) or [] if isinstance(a, Mapping)]
        alts = [a for a in alts if a.get("type") != "null"] or alts
        if alts:
            return make_value(name, alts[0], rng, depth)
    kinds = _types(schema) or ["string"]
    kind = kinds[0]
    if kind == "integer":
        return vocab.integer_like(name, schema, rng)
    if kind == "number":
        return vocab.number_like(name, schema, rng)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    if kind == "array":
        items = schema["items"] if isinstance(schema.get("items"), Mapping) else {}
        n = max(int(schema.get("minItems") or 0), 1 if depth < 3 else 0)
        n = min(n + rng.randint(0, 1), int(schema.get("maxItems") or 3))
        return [make_value(_singular(name), items, rng, depth + 1) for _ in range(n)]
    if kind == "object":
        props = schema.get("properties") or {}
        if not isinstance(props, Mapping) or depth >= 4:
            return {}
        return {k: make_value(k, s, rng, depth + 1) for k, s in props.items()}
    return _string(name, schema, rng)


def _string(name: str, schema: Mapping[str, Any], rng: random.Random) -> str:
    fmt = str(schema.get("format") or "")
    text = f"{name} {schema.get('description') or ''}".lower()
    day = dt.date(2025, 1, 1) + dt.timedelta(days=rng.randint(0, 364))
    if fmt == "date-time" or "datetime" in text or "timestamp" in text:
        return f"{day.isoformat()}T{rng.randint(8, 18):02d}:{rng.choice(['00', '30'])}:00Z"
    if fmt == "date" or re.search(r"\bdate\b|yyyy", text) or name.endswith("_date"):
        return day.isoformat()
    if fmt == "email" or "email" in name.lower():
        first, last = vocab.first_name(rng).lower(), vocab.last_name(rng).lower()
        return f"{first}.{last}{rng.randint(1, 99)}@example.com"
    if fmt in ("uri", "url") or name.lower().endswith(("url", "uri", "link")):
        return f"https://example.com/{vocab.phrase(rng, 1)}/{rng.randint(1, 999)}"
    if is_id_param(name):
        return f"{(id_kind(name) or 'id')[:3]}_{rng.randint(1000, 9999)}"
    if name.lower() in ("name", "full_name", "author", "owner"):
        return f"{vocab.first_name(rng)} {vocab.last_name(rng)}"
    if "phone" in name.lower():
        return f"+1-555-{rng.randint(100, 999)}-{rng.randint(1000, 9999)}"
    if re.search(r"\btime\b", text):
        return f"{rng.randint(8, 18):02d}:{rng.choice(['00', '30'])}"
    made = everyday(name, dict(schema), rng)  # a place, a username, a company ...
    return made if made is not None else vocab.phrase(rng)


def fill(
    schema: Mapping[str, Any] | None,
    name: str,
    facts: Mapping[str, Any],
    rng: random.Random,
    depth: int = 0,
    rows: list[Mapping[str, Any]] | None = None,
) -> Any:
    """Step 5: a value valid against ``schema`` that states ``facts`` (record fields and
    arguments by name) where their names and types fit; ``rows`` fill an array of objects."""
    if not isinstance(schema, Mapping) or not schema:
        return dict(facts)
    kinds = _types(schema)
    if "object" in kinds and isinstance(schema.get("properties"), Mapping) and depth < 4:
        out: dict[str, Any] = {}
        for k, sub in schema["properties"].items():
            if k in facts and _fits(facts[k], sub):
                out[k] = facts[k]
            else:
                out[k] = fill(sub, k, facts if _nested(sub) else {}, rng, depth + 1, rows)
        return out
    if "array" in kinds and isinstance(schema.get("items"), Mapping):
        items = schema["items"]
        if rows is not None and "object" in _types(items):
            cap = int(schema.get("maxItems") or 10)
            return [fill(items, _singular(name), r, rng, depth + 1) for r in rows[:cap]]
        if name in facts and _fits(facts[name], schema):
            return facts[name]
    if name in facts and _fits(facts[name], schema):
        return facts[name]
    return make_value(name, schema, rng, depth)


def _nested(schema: Mapping[str, Any]) -> bool:
    return "object" in _types(schema)
