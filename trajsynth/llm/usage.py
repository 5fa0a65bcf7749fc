"""Usage and cost per stage and role, read back from a run manifest's stage metrics.

The client counts ``llm.<role>.<counter>`` into the calling stage's metrics; the runner merges
them into ``manifest.json`` per stage. :func:`llm_usage` turns one stage's metrics snapshot
into ``{role: {requests, cache_hits, http_requests, errors, prompt_tokens, completion_tokens,
cost_usd, ...}}`` for the run summary.

>>> llm_usage({"counters": {"llm.teacher.prompt_tokens": 120, "llm.teacher.requests": 2}})
{'teacher': {'prompt_tokens': 120, 'requests': 2}}
"""

from __future__ import annotations

from typing import Any

__all__ = ["USAGE_COUNTERS", "llm_usage"]

#: the counters the client writes, in display order
USAGE_COUNTERS = (
    "requests",
    "cache_hits",
    "http_requests",
    "errors",
    "format_errors",
    "prompt_tokens",
    "completion_tokens",
    "cost_usd",
)


def llm_usage(metrics: dict[str, Any]) -> dict[str, dict[str, float]]:
    """``{role: {counter: value}}`` from a metrics snapshot (``StageState.metrics``)."""
    out: dict[str, dict[str, float]] = {}
    for name, value in (metrics.get("counters") or {}).items():
        if not name.startswith("llm."):
            continue
        role, _, counter = name[4:].rpartition(".")
        if role and counter:
            out.setdefault(role, {})[counter] = value
    return out
