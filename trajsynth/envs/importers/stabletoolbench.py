"""Import ToolBench / StableToolBench APIs (Qin et al. 2023, arXiv:2307.16789; Guo et al. 2024,
arXiv:2403.07714; THUNLP-MT/StableToolBench), following FORMATS.md §1.5 and §2.

A query record lists the RapidAPI endpoints it may use in ``api_list``. Steps, per endpoint:

1) name: ``change_name(standardize(api_name)) + "_for_" + standardize(tool_name)``, keeping
   the last 64 characters, as ToolBench names functions; the (tool, api) pair is kept in
   ``extra`` and ``source_name`` so the name maps back;
2) parameters: ``required_parameters`` and ``optional_parameters`` become properties, types
   through :data:`TYPE_MAP` (NUMBER → integer, STRING → string, BOOLEAN → boolean, anything
   else → string); a non-empty ``default`` becomes ``examples`` (required) or ``default``
   (optional);
3) description: ToolBench's wording, ``This is the subfunction for tool "<tool>", ...``;
4) response: ``template_response`` (an example with type names as values, ``_list_length``
   marking lists) is turned into a JSON Schema.

The same endpoint appears in many queries; identical copies merge silently.
"""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path
from typing import Any

from ...core.errors import InputNotFoundError
from ..spec import Toolset, ToolSpec
from ._common import ConversionError, ToolsetBuilder, read_json, require_path

__all__ = ["TYPE_MAP", "function_name", "import_stabletoolbench", "standardize"]

TYPE_MAP = {"NUMBER": "integer", "STRING": "string", "BOOLEAN": "boolean"}
_RESERVED = {"from", "class", "return", "false", "true", "id", "and"}
_TEMPLATE_TYPES = {
    "str": "string",
    "string": "string",
    "int": "integer",
    "integer": "integer",
    "float": "number",
    "number": "number",
    "bool": "boolean",
    "boolean": "boolean",
    "NoneType": "null",
    "null": "null",
}


def standardize(text: str) -> str:
    """ToolBench's ``standardize``: lowercase, non-``[a-z0-9_]`` → ``_``, runs collapsed.

    >>> standardize("Songkick concert")
    'songkick_concert'
    >>> standardize("YTStream - Download YouTube Videos")
    'ytstream_download_youtube_videos'
    """
    text = re.sub(r"[^a-z0-9_]", "_", text.lower())
    text = re.sub(r"_+", "_", text).strip("_")
    return text


def change_name(name: str) -> str:
    """ToolBench's ``change_name``: prefix ``is_`` to Python keywords and ``id``."""
    return f"is_{name}" if name in _RESERVED else name


def function_name(tool_name: str, api_name: str) -> str:
    """Step 1. ``function_name("TheClique", "Songkick concert")`` →
    ``'songkick_concert_for_theclique'``."""
    return (change_name(standardize(api_name)) + "_for_" + standardize(tool_name))[-64:]


def template_schema(example: Any, depth: int = 0) -> dict[str, Any]:
    """Step 4: a ToolBench ``template_response`` value → JSON Schema."""
    if depth > 12:
        return {}
    if isinstance(example, str):
        kind = _TEMPLATE_TYPES.get(example)
        return {"type": kind} if kind else {"type": "string", "examples": [example]}
    if isinstance(example, bool):
        return {"type": "boolean"}
    if isinstance(example, int):
        return {"type": "integer"}
    if isinstance(example, float):
        return {"type": "number"}
    if example is None:
        return {}
    if isinstance(example, list):
        return (
            {"type": "array", "items": template_schema(example[0], depth + 1)}
            if example
            else {"type": "array"}
        )
    if isinstance(example, dict):
        items = {k: v for k, v in example.items() if k != "_list_length"}
        if "_list_length" in example:  # a list shown by its first element
            return {"type": "array", "items": template_schema(items, depth + 1)}
        return {
            "type": "object",
            "properties": {k: template_schema(v, depth + 1) for k, v in items.items()},
        }
    raise ConversionError(f"template_response holds a {type(example).__name__}")


def _param(p: Any, *, required: bool) -> tuple[str, dict[str, Any]]:
    if not isinstance(p, dict) or not isinstance(p.get("name"), str) or not p["name"]:
        raise ConversionError(f"parameter without a name: {p!r}")
    schema: dict[str, Any] = {"type": TYPE_MAP.get(str(p.get("type", "")).upper(), "string")}
    if p.get("description"):
        schema["description"] = str(p["description"])
    default = p.get("default")
    if default not in (None, ""):
        if required:
            schema["examples"] = [default]
        else:
            schema["default"] = default
    return p["name"], schema


def convert_api(api: dict[str, Any], *, source: str = "") -> ToolSpec:
    """Steps 1-4 for one ``api_list`` entry."""
    tool, name = api["tool_name"], api["api_name"]
    props: dict[str, Any] = {}
    required = []
    for p in api.get("required_parameters") or []:
        pname, schema = _param(p, required=True)
        props[pname] = schema
        required.append(pname)
    for p in api.get("optional_parameters") or []:
        pname, schema = _param(p, required=False)
        props.setdefault(pname, schema)
    parameters: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        parameters["required"] = required
    desc = (api.get("api_description") or "").strip()
    description = (
        f'This is the subfunction for tool "{standardize(tool)}", you can use this tool.'
        + (f' The description of this function is: "{desc}"' if desc else "")
    )
    template = api.get("template_response")
    return ToolSpec(
        name=function_name(tool, name),
        description=description,
        parameters=parameters,
        response=template_schema(template) if isinstance(template, (dict, list)) else None,
        source_name=f"{tool}/{name}",
        source=source,
        extra={
            "tool_name": tool,
            "api_name": name,
            "category": api.get("category_name", ""),
            "method": api.get("method", ""),
        },
    )


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    files = sorted(p for p in path.rglob("*.json") if "test_query_ids" not in p.parts)
    files = [p for p in files if "answer" not in p.parts]
    if not files:
        raise InputNotFoundError(f"{path}: no StableToolBench query files")
    return files


def import_stabletoolbench(src: str | Path) -> Toolset:
    """Import every distinct endpoint of the queries in ``src`` (a file or a folder)."""
    path = require_path(src)
    builder = ToolsetBuilder(name=path.stem, format="stabletoolbench", source=path)
    for file in _files(path):
        data = read_json(file)
        if not isinstance(data, list):
            builder.fail(file.name, "expected a list of query records", str(file))
            continue
        for record in data:
            builder.records += 1
            if not isinstance(record, dict):
                builder.fail(file.name, "query record is not a JSON object", str(file))
                continue
            loc = f"{file.name}#{record.get('query_id', '?')}"
            if not isinstance(record.get("api_list"), list) or not record["api_list"]:
                builder.fail(loc, "query record has no 'api_list' of endpoints", loc)
                continue
            for api in record.get("api_list") or []:
                label = (
                    f"{api.get('tool_name')}/{api.get('api_name')}"
                    if isinstance(api, dict)
                    else loc
                )
                builder.add(label, partial(convert_api, api, source=loc), source=loc)
    return builder.build()
