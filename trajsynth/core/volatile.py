"""Volatile parts of a tool's result: what a replay of the same call may answer differently
(the clock, ids a server mints), and comparing results with them left out.

A real server answers from the clock ("now" in a time zone, a file's modification time, a
commit's date) and mints ids (UUIDs): two runs of the same call differ there and nowhere
else. :func:`mask` replaces, in a JSON value or a text:

1) every timestamp by ``<time>``: ISO 8601 date-times (``2025-01-01T09:30:00+00:00``, also
   with a space), e-mail and JavaScript dates (``Thu, 03 Dec 2026 07:36:32 +0000``,
   ``Thu Dec 03 2026 07:36:32 GMT+0000``) and git's (``Thu Dec 3 07:36:32 2026 +0000``);
2) every UUID by ``<id>``;
3) in JSON, the value of a member whose name says it is a time (``created``, ``modified``,
   ``accessed``, ``mtime``, ``timestamp``, ``day_of_week``, ``is_dst``, ``uptime``, ...), and
   numbers that read as a Unix time of the last ten years (seconds or milliseconds) by
   ``<time>``.

:func:`same_result` compares two results (texts, JSON texts or values) with them masked, so
a verifier checks everything but the volatile parts.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from .jsonvalues import name_tokens

__all__ = ["mask", "mask_text", "same_result"]

_ZONE = r"(?:\s?(?:Z|[+-]\d{2}:?\d{2}|UTC|GMT))?"
_ISO = r"\d{4}-\d{2}-\d{2}[T ]\d{1,2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?" + _ZONE
_DAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)[a-z]*"
_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*"
_CLOCK = r"\d{1,2}:\d{2}(?::\d{2})?"
_RFC = rf"{_DAY},?\s+\d{{1,2}}\s+{_MONTH}\s+\d{{4}}\s+{_CLOCK}(?:\s*(?:[+-]\d{{4}}|GMT|UTC|Z))?"
_JS = rf"{_DAY}\s+{_MONTH}\s+\d{{1,2}}\s+\d{{4}}\s+{_CLOCK}(?:\s*GMT[+-]\d{{4}})?(?:\s*\([^)]*\))?"
_GIT = rf"{_DAY}\s+{_MONTH}\s+\d{{1,2}}\s+{_CLOCK}\s+\d{{4}}(?:\s*[+-]\d{{4}})?"
_TIMES = re.compile("|".join(f"(?:{p})" for p in (_ISO, _RFC, _JS, _GIT)))
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I)
_TIME_WORDS = {
    "created", "modified", "accessed", "updated", "changed", "birthtime", "mtime", "atime",
    "ctime", "timestamp", "datetime", "now", "uptime", "elapsed", "dst", "weekday", "dow",
}  # fmt: skip
_TIME_NAMES = {"day_of_week", "dayofweek"}
_LOOSE_NAMES = {"time", "date", "at"}  # often a time, but as often a value the user chose
_TEN_YEARS = 10 * 365 * 86400


def mask_text(text: str) -> str:
    """Steps 1-2 on a text."""
    return _UUID.sub("<id>", _TIMES.sub("<time>", text))


def _time_key(key: str, loose: bool) -> bool:
    toks = set(name_tokens(key))
    name = key.lower()
    return (
        bool(toks & _TIME_WORDS)
        or name in _TIME_NAMES
        or (loose and name in _LOOSE_NAMES)
        or ("at" in toks and len(toks) > 1)  # created_at, updatedAt
    )


def _epoch(value: float) -> bool:
    now = time.time()
    return any(now - _TEN_YEARS <= value / scale <= now + 86400 for scale in (1, 1000))


def mask(value: Any, key: str | None = None, *, loose: bool = True) -> Any:
    """Steps 1-3 on a JSON value (``key``: the member it is the value of); ``loose=False``
    keeps members named just ``date``, ``time`` or ``at`` (a value a user may have chosen)."""
    scalar = isinstance(value, (str, int, float, bool))
    if key is not None and scalar and _time_key(key, loose):
        return "<time>"
    if isinstance(value, str):
        return mask_text(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and _epoch(float(value)):
        return "<time>"
    if isinstance(value, list):
        return [mask(v, loose=loose) for v in value]
    if isinstance(value, dict):
        return {k: mask(v, str(k), loose=loose) for k, v in value.items()}
    return value


def _load(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value.strip()
    return value


def same_result(a: Any, b: Any) -> bool:
    """Whether two results are equal but for their volatile parts."""
    if a == b:
        return True
    return bool(mask(_load(a)) == mask(_load(b)))  # JSON values: == is a bool
