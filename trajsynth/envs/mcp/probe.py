"""Values an MCP server accepts, found by execution (what task synthesis draws arguments from
when the server has no state to read; :class:`trajsynth.envs.values.Known`).

1) the state on disk: the server's state folders and the files in them, at the user's paths
   (folders first, the state's roots before their subfolders);
2) the read-only tools, those with the fewest required parameters first, each called at the
   initial state with values from the spec (:func:`~trajsynth.envs.values.suggested`), from
   what is known so far (a folder for a path, a table for a table name) or of the
   parameter's kind, up to three draws; a second round retries the tools that found no
   values the first time, with what the others found;
3) what an answer holds joins what is known: in JSON (or a Python literal, as some servers
   print) every member by its key, and the names and ids of records under the noun of the
   tool (``list_tables`` → ``table``), a table's columns when a tool given one table answers
   with records of names and types; in text, absolute paths, listed entries
   (``[FILE] a.txt`` under the folder asked for), commit ids (→ ``revision``) and lines of
   one word (``git_branch``'s ``* main`` → ``branch``).

Nothing here changes the server: only read-only tools are called, from the initial state.
"""

from __future__ import annotations

import ast
import json
import random
import re
from typing import Any

from ...core.jsonvalues import json_fields, name_tokens
from ..spec import Toolset, ToolSpec
from ..values import Known, invent, kind, suggested
from .server import MCPServer

__all__ = ["probe"]

_VERBS = {"get", "list", "read", "show", "search", "find", "describe", "query", "fetch",
          "git", "view", "open", "lookup", "all", "current", "info"}  # fmt: skip
_PATH = re.compile(r"(?<![\w.])(/(?:[\w.@+-]+/)*[\w.@+-]+/?)")
_ENTRY = re.compile(r"^\s*\[(FILE|DIR)\]\s+(.+?)\s*$", re.MULTILINE)
_SHA = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
_WORD_LINE = re.compile(r"^[\s*+-]*([A-Za-z0-9][\w./-]{0,60})\s*$")


def _noun(tool: str) -> str | None:
    words = [t for t in name_tokens(tool) if t not in _VERBS]
    if not words:
        return None
    word = words[-1]
    if word.endswith("ies"):
        return word[:-3] + "y"
    return word[:-1] if word.endswith("s") and not word.endswith("ss") else word


def _add(bag: list[Any], value: Any, limit: int = 50) -> None:
    if value not in bag and len(bag) < limit:
        bag.append(value)


def _parsed(output: Any) -> Any:
    if not isinstance(output, str):
        return output
    text = output.strip()
    if text[:1] in "[{":
        for parse in (json.loads, ast.literal_eval):
            try:
                return parse(text)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                continue
    return output


def _harvest(known: Known, spec: ToolSpec, args: dict[str, Any], output: Any) -> None:
    """Step 3."""
    noun = _noun(spec.name)
    value = _parsed(output)
    if isinstance(value, dict) and len(value) == 1 and isinstance(next(iter(value.values())), str):
        value = _parsed(next(iter(value.values())))  # {"content": "..."}, {"result": "..."}
    if not isinstance(value, str):
        records = [r for _, r in json_fields({"_": value}) if isinstance(r, dict)]
        if isinstance(value, list):
            records += [r for r in value if isinstance(r, dict)]
        for key, v in json_fields({"_": value}):
            if key != "_" and isinstance(v, (str, int, float)) and not isinstance(v, bool):
                _add(known.nouns.setdefault(key.lower(), []), v)
        if noun:
            for r in records:
                for key in ("name", "id", "title", f"{noun}_name", f"{noun}_id"):
                    if isinstance(r.get(key), (str, int)):
                        _add(known.nouns.setdefault(noun, []), r[key])
                        break
        tables = [v for k, v in args.items() if "table" in name_tokens(k) and isinstance(v, str)]
        columns = [[str(r["name"]), str(r.get("type", ""))] for r in records
                   if isinstance(r.get("name"), str) and "type" in r]  # fmt: skip
        if len(tables) == 1 and columns:
            known.tables[tables[0]] = columns
        return
    text = value
    folder = next((v for k, v in args.items() if kind(k, {}) == "path" and isinstance(v, str)), "")
    for m in _ENTRY.finditer(text):
        path = f"{folder.rstrip('/')}/{m.group(2)}" if folder else m.group(2)
        _add(known.dirs if m.group(1) == "DIR" else known.files, path, 500)
    for m in _PATH.finditer(text):
        path = m.group(1)
        if not path.startswith(("/dev/", "/proc/", "/usr/")) and path not in known.dirs:
            _add(known.files if "." in path.rsplit("/", 1)[-1] else known.dirs, path, 500)
    for sha in _SHA.findall(text):
        _add(known.nouns.setdefault("revision", []), sha)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if noun and 0 < len(lines) <= 50:
        words = [hit.group(1) for ln in lines if (hit := _WORD_LINE.match(ln))]
        if len(words) == len(lines):
            for w in words:
                _add(known.nouns.setdefault(noun, []), w)


def _value(param: str, schema: dict[str, Any], known: Known, rng: random.Random) -> Any:
    options = suggested(param, schema) + known.for_param(param)
    if options and rng.random() < 0.8:
        return rng.choice(options)
    made = invent(param, schema, rng, known)
    if made is not None:
        return made
    return rng.choice(options) if options else None


def _arguments(spec: ToolSpec, known: Known, rng: random.Random) -> dict[str, Any] | None:
    props = spec.properties()
    args: dict[str, Any] = {}
    for p in spec.required():
        schema = props.get(p) or {}
        t = schema.get("type")
        if t == "array":
            items = schema["items"] if isinstance(schema.get("items"), dict) else {}
            one = _value(p.removesuffix("s"), items, known, rng)
            if one is None:
                return None
            args[p] = [one]
            continue
        if t in ("integer", "number"):
            args[p] = next((v for v in suggested(p, schema) if isinstance(v, (int, float))), 1)
            continue
        if t == "boolean":
            args[p] = False
            continue
        v = _value(p, schema, known, rng)
        if v is None:
            return None
        args[p] = v
    return args


def probe(
    server: MCPServer, toolset: Toolset, *, seed: int = 0, max_calls: int = 60
) -> dict[str, Any]:
    """Steps 1-3: what is known, as ``Environment.value_hints()`` gives it."""
    known = Known()
    copies = server.copies
    if copies is not None:  # 1)
        for path, is_dir in copies.entries():
            _add(known.dirs if is_dir else known.files, str(path), 500)
    rng = random.Random(seed)
    tools = sorted((t for t in toolset if t.extra.get("read_only")),
                   key=lambda t: (len(t.required()), t.name))  # fmt: skip
    calls = 0
    pending = list(tools)
    for _ in range(2):  # 2)
        failed = []
        for spec in pending:
            ok = False
            for _draw in range(3):
                if calls >= max_calls:
                    break
                args = _arguments(spec, known, rng)
                if args is None:
                    break
                with server.lock:
                    server.ensure(())
                    output, error = server.call(spec.name, args)
                calls += 1
                if error is None:
                    _harvest(known, spec, args, output)  # 3)
                    ok = True
                    break
            if not ok:
                failed.append(spec)
        pending = failed
        if not pending:
            break
    return {"dirs": known.dirs, "files": known.files, "nouns": known.nouns,
            "tables": known.tables}  # fmt: skip
