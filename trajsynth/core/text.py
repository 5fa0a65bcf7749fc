"""Text that is safe everywhere: valid Unicode scalar values, no NUL.

Text that enters trajsynth from outside (model replies, tool outputs, imported files) may
carry what Python strings allow but UTF-8, Parquet, JSON Lines files and C libraries do not:

- **lone surrogates** (``"Done \\ud83d"`` is valid JSON, and models emit it): they cannot be
  encoded as UTF-8, so every later ``encode`` (cache, Parquet, log files, hashes) would raise;
- **NUL** characters, which C-string APIs (tokenizers, terminals, some servers) truncate at;
- **invalid UTF-8 bytes**, when text arrives as bytes.

:func:`clean_text` returns a string without those (a lone surrogate becomes U+FFFD, a
surrogate *pair* written as two code points becomes the one character it encodes, NUL is
dropped); :func:`decode_text` decodes bytes the same way; :func:`clean_json` applies
:func:`clean_text` to every string (keys too) inside a JSON value. All three are cheap on the
common case: valid text is returned as it is (the same object), after one scan.

>>> clean_text("Done \\ud83d")
'Done �'
>>> clean_text("\\ud83d\\ude00") == "\\U0001F600"
True
>>> clean_text("a\\x00b")
'ab'
>>> decode_text(b"caf\\xc3\\xa9 \\xff")
'café �'

:func:`split_words` splits a name or a text into lower-case words (camelCase, snake_case,
kebab-case, dotted paths): the one splitter the graph, the simulated environments and the
methods compare tool and parameter names with.

>>> split_words("getOrderDetails"), split_words("flights[].flight_id"), split_words("v2API")
(['get', 'order', 'details'], ['flights', 'flight', 'id'], ['v2', 'api'])
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["clean_json", "clean_text", "decode_text", "is_clean", "split_words"]

_NUL = "\x00"
_SURROGATE = re.compile("[\ud800-\udfff]")
_PAIR = re.compile("[\ud800-\udbff][\udc00-\udfff]")
_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_NOT_ALNUM = re.compile(r"[^A-Za-z0-9]+")


def is_clean(text: str) -> bool:
    """True when ``text`` encodes as UTF-8 and holds no NUL."""
    if _NUL in text:
        return False
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _join_pair(m: re.Match[str]) -> str:
    pair = m.group()  # the pattern matches exactly two code units
    hi, lo = pair[0], pair[1]
    return chr(0x10000 + ((ord(hi) - 0xD800) << 10) + (ord(lo) - 0xDC00))


def clean_text(text: str) -> str:
    """``text`` with lone surrogates replaced by U+FFFD, surrogate pairs joined, NUL dropped."""
    if is_clean(text):
        return text
    if _NUL in text:
        text = text.replace(_NUL, "")
    if _SURROGATE.search(text):
        # a pair of surrogate code points becomes the character it encodes, a lone one the
        # replacement character (regular expressions: linear, at C speed)
        text = _SURROGATE.sub("\ufffd", _PAIR.sub(_join_pair, text))
    return text


def decode_text(data: bytes | bytearray | memoryview) -> str:
    """UTF-8 bytes → clean text (invalid sequences become U+FFFD, NUL is dropped)."""
    return clean_text(bytes(data).decode("utf-8", "replace"))


def clean_json(value: Any) -> Any:
    """A JSON value with :func:`clean_text` applied to every string in it (keys included).

    Returns ``value`` itself when nothing needed cleaning (no copy on the common case).
    Nesting is walked with an explicit stack, so depth cannot overflow the interpreter.
    """
    if isinstance(value, str):
        return clean_text(value)
    if not isinstance(value, (dict, list, tuple)):
        return value
    if _all_clean(value):
        return value
    return _rebuild(value)


def _all_clean(value: Any) -> bool:
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if not is_clean(v):
                return False
        elif isinstance(v, dict):
            for k, x in v.items():
                if isinstance(k, str) and not is_clean(k):
                    return False
                stack.append(x)
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
    return True


def _rebuild(value: Any) -> Any:
    """A cleaned copy of a nested value, built without recursion."""
    root: list[Any] = [None]
    # (source, parent container, key in parent)
    stack: list[tuple[Any, Any, Any]] = [(value, root, 0)]
    while stack:
        v, parent, key = stack.pop()
        if isinstance(v, str):
            parent[key] = clean_text(v)
        elif isinstance(v, dict):
            new: dict[Any, Any] = {}
            parent[key] = new
            for k, x in v.items():
                k2 = clean_text(k) if isinstance(k, str) else k
                new[k2] = None
                stack.append((x, new, k2))
        elif isinstance(v, (list, tuple)):
            items: list[Any] = [None] * len(v)
            parent[key] = items  # tuples become lists, as in JSON
            for i, x in enumerate(v):
                stack.append((x, items, i))
        else:
            parent[key] = v
    return root[0]


def split_words(text: str) -> list[str]:
    """The words of ``text``, lower-cased: runs of ASCII letters and digits, split where a
    lower-case letter or digit meets an upper-case one (``getOrderDetails``,
    ``get_order-details.v2``); a run of capitals is not split (``userIDs`` → user, ids;
    ``HTTPServer`` → httpserver)."""
    return [w.lower() for w in _NOT_ALNUM.split(_CAMEL.sub(r"\1 \2", text)) if w]
