"""Import functions described with JSON-Schema parameters: OpenAI ``tools``
(https://platform.openai.com/docs/guides/function-calling) and the other common layouts of
the same idea.

One function is a JSON object with a string ``name``, a ``description`` and a JSON Schema for
its arguments under one of :data:`SCHEMA_KEYS` (``parameters`` for OpenAI and BFCL,
``input_schema`` for Anthropic, ``inputSchema`` for the Model Context Protocol,
``query_parameters`` for some HTTP tool catalogues), possibly wrapped in a ``function`` object
(``{"type": "function", "function": {...}}``). A response schema is read from
:data:`RESPONSE_KEYS`.

Steps, per file (a file, or every ``*.json``/``*.jsonl`` file under a folder):

1) read it: a JSON document, or JSON Lines (by suffix, or when the document does not parse);
   a line that is not JSON is a failure (the last one is said to be likely truncated);
2) find the functions: a list is read item by item; an object that is a function is one; an
   object holding a ``tools``/``functions``/``function`` list is read through it (also when
   that list sits a few objects deep, as in ToolBench answer files); anything else is listed
   as "not a function";
3) convert each function on its own: its parameter schema is taken from the first key of
   :data:`SCHEMA_KEYS` present; when none is, but another key holds an object schema, the
   function imports with no parameters and is listed as altered (so a misplaced schema is
   never lost in silence); ``"type": "dict"`` (BFCL) and a missing ``type`` become
   ``object`` (listed as altered). An MCP tool's ``annotations`` are kept in ``extra``
   (``readOnlyHint`` as ``extra.read_only``).

The builder then checks each spec (OpenAI-legal name, valid JSON Schema, ``required`` naming
declared properties), so a malformed one is listed with the reason and the others import.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from ..spec import TOOLSET_FORMAT, Toolset, ToolSpec
from ._common import ConversionError, ToolsetBuilder, iter_json_records, read_json, require_path

__all__ = ["RESPONSE_KEYS", "SCHEMA_KEYS", "function_from_json", "import_openai"]

#: where a function's argument schema is found, first match wins
SCHEMA_KEYS = ("parameters", "input_schema", "inputSchema", "query_parameters")
#: where a function's result schema is found
RESPONSE_KEYS = ("response", "output_schema", "outputSchema")
#: keys of an object that lists functions
_CONTAINER_KEYS = ("tools", "functions", "function")
_SEARCH_DEPTH = 3


def _inner(obj: dict[str, Any]) -> dict[str, Any]:
    """The function object: ``obj`` itself, or its ``function`` wrapper's content."""
    fn = obj.get("function")
    return fn if isinstance(fn, dict) else obj


def _is_function(obj: Any) -> bool:
    if not isinstance(obj, dict):
        return False
    fn = _inner(obj)
    return isinstance(fn.get("name"), str) and (
        fn is not obj
        or any(k in fn for k in (*SCHEMA_KEYS, "description"))
        or obj.get("type") == "function"
    )


def _find(value: Any, locator: str, depth: int = 0) -> Iterator[tuple[str, Any]]:
    """Step 2: (locator, function object or ConversionError) for everything in ``value``."""
    if isinstance(value, list):
        for i, item in enumerate(value):
            yield from _find(item, f"{locator}#{i}", depth + 1)
        return
    if _is_function(value):
        yield locator, value
        return
    if isinstance(value, dict):
        for key in _CONTAINER_KEYS:
            if isinstance(value.get(key), list):
                yield from _find(value[key], f"{locator}.{key}", depth + 1)
                return
        if depth < _SEARCH_DEPTH:
            found = [
                hit
                for key, sub in value.items()
                if isinstance(sub, dict)
                for hit in _find(sub, f"{locator}.{key}", depth + 1)
                if not isinstance(hit[1], ConversionError)
            ]
            if found:
                yield from found
                return
        keys = ", ".join(sorted(map(str, value))[:8])
        yield locator, ConversionError(f"not a function (no 'name' and schema; keys: {keys})")
        return
    yield locator, ConversionError(f"not a function: a JSON {type(value).__name__}")


