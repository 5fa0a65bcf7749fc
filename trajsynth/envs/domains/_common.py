"""Helpers the built-in domains share: content-derived ids, argument parsing, lookups.

Ids of created records are derived from their content (``new_id``), not from a counter, so two
paths that create the same records in a different order end in the same state; final-state
verification relies on that.
"""

from __future__ import annotations

import datetime as dt
import random
import re
from typing import Any

from ...core.ids import seed_from, stable_hash
from ..state import State
from ..tools import ToolError

__all__ = [
    "get_or_fail",
    "money",
    "new_id",
    "parse_date",
    "parse_time",
    "rng_for",
    "today",
]


def new_id(db: State, table: str, prefix: str, *content: Any) -> str:
    """``prefix`` + 6 hex digits from ``content``; the n-th identical record gets the next."""
    n = 0
    while True:
        candidate = prefix + stable_hash([table, list(content), n], digest_size=3).upper()
        if not db.has(table, candidate):
            return candidate
        n += 1


def rng_for(domain: str, seed: int) -> random.Random:
    """The RNG that generates a domain's seeded data (never used while tools run)."""
    return random.Random(seed_from("trajsynth.envs.domains", domain, seed))


def get_or_fail(db: State, table: str, key: str, what: str) -> Any:
    """The record, or a ``not_found`` tool error naming ``what``."""
    record = db.get(table, key)
    if record is None:
        raise ToolError("not_found", f"{what} {key!r} not found")
    return record


def parse_date(value: str, field: str) -> dt.date:
    """A YYYY-MM-DD date, or an ``invalid_value`` tool error."""
    try:
        return dt.date.fromisoformat(value) if re.fullmatch(r"\d{4}-\d{2}-\d{2}", value) else _bad()
    except ValueError:
        raise ToolError(
            "invalid_value", f"{field} must be a date YYYY-MM-DD, got {value!r}"
        ) from None


def _bad() -> dt.date:
    raise ValueError


def parse_time(value: str, field: str) -> int:
    """HH:MM → minutes after midnight, or an ``invalid_value`` tool error."""
    m = re.fullmatch(r"(\d{1,2}):(\d{2})", value.strip())
    if not m or int(m.group(1)) > 23 or int(m.group(2)) > 59:
        raise ToolError("invalid_value", f"{field} must be a time HH:MM (24h), got {value!r}")
    return int(m.group(1)) * 60 + int(m.group(2))


def fmt_time(minutes: int) -> str:
    return f"{(minutes // 60) % 24:02d}:{minutes % 60:02d}"


def today(db: State) -> dt.date:
    """The domain's fixed 'today' (the environment has no clock: rule 3 of envs.base)."""
    return dt.date.fromisoformat(db.get("meta", "clock")["today"])


def money(x: float) -> float:
    return round(float(x) + 0.0, 2)
