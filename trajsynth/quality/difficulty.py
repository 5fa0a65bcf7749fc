"""Difficulty: measured from pass@k where rollouts exist, estimated by a heuristic otherwise.

1) **measured**: a row whose task was rolled out ``n = rollouts_total`` times with
   ``c = rollouts_passed`` successes has ``score = 1 − pass@k(n, c)`` (the unbiased estimator
   of Chen et al. 2021, ``k`` = 1 by default, so the pass rate): a task every rollout solves
   is easy, one none solves is hard;
2) **heuristic** (:func:`heuristic_features`), each feature in [0, 1]:
   - ``calls`` = min(tool calls, 6) / 6;
   - ``turns`` = min(user turns − 1, 3) / 3 (multi-turn conversations are harder);
   - ``depth`` = min(dependency depth − 1, 3) / 3, where the dependency depth is the longest
     chain of calls in which a call uses a value that only an earlier call's result gave
     (not the user), i.e. an output feeding an input;
   - ``tags`` = min(1, Σ weight of the row's capability tags) (:data:`TAG_WEIGHTS`:
     error_recovery and long_horizon 0.4, dependent_calls and needs_clarification 0.35,
     parallel_calls 0.25, multi_call and optional_params 0.15, others 0);
   and ``score = 0.3·calls + 0.15·turns + 0.3·depth + 0.25·tags`` (:data:`DEFAULT_WEIGHTS`):
   one call with nothing special scores 0.05, three calls with one dependency about 0.4, six
   calls in a three-deep chain over two user turns about 0.75;
3) **labels**: ``easy`` when ``score < easy_below`` (1/3), ``hard`` when ``score ≥
   hard_from`` (2/3), ``medium`` otherwise — the same cut points for both sources, so a task
   that 3 of 4 rollouts solve is easy and one that 1 of 4 solves is hard;
4) **calibration** (:func:`fit_weights`, used by the ``difficulty_calibrate`` stage): where
   some rows have rollouts, least squares of their measured score on the four features (plus
   an intercept) replaces the default weights for the rows that have none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .stats import pass_at_k
from .trace import Trace, leaf_values, number_set, parse_trace, value_in_text

__all__ = [
    "DEFAULT_WEIGHTS",
    "FEATURES",
    "TAG_WEIGHTS",
    "Calibration",
    "dependency_depth",
    "fit_weights",
    "heuristic_features",
    "heuristic_score",
    "label",
    "measured_score",
]

FEATURES = ("calls", "turns", "depth", "tags")
#: weights of (calls, turns, depth, tags) and the intercept
DEFAULT_WEIGHTS = (0.3, 0.15, 0.3, 0.25, 0.0)
TAG_WEIGHTS = {
    "single_call": 0.0,
    "no_tool_needed": 0.0,
    "multi_call": 0.15,
    "optional_params": 0.15,
    "parallel_calls": 0.25,
    "dependent_calls": 0.35,
    "needs_clarification": 0.35,
    "error_recovery": 0.4,
    "long_horizon": 0.4,
}


def measured_score(total: int, passed: int, k: int = 1) -> float:
    """``1 − pass@k`` from rollout counts (``k`` capped at ``total``).

    >>> measured_score(4, 3), measured_score(4, 0), measured_score(4, 1, k=2)
    (0.25, 1.0, 0.5)
    """
    return 1.0 - pass_at_k(total, min(passed, total), min(k, total))


def dependency_depth(trace: Trace, user_text: str | None = None) -> int:
    """Longest chain of calls where each uses a value first returned by the previous one.

    A call depends on an earlier call (in an earlier step) when one of its argument values
    occurs in that call's result and not in what the user or system said. Depth 0 = no calls.
    """
    if not trace.calls:
        return 0
    said = user_text if user_text is not None else ""
    said_numbers = number_set(said)
    obs_text = [(c.observation or "").casefold() if c.succeeded else "" for c in trace.calls]
    obs_numbers = [number_set(t) for t in obs_text]
    depth = [1] * len(trace.calls)
    for j, c in enumerate(trace.calls):
        values = [v for v in leaf_values(c.args or {}) if not value_in_text(v, said, said_numbers)]
        if not values:
            continue
        for i in range(j):
            if trace.calls[i].step >= c.step or not obs_text[i]:
                continue
            if any(value_in_text(v, obs_text[i], obs_numbers[i]) for v in values):
                depth[j] = max(depth[j], depth[i] + 1)
    return max(depth)


def heuristic_features(
    messages: Sequence[Any], capabilities: Sequence[str] = (), tools: Any = None
) -> np.ndarray:
    """The four features of step 2 for one conversation, as a float array."""
    trace = parse_trace(messages, tools)
    said = "\n".join(
        (m.get("content") or "") if isinstance(m, dict) else (m.content or "")
        for m in messages
        if (m.get("role") if isinstance(m, dict) else m.role) in ("user", "system")
    ).casefold()
    depth = dependency_depth(trace, said)
    tags = sum(TAG_WEIGHTS.get(t, 0.0) for t in capabilities or ())
    return np.array(
        [
            min(trace.num_calls, 6) / 6,
            min(max(trace.user_turns - 1, 0), 3) / 3,
            min(max(depth - 1, 0), 3) / 3,
            min(1.0, tags),
        ]
    )


def heuristic_score(features: np.ndarray, weights: Sequence[float] = DEFAULT_WEIGHTS) -> np.ndarray:
    """``clip(features · w + intercept, 0, 1)`` for one row or a (rows, 4) matrix."""
    w = np.asarray(weights[:4], dtype=np.float64)
    return np.clip(np.asarray(features) @ w + float(weights[4]), 0.0, 1.0)


def label(score: np.ndarray | float, easy_below: float = 1 / 3, hard_from: float = 2 / 3) -> Any:
    """``easy`` / ``medium`` / ``hard`` for each score (step 3).

    >>> label(np.array([0.0, 0.25, 0.5, 0.75])).tolist()
    ['easy', 'easy', 'medium', 'hard']
    """
    s = np.asarray(score, dtype=np.float64)
    out = np.where(
        s < easy_below - 1e-12, "easy", np.where(s >= hard_from - 1e-12, "hard", "medium")
    )
    return out if out.ndim else str(out)


@dataclass
class Calibration:
    weights: tuple[float, ...]
    rows: int
    r2: float | None


def fit_weights(features: np.ndarray, measured: np.ndarray, min_rows: int = 20) -> Calibration:
    """Least-squares weights (and intercept) of the measured scores on the features (step 4).

    With fewer than ``min_rows`` measured rows the default weights are kept (``r2`` None).
    """
    n = len(measured)
    if n < min_rows:
        return Calibration(DEFAULT_WEIGHTS, n, None)
    x = np.hstack([features, np.ones((n, 1))])
    w, *_ = np.linalg.lstsq(x, measured, rcond=None)
    pred = np.clip(x @ w, 0, 1)
    ss_tot = float(np.sum((measured - measured.mean()) ** 2))
    r2 = 1.0 - float(np.sum((measured - pred) ** 2)) / ss_tot if ss_tot > 0 else None
    return Calibration(tuple(float(v) for v in w), n, r2)