def _object_schema(schema: Any, where: str, notes: list[str]) -> dict[str, Any]:
    if not isinstance(schema, dict):
        raise ConversionError(f"{where} must be a JSON object, got {type(schema).__name__}")
    schema = dict(schema)
    kind = schema.get("type")
    if kind == "dict":
        schema["type"] = "object"
    elif kind is None:
        schema["type"] = "object"
        notes.append(f"{where} had no 'type'; set to 'object'")
    if "properties" not in schema:
        schema["properties"] = {}
    return schema


def function_from_json(obj: Any, *, source: str = "", notes: list[str] | None = None) -> ToolSpec:
    """Step 3 for one function object; ``notes`` collects what was changed on the way."""
    notes = [] if notes is None else notes
    if not isinstance(obj, dict):
        raise ConversionError(f"a function must be a JSON object, got {type(obj).__name__}")
    fn = _inner(obj)
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        raise ConversionError("a function needs a string 'name'")
    key = next((k for k in SCHEMA_KEYS if k in fn), None)
    if key is not None and fn[key] is not None:
        params = _object_schema(fn[key], key, notes)
    else:
        params = {"type": "object", "properties": {}}
        stray = [k for k, v in fn.items() if isinstance(v, dict) and "properties" in v]
        if stray:
            notes.append(
                f"no parameter schema under {'/'.join(SCHEMA_KEYS)}, but {stray[0]!r} looks "
                "like one; imported with no parameters"
            )
    response = next(
        (src[k] for src in (fn, obj) for k in RESPONSE_KEYS if isinstance(src.get(k), dict)),
        None,
    )
    hints: dict[str, Any] = next(
        (src["annotations"] for src in (fn, obj) if isinstance(src.get("annotations"), dict)), {}
    )
    extra: dict[str, Any] = {}
    if hints:  # an MCP server's tools/list: the read-only hint decides what changes state
        extra = {"annotations": hints, "read_only": bool(hints.get("readOnlyHint"))}
    return ToolSpec(
        name=name,
        description=str(fn.get("description") or ""),
        parameters=params,
        response=response,
        source=source,
        extra=extra,
    )


def _document(path: Path) -> Iterator[tuple[str, Any]]:
    """Step 1: (locator, value) for the file's top-level values."""
    if path.suffix != ".jsonl":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            data = None  # maybe JSON Lines under a .json name
        except (OSError, UnicodeDecodeError):
            data = read_json(path)  # raises the file-level error
        if data is not None:
            if isinstance(data, dict) and data.get("format_version") == TOOLSET_FORMAT:
                data = [ToolSpec.model_validate(t).model_dump() for t in data.get("tools", [])]
            yield path.name, data
            return
    lines = list(iter_json_records(path))
    last = lines[-1][0] if lines else 0
    for n, value in lines:
        if isinstance(value, ConversionError) and n == last:
            value = ConversionError(f"{value} (the last line: the file looks truncated)")
        yield f"{path.name}:{n}", value


def import_openai(src: str | Path) -> Toolset:
    """Import the functions of a file or a folder of files."""
    path = require_path(src)
    files = sorted(
        p
        for p in ([path] if path.is_file() else path.rglob("*"))
        if p.suffix in (".json", ".jsonl")
    )
    builder = ToolsetBuilder(name=path.stem, format="openai", source=path)
    for file in files:
        for top, value in _document(file):
            hits = [(top, value)] if isinstance(value, ConversionError) else _find(value, top)
            for locator, obj in hits:
                builder.records += 1
                if isinstance(obj, ConversionError):
                    builder.fail(locator, str(obj), locator)
                    continue
                name = str(_inner(obj).get("name") or locator)
                if "source_name" in obj:  # a trajsynth ToolSpec dump
                    builder.add(name, partial(ToolSpec.model_validate, obj), source=locator)
                    continue
                notes: list[str] = []
                builder.add(
                    name,
                    partial(function_from_json, obj, source=locator, notes=notes),
                    source=locator,
                    notes=notes,
                )
    return builder.build()
