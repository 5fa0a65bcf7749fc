"""Import tau-bench tool lists (sierra-research/tau-bench, Yao et al. 2024, arXiv:2406.12045).

tau-bench defines each tool as a Python class whose ``get_info()`` returns an OpenAI tool;
``shared/external/tau-bench/<domain>/tools_openai.json`` holds those literals (FORMATS.md §1.2).

Steps:

1) find the tool lists: a ``tools_openai.json`` file, a domain folder holding one, or the
   tau-bench root (every ``<domain>/tools_openai.json``);
2) convert each tool with :meth:`ToolSpec.from_openai` (failures are listed, not raised),
   recording the domain in ``extra["domain"]``;
3) with several domains, a tool name defined differently in two domains (``think``,
   ``calculate``) keeps the first domain's definition and lists the other as a duplicate.
"""

from __future__ import annotations

from pathlib import Path

from ...core.errors import InputNotFoundError
from ..spec import Toolset, ToolSpec
from ._common import ToolsetBuilder, read_json, require_path

__all__ = ["import_tau"]

TOOLS_FILE = "tools_openai.json"


def _tool_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if (path / TOOLS_FILE).is_file():
        return [path / TOOLS_FILE]
    files = sorted(path.glob(f"*/{TOOLS_FILE}"))
    if not files:
        raise InputNotFoundError(f"{path}: no {TOOLS_FILE} here or in a domain folder below")
    return files


def import_tau(src: str | Path) -> Toolset:
    """Import one tau-bench domain's tools, or every domain's under the tau-bench root."""
    path = require_path(src)
    files = _tool_files(path)
    name = files[0].parent.name if len(files) == 1 else path.name
    builder = ToolsetBuilder(name=name, format="tau", source=path)
    for file in files:
        domain = file.parent.name
        data = read_json(file)
        if not isinstance(data, list):
            builder.fail(
                file.name, f"expected a list of tools, got {type(data).__name__}", str(file)
            )
            continue
        for i, obj in enumerate(data):
            builder.records += 1
            locator = f"{domain}/{file.name}#{i}"
            fn = obj.get("function", {}) if isinstance(obj, dict) else {}
            tool_name = fn.get("name") if isinstance(fn, dict) else None

            def convert(o=obj, loc=locator, d=domain) -> ToolSpec:
                spec = ToolSpec.from_openai(o, source=loc)
                return spec.model_copy(update={"extra": {"domain": d}})

            builder.add(str(tool_name or locator), convert, source=locator)
    return builder.build()
