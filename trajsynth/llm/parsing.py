"""Tool-call parsing shared by every backend.

Models write calls in several ways. :func:`parse_output` reads all of them from one assistant
output and never raises: anything it cannot read becomes a format error string that carries
the raw text, so the stage can record it on the row.

1. **Native** ``tool_calls`` (OpenAI API): taken as they are. Arguments stay the raw text the
   model produced; when they are not a JSON object a format error is recorded (and the call
   kept, unrepaired, so verifiers see the malformed call).
2. **Hermes / Qwen** text: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, one
   block per call, anywhere in the text (an unclosed last block is read to the end).
3. **Pythonic** (BFCL / ToolACE): the whole output is ``[func(a=1, b="x"), other()]``, read
   with :mod:`ast` (literals only; nothing is evaluated; a list too large for that is one
   error, see ``_MAX_PY_NODES``).
4. **Bare JSON**: the whole output (or a fenced ```json block) is ``[{"name", "arguments"}]``
   or one such object; ``parameters`` is accepted for ``arguments``, and arguments given as
   a JSON string are decoded.
5. **Near-JSON** inside 2 and 4 (single quotes, trailing commas, a missing brace) is repaired
   with ``json-repair``; the repair is noted in ``repairs``, not counted as an error.

Reasoning in ``<think>...</think>`` is split off into ``reasoning``. Text that is none of the
above is plain content (no calls, no error): a model that answers in prose is not malformed.

The parser is total and cheap, because it runs inside the async client and one slow reply
would stall every request in flight:

- text is cleaned first (lone surrogates, NUL: ``core.text``), so no id, cache line or
  Parquet write fails on what a model wrote;
- every call is read on its own: one bad call (a block that does not parse, arguments nested
  too deep, a failure inside the parser) becomes one error and costs no other call;
- work is bounded: only the first ``_MAX_INPUT`` characters are searched for text calls, at
  most ``_MAX_CALLS`` calls are read, JSON values nested deeper than ``_MAX_DEPTH`` are
  refused, and the repair (pure Python, superlinear on some inputs) only sees pieces of at
  most ``_MAX_REPAIR`` characters and stops when the output's ``_REPAIR_BUDGET_S`` is
  spent. Everything else is C-speed (``json``, ``ast``, ``str.find``) or one linear scan
  with a bounded number of steps, so one output parses in linear time. No regular
  expression reads model text here: tags and fences are found with ``str.find`` and
  ``str.startswith`` (a backtracking pattern took minutes on 100k characters of a
  backtick fence followed by letters);
- an output of more than :data:`OFF_LOOP_CHARS` characters is parsed in a worker thread by
  the async client (:func:`parse_output_async`), so even a slow parse never stalls the event
  loop and the other requests in flight.

>>> r = parse_output('<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>')
>>> (r.calls[0].name, r.calls[0].arguments, r.errors)
('add', '{"a": 1}', [])
>>> parse_output('[add(a=1, b="x")]').calls[0].arguments
'{"a": 1, "b": "x"}'
"""

from __future__ import annotations

import ast
import asyncio
import json
import string
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..core.ids import stable_hash
from ..core.schema import ToolCall
from ..core.text import clean_json, clean_text

__all__ = [
    "OFF_LOOP_CHARS",
    "ParseResult",
    "format_hermes",
    "format_json_list",
    "format_pythonic",
    "output_chars",
    "parse_output",
    "parse_output_async",
]

_MAX_RAW = 2000  # characters of raw text kept in one error message
_MAX_INPUT = 200_000  # characters of one output searched for calls written as text
_MAX_CALLS = 64  # calls (or <tool_call> blocks) read from one output
_MAX_DEPTH = 64  # nesting of a call's JSON (arguments included)
_MAX_REPAIR = 8_000  # characters the near-JSON repair is tried on at once
_REPAIR_BUDGET_S = 0.05  # CPU seconds of near-JSON repair spent on one output, at most
#: outputs longer than this (characters of content, reasoning and native arguments) are
#: parsed off the event loop by :func:`parse_output_async`
OFF_LOOP_CHARS = 16_000
_MAX_SCAN = 4 * _MAX_REPAIR  # characters of near-JSON list elements scanned one by one
_MAX_PY_NODES = 2_048  # brackets, commas, '=', ':' and '.' of pythonic calls read with ast

