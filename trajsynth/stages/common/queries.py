"""Back-translated user requests (Magnet, "Magnet: Multi-turn Tool-use Data Synthesis and
Distillation via Graph Translation", arXiv:2503.07826, step 5; HardGen writes its hard
queries the same way): read the phrasings a query writer returned and keep the first one a
user could have written, one that names no function and states every value the calls need.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..context import Metrics

__all__ = ["first_usable_query", "parse_queries", "reject_query", "value_in"]


def parse_queries(content: str | None) -> list[str]:
    """The requests of a query writer's reply: ``{"queries": [...]}``, else the whole text."""
    text = (content or "").strip()
    try:
        data = json.loads(text[text.find("{") : text.rfind("}") + 1]) if "{" in text else None
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("queries"), list):
        return [q.strip() for q in data["queries"] if isinstance(q, str) and q.strip()]
    return [text] if text else []


def value_in(value: Any, text: str) -> bool:
    """Whether ``text`` states ``value`` (every item of a list; numbers in any usual form)."""
    if isinstance(value, list):
        return all(value_in(v, text) for v in value if not isinstance(v, (dict, list, bool)))
    if isinstance(value, float) and value.is_integer():
        return any(s in text for s in (str(value), str(int(value)), f"{value:g}"))
    if isinstance(value, (int, float)):
        return str(value) in text or f"{value:g}" in text
    return str(value).lower() in text.lower()


def reject_query(query: str, names: list[str], must: dict[str, Any]) -> str | None:
    """Why a back-translated request is unusable (None: it is fine)."""
    for n in names:
        if len(n) > 2 and re.search(rf"(?<![\w.]){re.escape(n)}(?!\w)", query):
            return "names_function"
    for v in must.values():
        if not value_in(v, query):
            return "missing_value"
    return None


def first_usable_query(
    content: str | None, names: list[str], must: dict[str, Any], metrics: Metrics
) -> str | None:
    """The first phrasing in ``content`` that :func:`reject_query` accepts; each rejected one
    counts into ``rejected_query.<reason>``."""
    for q in parse_queries(content):
        why = reject_query(q, names, must)
        if why is None:
            return q
        metrics.inc(f"rejected_query.{why}")
    return None
