"""Usage and cost per stage and role, read back from a run manifest's stage metrics.

The client counts ``llm.<role>.<counter>`` into the calling stage's metrics; the runner merges
them into ``manifest.json`` per stage. :func:`llm_usage` turns one stage's metrics snapshot
into ``{role: {requests, cache_hits, http_requests, errors, prompt_tokens, completion_tokens,
cost_usd, ...}}`` for the run summary.

>>> llm_usage({"counters": {"llm.teacher.prompt_tokens": 120, "llm.teacher.requests": 2}})
{'teacher': {'prompt_tokens': 120, 'requests': 2}}

:func:`run_cost` adds the run's figure that compares backends and prices: **cost per accepted
trajectory**, the dollars every stage spent on LLM calls (batch roles at batch prices, cache
hits free) divided by the rows of the run's final output: the main output of the last stage,
in run order, that wrote rows (a terminal stage that writes none, e.g. a training or report
stage, is passed over). For the generation pipelines that is the verified, filtered set.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["USAGE_COUNTERS", "llm_usage", "run_cost"]

#: the counters the client writes, in display order
USAGE_COUNTERS = (
    "requests",
    "cache_hits",
    "http_requests",
    "errors",
    "timeouts",
    "hedges",
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


def run_cost(stages: Mapping[str, Any]) -> dict[str, Any]:
    """The run's LLM cost and cost per accepted trajectory (see the module docstring).

    ``stages``: stage id → :class:`~trajsynth.store.manifest.StageState` (or its JSON form,
    as in ``manifest.json``), in run order. Returns ``{"cost_usd", "accepted",
    "accepted_stage", "cost_per_accepted"}`` (``cost_per_accepted`` is None without rows).
    """
    cost = 0.0
    accepted, accepted_stage = 0, None
    for sid, st in stages.items():
        if isinstance(st, Mapping):
            metrics = st.get("metrics") or {}
            rows = int(((st.get("outputs") or {}).get("main") or {}).get("rows") or 0)
        else:
            metrics, rows = st.metrics, st.rows_out()
        for usage in llm_usage(metrics).values():
            cost += float(usage.get("cost_usd", 0.0))
        if rows > 0:
            accepted, accepted_stage = rows, sid
    return {
        "cost_usd": cost,
        "accepted": accepted,
        "accepted_stage": accepted_stage,
        "cost_per_accepted": cost / accepted if accepted else None,
    }
