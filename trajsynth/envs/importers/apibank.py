"""Import API-Bank specs (Li et al. 2023, arXiv:2304.08244; AlibabaResearch/DAMO-ConvAI
``api-bank``), following FORMATS.md §1.6 and §2.

API-Bank describes an API as ``{name, description, input_parameters: {p: {type,
description}}, output_parameters: {...}}``. Those descriptions appear one per line after
``API descriptions:`` in the level-1 test file's instructions, and as the output of
``ToolSearcher`` calls in the level-2 dialogues. Steps:

1) collect descriptions from ``test-data/level-1-api.json`` records and from ``ToolSearcher``
   results in ``*.jsonl`` dialogues (whichever the input holds);
2) ``input_parameters`` become properties, types through :data:`TYPE_MAP` (``str`` → string,
   ``int`` → integer, ``list`` → array, ``list(str)`` → array of strings, ...); API-Bank has
   no notion of optional inputs, so every input is required;
3) ``output_parameters`` become the response object schema.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from ...core.errors import InputNotFoundError
from ..spec import Toolset, ToolSpec
from ._common import ConversionError, ToolsetBuilder, iter_json_records, read_json, require_path

__all__ = ["TYPE_MAP", "convert_api", "import_apibank"]

TYPE_MAP: dict[str, dict[str, Any]] = {
    "str": {"type": "string"},
    "string": {"type": "string"},
    "int": {"type": "integer"},
    "integer": {"type": "integer"},
    "float": {"type": "number"},
    "bool": {"type": "boolean"},
    "list": {"type": "array"},
    "list(str)": {"type": "array", "items": {"type": "string"}},
    "list(int)": {"type": "array", "items": {"type": "integer"}},
    "dict": {"type": "object"},
    "datetime": {"type": "string", "format": "date-time"},
    "json": {},  # any JSON value
}
_MARKER = "API descriptions:"


def _field(pname: str, p: Any, where: str) -> dict[str, Any]:
    if not isinstance(p, dict):
        raise ConversionError(f"{where} {pname!r} is not an object")
    kind = str(p.get("type", "")).strip()
    if kind not in TYPE_MAP:
        raise ConversionError(f"{where} {pname!r} has unknown type {kind!r}")
    schema = dict(TYPE_MAP[kind])
    if p.get("description"):
        schema["description"] = str(p["description"])
    return schema


def convert_api(api: dict[str, Any], *, source: str = "") -> ToolSpec:
    """Steps 2-3 for one API description."""
    inputs = api.get("input_parameters") or {}
    outputs = api.get("output_parameters") or {}
    if not isinstance(inputs, dict) or not isinstance(outputs, dict):
        raise ConversionError("input_parameters and output_parameters must be objects")
    props = {n: _field(n, p, "input") for n, p in inputs.items()}
    parameters: dict[str, Any] = {"type": "object", "properties": props}
    if props:
        parameters["required"] = list(props)
    response = {
        "type": "object",
        "properties": {n: _field(n, p, "output") for n, p in outputs.items()},
    }
    return ToolSpec(
        name=api["name"],
        description=str(api.get("description") or ""),
        parameters=parameters,
        response=response,
        source=source,
    )


def _from_test_file(file: Path, data: Any) -> Iterator[tuple[str, Any]]:
    if not isinstance(data, list):
        raise ConversionError(f"{file.name}: expected a list of test points")
    for rec in data:
        text = rec.get("instruction", "") if isinstance(rec, dict) else ""
        loc = f"{file.name}#{rec.get('id', '?') if isinstance(rec, dict) else '?'}"
        _, _, tail = text.partition(_MARKER)
        for line in tail.splitlines():
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                yield loc, json.loads(line)
            except json.JSONDecodeError as exc:
                yield loc, ConversionError(f"API description is not JSON ({exc.msg})")


def _from_dialogue(file: Path) -> Iterator[tuple[str, Any]]:
    for n, line in iter_json_records(file):
        if isinstance(line, ConversionError):
            yield f"{file.name}:{n}", line
            continue
        if not isinstance(line, dict) or line.get("api_name") != "ToolSearcher":
            continue
        output = (line.get("result") or {}).get("output")
        outputs = output if isinstance(output, list) else [output]
        for out in outputs:
            if isinstance(out, dict) and "input_parameters" in out:
                yield f"{file.name}:{n}", out


def import_apibank(src: str | Path) -> Toolset:
    """Import the API descriptions found in ``src`` (the api-bank folder, the level-1 test file,
    or dialogue ``.jsonl`` files)."""
    path = require_path(src)
    files = (
        [path]
        if path.is_file()
        else sorted(
            p
            for p in path.rglob("*")
            if p.suffix in (".json", ".jsonl") and p.name != "exceptions.json"
        )
    )
    files = [f for f in files if f.suffix == ".jsonl" or "level-1-api" in f.name or f == path]
    if not files:
        raise InputNotFoundError(f"{path}: no API-Bank test file or dialogues")
    builder = ToolsetBuilder(name=path.stem, format="apibank", source=path)
    for file in files:
        if file.suffix == ".jsonl":
            builder.records += 1
            found = _from_dialogue(file)
        else:
            data = read_json(file)
            builder.records += len(data) if isinstance(data, list) else 0
            found = _from_test_file(file, data)
        try:
            for loc, api in found:
                if isinstance(api, ConversionError):
                    builder.fail(loc, str(api), loc)
                    continue
                name = str(api.get("name", loc)) if isinstance(api, dict) else loc
                builder.add(name, partial(convert_api, api, source=loc), source=loc)
        except ConversionError as exc:
            builder.fail(file.name, str(exc), str(file))
    return builder.build()
