"""Import OpenAI ``tools`` JSON (https://platform.openai.com/docs/guides/function-calling).

Accepted inputs, one file or a folder of ``*.json``/``*.jsonl`` files:

1) a JSON list of tools, ``[{"type": "function", "function": {name, description,
   parameters}}]`` (bare function objects are accepted too);
2) an object with a ``tools`` list (a request body, or ``toolset.json`` written by trajsynth);
3) JSON Lines, one tool per line.

Each tool is converted on its own: a malformed one is listed with the reason and the others
still import.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..spec import TOOLSET_FORMAT, Toolset, ToolSpec
from ._common import ConversionError, ToolsetBuilder, iter_json_records, read_json, require_path

__all__ = ["import_openai"]


def _tool_name(obj: Any, fallback: str) -> str:
    if isinstance(obj, dict):
        fn = obj.get("function") if isinstance(obj.get("function"), dict) else obj
        if isinstance(fn.get("name"), str):
            return fn["name"]
    return fallback


def _records(path: Path) -> list[tuple[str, Any]]:
    """(locator, tool object) for every tool in ``path``."""
    if path.suffix == ".jsonl":
        return [(f"{path.name}:{n}", v) for n, v in iter_json_records(path)]
    data = read_json(path)
    if isinstance(data, dict) and data.get("format_version") == TOOLSET_FORMAT:
        data = [ToolSpec.model_validate(t).model_dump() for t in data.get("tools", [])]
    elif isinstance(data, dict) and isinstance(data.get("tools"), list):
        data = data["tools"]
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        return [
            (path.name, ConversionError(f"expected a list of tools, got {type(data).__name__}"))
        ]
    return [(f"{path.name}#{i}", v) for i, v in enumerate(data)]


def import_openai(src: str | Path) -> Toolset:
    """Import OpenAI tools from a file or a folder of files."""
    path = require_path(src)
    files = sorted(
        p
        for p in ([path] if path.is_file() else path.rglob("*"))
        if p.suffix in (".json", ".jsonl")
    )
    builder = ToolsetBuilder(name=path.stem, format="openai", source=path)
    for file in files:
        for locator, obj in _records(file):
            builder.records += 1
            name = _tool_name(obj, locator)
            if isinstance(obj, ConversionError):
                builder.fail(name, str(obj), locator)
                continue
            if isinstance(obj, dict) and "source_name" in obj:  # a trajsynth ToolSpec dump
                builder.add(name, lambda o=obj: ToolSpec.model_validate(o), source=locator)
            else:
                builder.add(
                    name, lambda o=obj, s=locator: ToolSpec.from_openai(o, source=s), source=locator
                )
    return builder.build()
