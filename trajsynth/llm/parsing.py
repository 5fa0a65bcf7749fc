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
   with :mod:`ast` (literals only; nothing is evaluated).
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
  spent. Everything else is C-speed (``json``, ``re`` without backtracking hazards, ``ast``)
  or one linear scan, so one output parses in linear time.

>>> r = parse_output('<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>')
>>> (r.calls[0].name, r.calls[0].arguments, r.errors)
('add', '{"a": 1}', [])
>>> parse_output('[add(a=1, b="x")]').calls[0].arguments
'{"a": 1, "b": "x"}'
"""

from __future__ import annotations

import ast
import json
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..core.ids import stable_hash
from ..core.schema import ToolCall
from ..core.text import clean_json, clean_text

__all__ = [
    "ParseResult",
    "format_hermes",
    "format_json_list",
    "format_pythonic",
    "parse_output",
]

_MAX_RAW = 2000  # characters of raw text kept in one error message
_MAX_INPUT = 200_000  # characters of one output searched for calls written as text
_MAX_CALLS = 64  # calls (or <tool_call> blocks) read from one output
_MAX_DEPTH = 64  # nesting of a call's JSON (arguments included)
_MAX_REPAIR = 8_000  # characters the near-JSON repair is tried on at once
_REPAIR_BUDGET_S = 0.25  # seconds of near-JSON repair spent on one output, at most

# an unclosed <think> ends where a call starts, so a forgotten </think> loses no call
_THINK = re.compile(r"<think>(.*?)(?:</think>|(?=<tool_call>)|$)", re.DOTALL)
_TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?```$", re.DOTALL)
_BRACKETS = re.compile(r"[\[\]{}()]")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")


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
    for ch in _BRACKETS.findall(text):
        depth = depth + 1 if ch in "[{(" else max(0, depth - 1)
        deepest = max(deepest, depth)
    return deepest


def _checked(value: Any) -> Any:
    """The value with clean strings; ValueError when it is nested too deep."""
    if _depth(value) > _MAX_DEPTH:
        raise ValueError(f"nested deeper than {_MAX_DEPTH} levels")
    return clean_json(value)


class _OutOfTime(BaseException):
    """Raised inside json-repair when the repair budget is spent (a BaseException, so that
    the library's own ``except Exception`` cannot swallow it)."""


_BUDGET = threading.local()  # .deadline: monotonic time after which no repair runs


def _repair(text: str) -> Any:
    """``json_repair.loads(text)`` within the time left of this output's repair budget.

    json-repair is pure Python and superlinear on some inputs (minutes for 8 kB of
    ``1]{ "`` repeated), so it runs under a trace hook that checks the clock every 256
    Python calls and stops it when the budget is spent."""
    import json_repair

    deadline = getattr(_BUDGET, "deadline", None)
    if deadline is None:
        return json_repair.loads(text)
    if time.monotonic() >= deadline:
        raise _OutOfTime
    calls = 0

    def check(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        calls += 1
        if not calls & 255 and time.monotonic() >= deadline:
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
# the formats
# --------------------------------------------------------------------------------------


def _parse_hermes(text: str, result: ParseResult) -> str:
    """Read every <tool_call> block; return the text outside them."""
    offset = len(result.calls)
    blocks = _TOOL_CALL.findall(text)
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
    return _TOOL_CALL.sub("", text)


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
        if any(k is None for k in node.keys):
            raise ValueError("dict unpacking")
        return {_literal(k): _literal(v) for k, v in zip(node.keys, node.values, strict=True)}
    return ast.literal_eval(node)


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    raise ValueError("not a function name")


def _parse_pythonic(text: str) -> list[tuple[str, dict[str, Any]]] | None:
    """Calls from ``[f(a=1), g()]`` (or one bare call); None when the text is not that."""
    stripped = text.strip()
    if not stripped or "(" not in stripped:
        return None
    if len(stripped) > _MAX_INPUT:
        return None
    try:
        tree = ast.parse(stripped, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    body = tree.body
    nodes = body.elts if isinstance(body, (ast.List, ast.Tuple)) else [body]
    if not nodes or not all(isinstance(n, ast.Call) for n in nodes):
        return None
    calls = []
    for call in nodes:
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


def _split_list(text: str) -> list[str] | None:
    """The top-level elements of a JSON-like list ``[a, b, ...]`` as text (strings in double
    or single quotes and escapes respected; a missing ``]`` tolerated). One linear scan;
    None when the text is not a list."""
    s = text.strip()
    if not s.startswith("["):
        return None
    parts: list[str] = []
    depth, start, quote, escaped = 0, 1, "", False
    for j in range(1, len(s)):
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
            if depth == 0:  # the list's own closing bracket
                parts.append(s[start:j])
                return [p for p in (x.strip() for x in parts) if p]
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(s[start:j])
            start = j + 1
        if len(parts) > _MAX_CALLS:
            break
    parts.append(s[start:])
    return [p for p in (x.strip() for x in parts) if p]


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
    _BUDGET.deadline = time.monotonic() + _REPAIR_BUDGET_S
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
        thoughts = [t.strip() for t in _THINK.findall(text)]
        text = _THINK.sub("", text)
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
        fenced = _FENCE.match(body)
        if fenced:
            body = fenced.group(1).strip()
        if body.startswith("[") or (body and _IDENT.match(body.split("(", 1)[0].strip() or "-")):
            py = _parse_pythonic(body)
            if py is not None:
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
