"""What an MCP server's answer means: a result, or a failure of the call.

A call fails when (in this order):

1) the request raised: a JSON-RPC error from the server (invalid params: "expected number,
   received string at a"), a timeout, a dead connection. Exception groups (the SDK's task
   groups) are opened down to the errors inside them, so the message is the server's, never
   "unhandled errors in a TaskGroup";
2) the result says ``isError``;
3) with ``error_text``, the result is shaped like an error although the server did not say
   so: a text whose first line starts like ``Error: ...``, ``Database error: ...``,
   ``Error executing ...``, ``Traceback (most recent call last)``, ``ENOENT: ...``; or a JSON
   object whose only purpose is an error (``{"error": ...}``, ``{"success": false, ...}``,
   ``{"ok": false}``, ``{"status": "error"}``); or a text matching one of the config's
   ``error_patterns``.

A failure whose message says nothing but that the tool failed ("Error executing tool x", as
SDK servers answer an unexpected exception) gets the exception the server printed to stderr
meanwhile (:func:`stderr_error`: tracebacks, also ones drawn in boxes and wrapped).

Anything else is the call's output: the structured content when the server gives one, else
the text (parsed when it is JSON).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from ...core.ids import canonical_json

__all__ = ["error_text", "exception_message", "interpret", "stderr_error"]

_FIRST_LINE_ERROR = re.compile(
    r"""^\W{0,3}(?:
        (?:[A-Za-z_][\w.]*\s+){0,3}(?:error|exception)\s*[:!]      # "Error:", "Database error:"
      | (?:error|failed|failure|fatal)\b                           # "Error executing tool x"
      | traceback\s\(most\srecent\scall\slast\)
      | [A-Za-z_.]*(?:Error|Exception)\b(?::|\s*\()                # "ValueError: ...", "TypeError("
      | E(?:NOENT|ACCES|EXIST|NOTDIR|ISDIR|ROFS|PERM|NOTEMPTY|INVAL|BUSY)\b
    )""",
    re.IGNORECASE | re.VERBOSE,
)
_ERROR_KEYS = {"error", "errors", "error_message", "errormessage", "exception"}


def error_text(output: Any, patterns: Iterable[re.Pattern[str]] = ()) -> str | None:
    """Step 3: the error message when ``output`` is shaped like an error, else None."""
    if isinstance(output, str):
        first = output.lstrip().split("\n", 1)[0]
        if _FIRST_LINE_ERROR.match(first):
            return output.strip()
        for p in patterns:
            if p.search(output):
                return output.strip()
        return None
    if isinstance(output, dict) and output:
        keys = {str(k).lower() for k in output}
        err = next((output[k] for k in output if str(k).lower() in _ERROR_KEYS), None)
        others = keys - _ERROR_KEYS - {"code", "status", "message", "details"}
        if err not in (None, "", [], {}) and not others:
            return err if isinstance(err, str) else canonical_json(err)
        if output.get("success") is False or output.get("ok") is False:
            return str(output.get("message") or output.get("error") or canonical_json(output))
        if str(output.get("status", "")).lower() in ("error", "failed", "failure"):
            return str(output.get("message") or output.get("error") or canonical_json(output))
    return None


_EXCEPTION = re.compile(
    r"\b([A-Z]\w*(?:Error|Exception|Exit)): (.+?)"
    r"(?=\s+[A-Z]\w*(?:Error|Exception): |\s+The above exception|\s+During handling|$)"
)
_GENERIC = re.compile(r"^(?:\w+: )?Error executing tool \S+$|^the tool reported an error", re.I)


def generic(message: str) -> bool:
    """Whether ``message`` only says that the tool failed."""
    return bool(_GENERIC.match(message.strip()))


def stderr_error(text: str) -> str | None:
    """The first exception a server printed in ``text`` that says more than that a tool
    failed (box-drawing and line wrapping taken out), e.g. "OSError: [Errno 30] Read-only
    file system: '/data/x'"."""
    flat = re.sub(r"[\u2500-\u257f]+", " ", text)
    flat = re.sub(r"\s+", " ", flat)
    for m in _EXCEPTION.finditer(flat):
        found = f"{m.group(1)}: {m.group(2).strip()}"[:400]
        if not generic(m.group(2)) and "UnexpectedToolError" not in found:
            return found
    return None


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for e in exc.exceptions for leaf in _leaves(e)]
    return [exc]


def exception_message(exc: BaseException) -> str:
    """Step 1: the most telling message inside ``exc`` (groups opened, chained causes
    followed), e.g. "MCPError: expected number, received string at a"."""
    leaves = _leaves(exc)
    chained = []
    for leaf in leaves:
        seen = leaf
        while (cause := seen.__cause__ or seen.__context__) is not None:
            seen = cause
            chained.extend(_leaves(seen))
    texts = []
    for e in [*leaves, *chained]:
        text = str(e).strip() or type(e).__name__
        if "unhandled errors in a TaskGroup" in text:
            continue
        texts.append(text if type(e).__name__ in text else f"{type(e).__name__}: {text}")
    generic = ("Connection closed", "CancelledError")
    best = [t for t in texts if not any(g in t for g in generic)] or texts
    seen_texts: list[str] = []
    for t in best:
        if t not in seen_texts:
            seen_texts.append(t)
    return "; ".join(seen_texts[:3]) or type(exc).__name__


def interpret(
    result: Any, *, error_shapes: bool, patterns: Iterable[re.Pattern[str]] = ()
) -> tuple[Any, str | None]:
    """Steps 2-3 for a ``CallToolResult``: (output, None) or (None, the error message)."""
    texts = [getattr(c, "text", None) for c in result.content or []]
    text = "\n".join(t for t in texts if t)
    if result.is_error:
        return None, text or "the tool reported an error without a message"
    if result.structured_content is not None:
        output: Any = json.loads(canonical_json(result.structured_content))
        # a server that wraps text as {"content": "..."} or {"result": "..."} still says errors
        inner = output.get("content") if isinstance(output, dict) and len(output) == 1 else None
        if error_shapes:
            found = error_text(output, patterns) or (
                error_text(inner, patterns) if isinstance(inner, str) else None
            )
            if found:
                return None, found
        return output, None
    try:
        output = json.loads(text)
    except ValueError:
        output = text
    if error_shapes:
        found = error_text(output, patterns)
        if found:
            return None, found
    return output, None
