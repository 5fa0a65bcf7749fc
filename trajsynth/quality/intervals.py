"""Bootstrap intervals for accuracies measured on a finite probe set (``scipy.stats.bootstrap``,
percentile method, seeded so that a report is reproducible):

- :func:`mean_interval`: the mean of per-task scores (an accuracy) and its interval, from
  resampling the tasks;
- :func:`paired_difference`: the difference of two systems' mean scores *on the same tasks*
  and its interval, from resampling the tasks with both systems' scores kept together (the
  paired bootstrap: a task both solve, or both fail, adds no noise to the difference).

The percentile method is used because accuracies near 0 or 1 make the BCa correction
degenerate; an interval is ``(None, None)`` for fewer than two tasks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from scipy import stats

__all__ = ["mean_interval", "paired_difference"]

Interval = tuple[float | None, float | None]


def _round(x: float) -> float:
    return round(float(x), 4)


def mean_interval(
    values: Sequence[float],
    *,
    confidence: float = 0.95,
    resamples: int = 10_000,
    seed: int = 0,
) -> tuple[float | None, Interval]:
    """The mean of ``values`` and its bootstrap interval.

    >>> mean_interval([1, 1, 1, 1])
    (1.0, (1.0, 1.0))
    """
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return None, (None, None)
    if x.size < 2:
        return _round(x.mean()), (None, None)
    return _round(x.mean()), _bootstrap((x,), np.mean, False, confidence, resamples, seed)


def _diff(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(a, axis=axis) - np.mean(b, axis=axis)


def paired_difference(
    a: Sequence[float],
    b: Sequence[float],
    *,
    confidence: float = 0.95,
    resamples: int = 10_000,
    seed: int = 0,
) -> tuple[float | None, Interval]:
    """mean(a) − mean(b) over the same tasks (``a[i]`` and ``b[i]`` score task ``i``) and its
    paired bootstrap interval.

    >>> paired_difference([1, 0, 1], [1, 0, 1])
    (0.0, (0.0, 0.0))
    """
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    if x.shape != y.shape:
        raise ValueError(f"paired scores need the same tasks: {x.size} and {y.size} scores")
    if x.size == 0:
        return None, (None, None)
    if x.size < 2:
        return _round(x.mean() - y.mean()), (None, None)
    return _round(x.mean() - y.mean()), _bootstrap((x, y), _diff, True, confidence, resamples, seed)


def _bootstrap(
    data: tuple[np.ndarray, ...],
    statistic: Callable[..., np.ndarray],
    paired: bool,
    confidence: float,
    resamples: int,
    seed: int,
) -> Interval:
    """The seeded percentile interval of ``statistic`` over resampled tasks."""
    ci = stats.bootstrap(
        data,
        statistic,
        paired=paired,
        confidence_level=confidence,
        n_resamples=resamples,
        method="percentile",
        vectorized=True,
        random_state=np.random.default_rng(seed),
    ).confidence_interval
    return _round(ci.low), _round(ci.high)