_JSON = json.JSONDecoder()

_IDENT_HEAD = string.ascii_letters + "_"
_IDENT_CHARS = string.ascii_letters + string.digits + "_.-"


@dataclass
class ParseResult:
    """What :func:`parse_output` read from one output."""

    content: str | None
    calls: list[ToolCall] = field(default_factory=list)
    reasoning: str | None = None
    errors: list[str] = field(default_factory=list)
    repairs: list[str] = field(default_factory=list)
    format: str = "text"  # native | hermes | pythonic | json | text


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_RAW else text[:_MAX_RAW] + "…"


def _call_id(index: int, name: str, arguments: str) -> str:
    return f"call_{index}_{stable_hash([name, arguments], digest_size=4)}"


def _dump_args(args: dict[str, Any]) -> str:
    return json.dumps(args, ensure_ascii=False)


# --------------------------------------------------------------------------------------
# JSON with repair
# --------------------------------------------------------------------------------------


def _depth(value: Any) -> int:
    """Nesting depth of a JSON value (iterative: any depth is safe to measure)."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            deepest = max(deepest, d)
            stack.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            deepest = max(deepest, d)
            stack.extend((x, d + 1) for x in v)
    return deepest


def _bracket_depth(text: str) -> int:
    """Deepest run of open brackets and parentheses, counted without regard to strings (an
    upper bound of the nesting the repair would walk; at C speed for the usual case)."""
    opened = text.count("{") + text.count("[") + text.count("(")
    if opened <= _MAX_DEPTH:
        return opened
    depth = deepest = 0
    for ch in text:  # only called on pieces of at most _MAX_REPAIR characters
        if ch in "[{(":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]})":
            depth = max(0, depth - 1)
    return deepest


def _checked(value: Any) -> Any:
    """The value with clean strings; ValueError when it is nested too deep. Of a list, only
    the first ``_MAX_CALLS`` items are checked and cleaned (no reader looks further); the
    others are kept as they are, to be counted."""
    if isinstance(value, list) and len(value) > _MAX_CALLS:
        return [*_checked(value[:_MAX_CALLS]), *value[_MAX_CALLS:]]
    if _depth(value) > _MAX_DEPTH:
        raise ValueError(f"nested deeper than {_MAX_DEPTH} levels")
    return clean_json(value)


class _OutOfTime(BaseException):
    """Raised inside json-repair when the repair budget is spent (a BaseException, so that
    the library's own ``except Exception`` cannot swallow it)."""


#: .deadline: the thread's CPU time (``time.thread_time``) after which no repair runs: CPU,
#: not wall time, so that a loaded machine does not cut a repair short
_BUDGET = threading.local()


def _repair(text: str) -> Any:
    """``json_repair.loads(text)`` within the time left of this output's repair budget.

    json-repair is pure Python and superlinear on some inputs (minutes for 8 kB of
    ``1]{ "`` repeated), so it runs under a trace hook that checks the clock every 256
    Python calls and stops it when the budget is spent. Importing it (once) is not
    counted."""
    deadline = getattr(_BUDGET, "deadline", None)
    started = time.thread_time()
    import json_repair

    if deadline is None:
        return json_repair.loads(text)
    deadline = _BUDGET.deadline = deadline + time.thread_time() - started  # (the import)
    if time.thread_time() >= deadline:
        raise _OutOfTime
    calls = 0

    def check(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        calls += 1
        if not calls & 255 and time.thread_time() >= deadline:
            raise _OutOfTime

    previous = sys.gettrace()
    sys.settrace(check)
    try:
        return json_repair.loads(text)
    finally:
        sys.settrace(previous)


def _loads(text: str) -> tuple[Any, bool]:
    """(value, repaired). Raises ValueError when even the repair gives nothing usable."""
    try:
        return _checked(json.loads(text)), False
    except RecursionError:
        raise ValueError(f"nested deeper than {_MAX_DEPTH} levels") from None
    except ValueError as exc:
        if str(exc).startswith("nested deeper"):
            raise
    if len(text) > _MAX_REPAIR:
        raise ValueError(f"not JSON, and too long to repair ({len(text):,} characters)")
    if _bracket_depth(text) > _MAX_DEPTH:
        raise ValueError(f"not JSON, and nested deeper than {_MAX_DEPTH} levels")
    try:
        value = _repair(text)
    except _OutOfTime:
        raise ValueError("not JSON, and the repair ran out of time") from None
    except Exception as exc:  # json-repair is robust, but never let it escape
        raise ValueError(f"unrepairable JSON: {exc}") from None
    if value in ("", None, [], {}) and text.strip() not in ("", "null", "[]", "{}"):
        raise ValueError("unrepairable JSON")
    return _checked(value), True


def _call_from_obj(obj: Any) -> tuple[str, dict[str, Any]] | str:
    """(name, arguments) from {"name", "arguments"|"parameters"} or an error string."""
    if not isinstance(obj, dict):
        return f"expected a call object, got {type(obj).__name__}"
    if "function" in obj and isinstance(obj["function"], dict):  # OpenAI-shaped
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return "call has no string `name`"
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = _checked(json.loads(args)) if args.strip() else {}
        except (ValueError, RecursionError):
            return f"arguments of {name!r} are not JSON: {_clip(args)}"
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return f"arguments of {name!r} are not an object"
    return name, args


def _call_at(obj: Any, index: int) -> ToolCall | str:
    """The call ``obj`` describes, as the reply's ``index``-th call, or why it is not one."""
    got = _call_from_obj(obj)
    if isinstance(got, str):
        return got
    name, args = got
    arguments = _dump_args(args)
    return ToolCall(id=_call_id(index, name, arguments), name=name, arguments=arguments)


# --------------------------------------------------------------------------------------
# tags and fences, found with str.find: each character is looked at a bounded number of times
# --------------------------------------------------------------------------------------


def _tag_blocks(text: str, open_tag: str, close_tag: str) -> tuple[list[str], str]:
    """The bodies of ``open_tag … close_tag`` blocks (an unclosed last block runs to the end)
    and the text outside them."""
    bodies: list[str] = []
    outside: list[str] = []
    pos = 0
    while (i := text.find(open_tag, pos)) >= 0:
        outside.append(text[pos:i])
        start = i + len(open_tag)
        j = text.find(close_tag, start)
        if j < 0:
            bodies.append(text[start:])
            pos = len(text)
            break
        bodies.append(text[start:j])
        pos = j + len(close_tag)
    outside.append(text[pos:])
    return bodies, "".join(outside)


def _think_blocks(text: str) -> tuple[list[str], str]:
    """The bodies of ``<think>`` blocks and the text outside them. A block ends at
    ``</think>`` or, when that is missing, where a ``<tool_call>`` starts (so a forgotten
    ``</think>`` loses no call) or at the end. The next ``</think>`` and ``<tool_call>`` are
    remembered between blocks, so every search starts past the last one: linear time."""
    bodies: list[str] = []
    outside: list[str] = []
    pos = 0
    close = call = -2  # where the next </think> / <tool_call> is; -1: none; -2: not looked
    while (i := text.find("<think>", pos)) >= 0:
        outside.append(text[pos:i])
        start = i + len("<think>")
        if close != -1 and close < start:
            close = text.find("</think>", start)
        if call != -1 and call < start:
            call = text.find("<tool_call>", start)
        ends = [e for e in (close, call) if e >= 0]
        end = min(ends) if ends else len(text)
        bodies.append(text[start:end])
        pos = end + len("</think>") if end == close else end
    outside.append(text[pos:])
    return bodies, "".join(outside)


def _unfence(body: str) -> str | None:
    """The inside of a stripped output that is one ```-fenced block (a leading language tag
    such as ``json`` dropped), or None when it is not one."""
    if len(body) < 6 or not body.startswith("```") or not body.endswith("```"):
        return None
    return body[3:-3].lstrip(string.ascii_letters).strip()


def _is_ident(name: str) -> bool:
    """``name`` is a (dotted) function name: a letter or ``_``, then letters, digits, ``_.-``."""
    return bool(name) and name[0] in _IDENT_HEAD and not name.strip(_IDENT_CHARS)


# --------------------------------------------------------------------------------------
# the formats
# --------------------------------------------------------------------------------------


def _parse_hermes(text: str, result: ParseResult) -> str:
    """Read every <tool_call> block; return the text outside them."""
    offset = len(result.calls)
    blocks, outside = _tag_blocks(text, "<tool_call>", "</tool_call>")
    for i, block in enumerate(blocks):
        if len(result.calls) >= _MAX_CALLS or i >= _MAX_CALLS:
            result.errors.append(
                f"{len(blocks) - i} more <tool_call> blocks not read (at most {_MAX_CALLS})"
            )
            break
        body = block.strip()
        try:
            _hermes_block(body, offset + i, result)
        except Exception as exc:  # one block's failure costs that block only
            result.errors.append(
                f"<tool_call> block: parser failure ({type(exc).__name__}): {_clip(body)}"
            )
    return outside


def _hermes_block(body: str, index: int, result: ParseResult) -> None:
    try:
        value, repaired = _loads(body)
    except ValueError as exc:
        result.errors.append(f"unparseable <tool_call> block ({exc}): {_clip(body)}")
        return
    items = value if isinstance(value, list) else [value]
    for item in items[:_MAX_CALLS]:
        call = _call_at(item, index)
        if isinstance(call, str):
            result.errors.append(f"<tool_call> block: {call}: {_clip(body)}")
            continue
        result.calls.append(call)
        if repaired:
            result.repairs.append(f"repaired near-JSON in <tool_call> for {call.name!r}")


def _literal(node: ast.AST) -> Any:
    """A Python/JSON literal from an AST node (JSON's true/false/null accepted)."""
    if isinstance(node, ast.Name) and node.id in ("true", "false", "null", "True", "False", "None"):
        return {"true": True, "false": False, "null": None}.get(node.id, ast.literal_eval(node))
    if isinstance(node, ast.List):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.Tuple):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        keys = [k for k in node.keys if k is not None]  # None: a ** unpacking
        if len(keys) < len(node.keys):
            raise ValueError("dict unpacking")
        return {_literal(k): _literal(v) for k, v in zip(keys, node.values, strict=True)}
    return ast.literal_eval(node)


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    raise ValueError("not a function name")


def _parse_pythonic(text: str) -> list[tuple[str, dict[str, Any]]] | str | None:
    """Calls from ``[f(a=1), g()]`` (or one bare call); None when the text is not that, and
    an error when it is a list of calls too large to read: Python's parser costs a few
    microseconds per bracket, comma, ``=``, ``:`` or ``.``, so at most ``_MAX_PY_NODES`` of
    them are given to it."""
    stripped = text.strip()
    if not stripped or "(" not in stripped:
        return None
    if len(stripped) > _MAX_INPUT:
        return None
    nodes = sum(stripped.count(ch) for ch in "([{,=:.")
    if nodes > _MAX_PY_NODES:
        first = stripped[1:].lstrip().partition("(")[0].strip()
        if stripped.startswith("[") and _is_ident(first):
            return (
                f"pythonic tool calls too large to read ({nodes:,} brackets, commas, '=', ':' "
                f"and '.', at most {_MAX_PY_NODES:,}): {_clip(stripped)}"
            )
        return None
    try:
        tree = ast.parse(stripped, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    body = tree.body
    exprs = body.elts if isinstance(body, (ast.List, ast.Tuple)) else [body]
    if not exprs or not all(isinstance(n, ast.Call) for n in exprs):
        return None
    calls = []
    for call in exprs:
        assert isinstance(call, ast.Call)
        try:
            name = _dotted(call.func)
            if call.args:
                return None
            args = {}
            for kw in call.keywords:
                if kw.arg is None:
                    return None
                args[kw.arg] = _literal(kw.value)
            json.dumps(args)  # only JSON values (no sets, bytes, complex numbers)
            args = _checked(args)
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            return None
        calls.append((name, args))
    return calls


def _looks_like_json_calls(text: str) -> bool:
    s = text.lstrip()
    return (s.startswith("[") and '"name"' in s[:400]) or (
        s.startswith("{") and '"name"' in s[:400]
    )


def _is_call_obj(x: Any) -> bool:
    return isinstance(x, dict) and (
        ("name" in x and ("arguments" in x or "parameters" in x))
        or isinstance(x.get("function"), dict)
    )


def _skip_space(s: str, i: int) -> int:
    """The index of the first character at or after ``i`` that is not whitespace (``len(s)``
    when none): ``str.lstrip`` on slices of bounded size, so a long run costs C speed."""
    while i < len(s):
        chunk = s[i : i + 4096]
        rest = chunk.lstrip()
        if rest:
            return i + len(chunk) - len(rest)
        i += len(chunk)
    return len(s)


def _element_end(s: str, start: int, stop: int) -> int | None:
    """Where the near-JSON list element at ``start`` ends: the index of the top-level ``,``
    or closing bracket after it (strings in double or single quotes and escapes respected),
    ``len(s)`` at the end of the text; None when neither comes before ``stop``."""
    depth, quote, escaped = 0, "", False
    for j in range(start, min(stop, len(s))):
        ch = s[j]
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            if depth == 0:
                return j
            depth -= 1
        elif ch == "," and depth == 0:
            return j
    return len(s) if stop >= len(s) else None


def _split_list(text: str) -> list[str] | None:
    """The top-level elements of a JSON-like list ``[a, b, ...]`` as text (a missing ``]``
    tolerated); None when the text is not a list. An element that is valid JSON is read at C
    speed (``raw_decode``); only near-JSON elements are scanned character by character, and
    at most ``_MAX_SCAN`` characters of them in all: past that, the rest of the list is one
    last element (too long to repair, so it becomes one error)."""
    s = text.strip()
    if not s.startswith("["):
        return None
    parts: list[str] = []
    i, budget = 1, _MAX_SCAN
    while len(parts) <= _MAX_CALLS:
        i = _skip_space(s, i)
        if i >= len(s) or s[i] in "]}":  # the end, or the list's own closing bracket
            return parts
        if s[i] == ",":  # an empty element
            i += 1
            continue
        try:
            end = _JSON.raw_decode(s, i)[1]
        except (ValueError, RecursionError):
            end = -1
        if end > 0:
            after = _skip_space(s, end)
            if after >= len(s) or s[after] in ",]}":
                parts.append(s[i:end])
                i = after if after >= len(s) or s[after] != "," else after + 1
                continue
        found = _element_end(s, i, i + budget)
        if found is None:
            break
        budget -= found - i
        part = s[i:found].strip()
        if part:
            parts.append(part)
        if found >= len(s) or s[found] != ",":
            return parts
        i = found + 1
    rest = s[i:].strip()
    if rest:
        parts.append(rest)
    return parts


def _parse_json_elements(text: str, result: ParseResult) -> bool:
    """Calls read one list element at a time, when the list as a whole did not parse: one
    bad element costs that element only. False when no element is a call."""
    parts = _split_list(text)
    if not parts:
        return False
    found = False
    for i, part in enumerate(parts[:_MAX_CALLS]):
        try:
            value, repaired = _loads(part)
        except ValueError as exc:
            result.errors.append(f"JSON tool call {i}: unparseable ({exc}): {_clip(part)}")
            continue
        if not _is_call_obj(value):
            result.errors.append(f"JSON tool call {i}: not a call object: {_clip(part)}")
            continue
        call = _call_at(value, i)
        if isinstance(call, str):
            result.errors.append(f"JSON tool call {i}: {call}")
            continue
        result.calls.append(call)
        found = True
        if repaired:
            result.repairs.append(f"repaired near-JSON in tool call {i} ({call.name!r})")
    return found


def _parse_json_calls(text: str, result: ParseResult) -> bool:
    """Calls from a whole-text JSON list/object; False when the text is not that shape."""
    try:
        value, repaired = _loads(text.strip())
    except ValueError as exc:
        probe = ParseResult(content=None)
        if _parse_json_elements(text, probe):
            result.calls.extend(probe.calls)
            result.errors.extend(probe.errors)
            result.repairs.extend(probe.repairs)
            return True
        result.errors.append(f"unparseable JSON tool calls ({exc}): {_clip(text)}")
        return True
    items = value if isinstance(value, list) else [value]
    if len(items) > _MAX_CALLS:
        result.errors.append(f"{len(items) - _MAX_CALLS} more JSON tool calls not read")
        items = items[:_MAX_CALLS]
    if not items or not all(_is_call_obj(x) for x in items):
        if repaired:
            result.errors.append(f"unparseable JSON tool calls: {_clip(text)}")
            return True
        return False
    for i, item in enumerate(items):
        call = _call_at(item, i)
        if isinstance(call, str):
            result.errors.append(f"JSON tool call {i}: {call}")
            continue
        result.calls.append(call)
    if repaired:
        result.repairs.append("repaired near-JSON tool-call list")
    return True


# --------------------------------------------------------------------------------------
# entry point
# --------------------------------------------------------------------------------------


def parse_output(
    content: str | None,
    native_calls: list[dict[str, str]] | None = None,
    *,
    reasoning: str | None = None,
) -> ParseResult:
    """Read content, reasoning and calls from one assistant output. Never raises, and runs in
    time linear in the output's length (see the module docstring for the bounds).

    ``native_calls`` are the API's ``tool_calls`` as ``{id, name, arguments}`` dicts.
    """
    content = clean_text(content) if isinstance(content, str) else None
    reasoning = clean_text(reasoning) if isinstance(reasoning, str) else None
    _BUDGET.deadline = time.thread_time() + _REPAIR_BUDGET_S
    try:
        return _parse(content, native_calls or [], reasoning)
    except Exception as exc:  # a parser bug must not fail a stage: record it instead
        return ParseResult(
            content=content,
            reasoning=reasoning,
            errors=[f"parser failure ({type(exc).__name__}): {_clip(content or '')}"],
        )
    finally:
        _BUDGET.deadline = None


def output_chars(
    content: str | None,
    native_calls: list[dict[str, Any]] | None = None,
    reasoning: str | None = None,
) -> int:
    """Characters :func:`parse_output` reads from one output (what decides whether
    :func:`parse_output_async` parses it in a thread)."""
    n = len(content) if isinstance(content, str) else 0
    n += len(reasoning) if isinstance(reasoning, str) else 0
    for call in native_calls or []:
        if isinstance(call, dict):
            n += sum(len(v) for v in call.values() if isinstance(v, str))
    return n


async def parse_output_async(
    content: str | None,
    native_calls: list[dict[str, str]] | None = None,
    *,
    reasoning: str | None = None,
) -> ParseResult:
    """:func:`parse_output` for async code: an output of more than :data:`OFF_LOOP_CHARS`
    characters is parsed in a worker thread, so the event loop (and every request in
    flight on it) keeps running meanwhile; a short one is parsed in place."""
    if output_chars(content, native_calls, reasoning) <= OFF_LOOP_CHARS:
        return parse_output(content, native_calls, reasoning=reasoning)
    return await asyncio.to_thread(parse_output, content, native_calls, reasoning=reasoning)


def _native_call(i: int, call: Any, result: ParseResult) -> None:
    """One API tool call into ``result`` (kept even when its arguments are malformed)."""
    if not isinstance(call, dict):
        result.errors.append(f"native tool call {i} is not an object: {_clip(str(call))}")
        return
    name = clean_text(str(call.get("name") or ""))
    arguments = call.get("arguments")
    if arguments is None:
        arguments = ""
    elif not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False, default=str)
    arguments = clean_text(arguments)
    call_id = clean_text(str(call.get("id") or "")) or _call_id(i, name, arguments)
    if not name:
        result.errors.append(f"native tool call {i} has no name: {_clip(arguments)}")
        return
    tc = ToolCall(id=call_id, name=name, arguments=arguments or "{}")
    try:
        value = json.loads(tc.arguments)
        problem = None if isinstance(value, dict) else "are not a JSON object"
        if problem is None and _depth(value) > _MAX_DEPTH:
            problem = f"are nested deeper than {_MAX_DEPTH} levels"
    except RecursionError:
        problem = f"are nested deeper than {_MAX_DEPTH} levels"
    except ValueError:
        problem = "are not a JSON object"
    if problem is not None:
        result.errors.append(f"arguments of {name!r} {problem}: {_clip(arguments)}")
        if "nested" in problem or len(arguments) > _MAX_INPUT:
            # not kept: later readers of the arguments would pay for (or overflow on) them
            return
    result.calls.append(tc)


def _parse(content: str | None, native: list[dict[str, str]], reasoning: str | None) -> ParseResult:
    result = ParseResult(content=None, reasoning=reasoning)
    text = content or ""
    tail = ""
    if len(text) > _MAX_INPUT:
        # calls are only looked for in the head; the whole text stays content
        text, tail = text[:_MAX_INPUT], text[_MAX_INPUT:]
        result.errors.append(
            f"output of {len(content or ''):,} characters: only the first {_MAX_INPUT:,} "
            "were searched for tool calls"
        )

    # reasoning: <think>...</think> (Qwen3, DeepSeek-R1)
    if "<think>" in text:
        bodies, text = _think_blocks(text)
        thoughts = [t.strip() for t in bodies]
        joined = "\n".join(t for t in thoughts if t)
        result.reasoning = "\n".join(x for x in (reasoning, joined) if x) or None
    elif "</think>" in text and "<tool_call>" not in text.partition("</think>")[0]:
        # the chat template opened <think> in the prompt: what precedes </think> is reasoning
        head, _, text = text.partition("</think>")
        result.reasoning = "\n".join(x for x in (reasoning, head.strip()) if x) or None

    # 1) native tool_calls, each on its own
    if native:
        result.format = "native"
        for i, call in enumerate(native):
            if i >= _MAX_CALLS:
                result.errors.append(f"{len(native) - i} more native tool calls not read")
                break
            try:
                _native_call(i, call, result)
            except Exception as exc:
                result.errors.append(f"native tool call {i}: parser failure ({type(exc).__name__})")

    # 2) Hermes/Qwen <tool_call> blocks
    if "<tool_call>" in text:
        result.format = "hermes" if not native else result.format
        text = _parse_hermes(text, result)
    elif not tail:
        # 3) pythonic and 4) bare JSON: the whole output (possibly fenced) is the calls
        body = text.strip()
        fenced = _unfence(body)
        if fenced is not None:
            body = fenced
        if body.startswith("[") or _is_ident(body.partition("(")[0].strip()):
            py = _parse_pythonic(body)
            if isinstance(py, str):
                result.errors.append(py)
                result.format = "pythonic" if not native else result.format
                text = ""
            elif py is not None:
                if len(py) > _MAX_CALLS:
                    result.errors.append(
                        f"{len(py) - _MAX_CALLS} more pythonic tool calls not read"
                    )
                for i, (name, args) in enumerate(py[:_MAX_CALLS]):
                    arguments = _dump_args(args)
                    result.calls.append(
                        ToolCall(
                            id=_call_id(len(result.calls) + i, name, arguments),
                            name=name,
                            arguments=arguments,
                        )
                    )
                result.format = "pythonic" if not native else result.format
                text = ""
        if text and _looks_like_json_calls(body) and _parse_json_calls(body, result):
            result.format = "json" if not native else result.format
            text = ""

    text = (text + tail).strip()
    result.content = text or None
    return result


# --------------------------------------------------------------------------------------
# writers (used by the simulator, the local server and the round-trip tests)
# --------------------------------------------------------------------------------------


def format_hermes(calls: list[tuple[str, dict[str, Any]]]) -> str:
    """``<tool_call>\\n{json}\\n</tool_call>`` blocks, one per call (Qwen/Hermes)."""
    return "\n".join(
        "<tool_call>\n"
        + json.dumps({"name": n, "arguments": a}, ensure_ascii=False)
        + "\n</tool_call>"
        for n, a in calls
    )


def format_json_list(calls: list[tuple[str, dict[str, Any]]]) -> str:
    """``[{"name": ..., "arguments": {...}}]`` (xLAM / APIGen)."""
    return json.dumps([{"name": n, "arguments": a} for n, a in calls], ensure_ascii=False)


def _py_literal(value: Any) -> str:
    if isinstance(value, dict):
        return (
            "{" + ", ".join(f"{_py_literal(k)}: {_py_literal(v)}" for k, v in value.items()) + "}"
        )
    if isinstance(value, list):
        return "[" + ", ".join(_py_literal(v) for v in value) + "]"
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        raise ValueError("non-finite float has no literal")
    return repr(value)


def format_pythonic(calls: list[tuple[str, dict[str, Any]]]) -> str:
    """``[func(a=1, b="x")]`` (BFCL / ToolACE). Keys must be identifiers."""
    parts = []
    for name, args in calls:
        inner = ", ".join(f"{k}={_py_literal(v)}" for k, v in args.items())
        parts.append(f"{name}({inner})")
    return "[" + ", ".join(parts) + "]"
