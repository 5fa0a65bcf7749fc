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
from dataclasses import dataclass, field
from typing import Any

from ..core.ids import stable_hash
from ..core.schema import ToolCall

__all__ = [
    "ParseResult",
    "format_hermes",
    "format_json_list",
    "format_pythonic",
    "parse_output",
]

_MAX_RAW = 2000  # characters of raw text kept in one error message

# an unclosed <think> ends where a call starts, so a forgotten </think> loses no call
_THINK = re.compile(r"<think>(.*?)(?:</think>|(?=<tool_call>)|$)", re.DOTALL)
_TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?```$", re.DOTALL)
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


def _loads(text: str) -> tuple[Any, bool]:
    """(value, repaired). Raises ValueError when even the repair gives nothing usable."""
    try:
        return json.loads(text), False
    except (ValueError, RecursionError):
        pass
    try:
        import json_repair

        value = json_repair.loads(text)
    except Exception as exc:  # json-repair is robust, but never let it escape
        raise ValueError(f"unrepairable JSON: {exc}") from None
    if value in ("", None, [], {}) and text.strip() not in ("", "null", "[]", "{}"):
        raise ValueError("unrepairable JSON")
    return value, True


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
            args = json.loads(args) if args.strip() else {}
        except ValueError:
            return f"arguments of {name!r} are not JSON: {_clip(args)}"
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return f"arguments of {name!r} are not an object"
    return name, args


# --------------------------------------------------------------------------------------
# the formats
# --------------------------------------------------------------------------------------


def _parse_hermes(text: str, result: ParseResult) -> str:
    """Read every <tool_call> block; return the text outside them."""
    offset = len(result.calls)
    for i, block in enumerate(_TOOL_CALL.findall(text)):
        body = block.strip()
        try:
            value, repaired = _loads(body)
        except ValueError:
            result.errors.append(f"unparseable <tool_call> block: {_clip(body)}")
            continue
        items = value if isinstance(value, list) else [value]
        for item in items:
            got = _call_from_obj(item)
            if isinstance(got, str):
                result.errors.append(f"<tool_call> block: {got}: {_clip(body)}")
                continue
            name, args = got
            arguments = _dump_args(args)
            result.calls.append(
                ToolCall(id=_call_id(offset + i, name, arguments), name=name, arguments=arguments)
            )
            if repaired:
                result.repairs.append(f"repaired near-JSON in <tool_call> for {name!r}")
    return _TOOL_CALL.sub("", text)


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
    if len(stripped) > 200_000:
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


def _parse_json_calls(text: str, result: ParseResult) -> bool:
    """Calls from a whole-text JSON list/object; False when the text is not that shape."""
    try:
        value, repaired = _loads(text.strip())
    except ValueError:
        result.errors.append(f"unparseable JSON tool calls: {_clip(text)}")
        return True
    items = value if isinstance(value, list) else [value]
    if not items or not all(_is_call_obj(x) for x in items):
        if repaired:
            result.errors.append(f"unparseable JSON tool calls: {_clip(text)}")
            return True
        return False
    for i, item in enumerate(items):
        got = _call_from_obj(item)
        if isinstance(got, str):
            result.errors.append(f"JSON tool call {i}: {got}")
            continue
        name, args = got
        arguments = _dump_args(args)
        result.calls.append(
            ToolCall(id=_call_id(i, name, arguments), name=name, arguments=arguments)
        )
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
    """Read content, reasoning and calls from one assistant output. Never raises.

    ``native_calls`` are the API's ``tool_calls`` as ``{id, name, arguments}`` dicts.
    """
    try:
        return _parse(content, native_calls or [], reasoning)
    except Exception as exc:  # a parser bug must not fail a stage: record it instead
        return ParseResult(
            content=content,
            reasoning=reasoning,
            errors=[f"parser failure ({type(exc).__name__}): {_clip(content or '')}"],
        )


def _parse(content: str | None, native: list[dict[str, str]], reasoning: str | None) -> ParseResult:
    result = ParseResult(content=None, reasoning=reasoning)
    text = content or ""

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

    # 1) native tool_calls
    if native:
        result.format = "native"
        for i, call in enumerate(native):
            name = str(call.get("name") or "")
            arguments = call.get("arguments")
            arguments = "" if arguments is None else str(arguments)
            call_id = str(call.get("id") or _call_id(i, name, arguments))
            if not name:
                result.errors.append(f"native tool call {i} has no name: {_clip(arguments)}")
                continue
            tc = ToolCall(id=call_id, name=name, arguments=arguments or "{}")
            if tc.parsed_arguments() is None:
                result.errors.append(
                    f"arguments of {name!r} are not a JSON object: {_clip(arguments)}"
                )
            result.calls.append(tc)

    # 2) Hermes/Qwen <tool_call> blocks
    if "<tool_call>" in text:
        result.format = "hermes" if not native else result.format
        text = _parse_hermes(text, result)
    else:
        # 3) pythonic and 4) bare JSON: the whole output (possibly fenced) is the calls
        body = text.strip()
        fenced = _FENCE.match(body)
        if fenced:
            body = fenced.group(1).strip()
        if body.startswith("[") or (body and _IDENT.match(body.split("(", 1)[0].strip() or "-")):
            py = _parse_pythonic(body)
            if py is not None:
                for i, (name, args) in enumerate(py):
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

    text = text.strip()
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
