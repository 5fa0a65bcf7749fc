"""Tell which format a tool specification file or folder is written in, when it can be told.

Most specs users hold are OpenAI tools; the other formats have fields no other format has.
:func:`detect_format` looks at the first records of each file (a JSON document's first list
items, or a JSON Lines file's first lines) and names the format whose marks they carry:

- tau: a file named ``tools_openai.json`` (tau-bench), or a folder holding one (or one per
  domain folder);
- stabletoolbench: query records with an ``api_list``;
- toolalpaca: records with an OpenAPI ``Documentation`` and a ``Function_Projection``;
- apibank: test records whose instruction lists ``API descriptions:``, or dialogue lines with
  a ``role`` of User, AI or API;
- bfcl: question records (``question`` with a ``function`` list or ``involved_classes``), or
  function docs whose parameters have BFCL's ``"type": "dict"``;
- openai: functions with JSON-schema parameters (``{"type": "function", "function": {...}}``,
  a bare ``{name, parameters}``, an object with a ``tools`` or ``functions`` list, a trajsynth
  toolset).

A folder's files are looked at one by one (all of them, as its import reads them all); files
of none of these shapes (answers, databases) are passed over. When the files carry the marks
of two formats, or of none, the format cannot be told and
:class:`~trajsynth.core.errors.UserError` says so (``--format`` chooses).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ...core.errors import UserError
from ..spec import TOOLSET_FORMAT
from ._common import require_path
from .openai import SCHEMA_KEYS
from .tau import TOOLS_FILE

__all__ = ["detect_format"]

_JSONL_LINES = 5
_API_BANK_ROLES = {"User", "AI", "API"}


def _records(path: Path) -> list[Any]:
    """The first records of a JSON or JSON Lines file ([] when it holds none we can read)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
    if data is not None:
        return data[:_JSONL_LINES] if isinstance(data, list) else [data]
    records = []
    for line in text.splitlines():
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                break
            if len(records) == _JSONL_LINES:
                break
    return records


def _function(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The function object of an OpenAI-style tool (``obj`` or its ``function``), if it is one."""
    fn = obj["function"] if isinstance(obj.get("function"), dict) else obj
    assert isinstance(fn, dict)
    if not isinstance(fn.get("name"), str):
        return None
    if fn is obj and not any(k in fn for k in SCHEMA_KEYS) and obj.get("type") != "function":
        return None
    return fn


def _kind(record: Any) -> tuple[str, str] | None:
    """(format, what marks it) for one record, or None."""
    if not isinstance(record, dict):
        return None
    if record.get("format_version") == TOOLSET_FORMAT:
        return "openai", "a trajsynth toolset"
    if isinstance(record.get("api_list"), list):
        return "stabletoolbench", "StableToolBench query records (an 'api_list' each)"
    if "Documentation" in record and "Function_Projection" in record:
        return "toolalpaca", "ToolAlpaca records (OpenAPI 'Documentation', 'Function_Projection')"
    if "API descriptions:" in str(record.get("instruction", "")):
        return "apibank", "API-Bank test records ('API descriptions:' in the instruction)"
    if record.get("role") in _API_BANK_ROLES and ("text" in record or "api_name" in record):
        return "apibank", "API-Bank dialogues (lines with a role of User, AI or API)"
    if "question" in record and (
        isinstance(record.get("function"), list) or record.get("involved_classes")
    ):
        return "bfcl", "BFCL question records"
    fn = _function(record)
    if fn is not None:
        params = fn.get("parameters")
        if isinstance(params, dict) and params.get("type") == "dict":
            return "bfcl", "BFCL function docs (parameters of type 'dict')"
        if record.get("type") == "function":
            return "openai", 'OpenAI tools ({"type": "function", "function": {...}})'
        return "openai", "functions with JSON-schema parameters"
    for key in ("tools", "functions"):
        items = record.get(key)
        if isinstance(items, list) and items and isinstance(items[0], dict):
            inner = _kind(items[0])
            if inner is not None and inner[0] == "openai":
                return "openai", f"OpenAI tools (an object with a {key!r} list)"
    return None


def _file_kind(path: Path) -> tuple[str, str] | None:
    for record in _records(path):
        found = _kind(record)
        if found is not None:
            if found[0] == "openai" and path.name == TOOLS_FILE:
                return "tau", f"tau-bench tools ({TOOLS_FILE})"
            return found
    return None


def detect_format(src: str | Path) -> tuple[str, str]:
    """``(format, what marked it)`` for the specs at ``src`` (a file or a folder).

    Raises :class:`UserError` when ``src`` carries the marks of no format or of several.
    """
    path = require_path(src)
    if path.is_dir():
        if (path / TOOLS_FILE).is_file() or any(path.glob(f"*/{TOOLS_FILE}")):
            return "tau", f"a tau-bench folder ({TOOLS_FILE})"
        files = sorted(p for p in path.rglob("*") if p.suffix in (".json", ".jsonl"))
    else:
        files = [path]
    found: dict[str, list[tuple[Path, str]]] = {}
    for file in files:
        kind = _file_kind(file)
        if kind is not None:
            found.setdefault(kind[0], []).append((file, kind[1]))
    if len(found) == 1:
        ((fmt, hits),) = found.items()
        why = hits[0][1]
        return fmt, why if path.is_file() else f"{why}, in {len(hits)} file{'s' * (len(hits) > 1)}"
    choose = "pass --format (openai, bfcl, tau, toolalpaca, stabletoolbench or apibank)"
    if not found:
        raise UserError(f"cannot tell the format of the specs in {path}", hint=choose)
    seen = "; ".join(
        f"{fmt} in {hits[0][0].relative_to(path)}" + (f" (+{len(hits) - 1})" if hits[1:] else "")
        for fmt, hits in sorted(found.items())
    )
    raise UserError(f"the specs in {path} are of several formats: {seen}", hint=choose)
