"""Back-translated user requests (Magnet, "Magnet: Multi-turn Tool-use Data Synthesis and
Distillation via Graph Translation", arXiv:2503.07826, step 5; HardGen writes its hard
queries the same way): read the phrasings a query writer returned and keep the first one a
user could have written, one that names no function and states every value the calls need.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ...core.surface import stated
from ...core.task import GroundTruth
from ..context import Metrics

__all__ = ["first_usable_query", "must_state", "parse_queries", "reject_query", "value_in"]


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


def value_in(value: Any, text: str, param: str | None = None) -> bool:
    """Whether ``text`` states ``value``: verbatim or in a form a careful reader maps back to
    exactly that value ("March 5, 2024" for "2024-03-05", "5,000" for 5000; every item of a
    list; a flag by its parameter's words), see :mod:`trajsynth.core.surface`."""
    return stated(value, text, param)


def reject_query(query: str, names: list[str], must: dict[str, Any]) -> str | None:
    """Why a back-translated request is unusable (None: it is fine). ``must``: the values it
    must state, keyed by parameter (``param`` or ``tool.param``)."""
    for n in names:
        if len(n) > 2 and re.search(rf"(?<![\w.]){re.escape(n)}(?!\w)", query):
            return "names_function"
    for key, v in must.items():
        if not value_in(v, query, key.rsplit(".", 1)[-1]):
            return "missing_value"
    return None


def must_state(ground_truth: GroundTruth) -> list[tuple[int, str, Any]]:
    """``(turn, parameter, value)`` for every argument value a task's requests must state:
    all but the values bound to an earlier call's output (``extra["bindings"]``), those
    written in an earlier output of the same turn (a request may refer to them, as
    back-translation allows) and the one a clarification gives."""
    bound = {(b["call"], b["param"]) for b in ground_truth.extra.get("bindings") or []}
    out = []
    flat = 0
    for t, turn in enumerate(ground_truth.turns):
        outputs: list[str] = []
        for step in turn.steps:
            for call in step:
                for k, v in call.arguments.items():
                    text = json.dumps(v, ensure_ascii=False).strip('"')
                    if (flat, k) in bound or (
                        not isinstance(v, bool) and any(text in o for o in outputs)
                    ):
                        continue
                    clar = turn.clarification or ""
                    if clar and v is not None and not isinstance(v, bool) and stated(v, clar, k):
                        continue
                    out.append((t, k, v))
                flat += 1
            outputs += [json.dumps(c.output, ensure_ascii=False) for c in step]
    return out


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
