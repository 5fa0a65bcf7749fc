"""``difficulty`` and ``difficulty_calibrate``: a difficulty label and score for every row
(:mod:`trajsynth.quality.difficulty` holds the measures and the heuristic).

``difficulty`` (map stage), per row:

1) where the task was rolled out (``rollouts_total > 0``), score = 1 − pass@k;
2) otherwise score = the heuristic over calls, user turns, dependency depth and capability
   tags, with the default (or configured) weights;
3) label easy / medium / hard by the two cut points.

``difficulty_calibrate`` (global stage) does the same, except that between 1) and 2) it fits
the heuristic's weights to the rows that have rollouts (least squares), so the estimate for
the others is on the measured scale; the fit (weights, rows, R²) goes to the metrics.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, model_validator

from ...quality.difficulty import (
    DEFAULT_WEIGHTS,
    fit_weights,
    heuristic_features,
    heuristic_score,
    label,
    measured_score,
)
from ..common.columns import gather_table, replace_columns
from ..context import Context
from ..kinds import GlobalStage, MapStage, Output, StageConfig
from ..registry import register

__all__ = ["Difficulty", "DifficultyCalibrate", "DifficultyConfig"]


class DifficultyConfig(StageConfig):
    k: int = Field(1, ge=1, description="k of pass@k for rows with rollouts (1 = pass rate).")
    easy_below: float = Field(1 / 3, ge=0, le=1, description="Scores below this are easy.")
    hard_from: float = Field(2 / 3, ge=0, le=1, description="Scores from this up are hard.")
    weights: tuple[float, float, float, float, float] = Field(
        DEFAULT_WEIGHTS,
        description="Heuristic weights of calls, turns, depth, tags, and the intercept.",
    )

    @model_validator(mode="after")
    def _order(self) -> DifficultyConfig:
        if self.easy_below > self.hard_from:
            raise ValueError("easy_below must not exceed hard_from")
        return self


def _measured(batch: pa.RecordBatch | pa.Table, k: int) -> np.ndarray:
    """1 − pass@k per row, NaN where the row has no rollout counts."""
    n = batch.num_rows
    out = np.full(n, np.nan)
    if "rollouts_total" not in batch.schema.names:
        return out
    total = pc.fill_null(batch.column("rollouts_total"), 0).to_numpy(zero_copy_only=False)
    passed = pc.fill_null(batch.column("rollouts_passed"), 0).to_numpy(zero_copy_only=False)
    for i in np.flatnonzero(total > 0):
        out[i] = measured_score(int(total[i]), int(passed[i]), k)
    return out


def _features(batch: pa.RecordBatch | pa.Table, rows: np.ndarray) -> np.ndarray:
    """Heuristic features of ``rows`` (shape (len(rows), 4))."""
    if not len(rows):
        return np.zeros((0, 4))
    idx = pa.array(rows)
    messages = batch.column("messages").take(idx).to_pylist()
    caps = batch.column("capabilities").take(idx).to_pylist()
    tools = batch.column("tools").take(idx).to_pylist()
    return np.array(
        [
            heuristic_features(m or [], c or [], json.loads(t) if t else None)
            for m, c, t in zip(messages, caps, tools, strict=True)
        ]
    ).reshape(len(rows), 4)


def _write(
    batch: pa.RecordBatch | pa.Table, score: np.ndarray, cfg: DifficultyConfig, ctx: Context
) -> pa.Table:
    labels = label(score, cfg.easy_below, cfg.hard_from)
    for name in ("easy", "medium", "hard"):
        ctx.metrics.inc(name, int(np.sum(labels == name)))
    return replace_columns(
        batch,
        {
            "difficulty": pa.array(labels.tolist(), pa.string()),
            "difficulty_score": pa.array(score, pa.float64()),
        },
    )


@register
class Difficulty(MapStage[DifficultyConfig]):
    """Difficulty from pass@k where rollouts exist, else a heuristic; easy/medium/hard."""

    name = "difficulty"
    writes = ("difficulty", "difficulty_score")

    def process(self, batches: Iterator[pa.RecordBatch], ctx: Context) -> Iterator[Output]:
        cfg = self.config
        for batch in batches:
            # 1) measured
            score = _measured(batch, cfg.k)
            # 2) heuristic for the rest
            rest = np.flatnonzero(np.isnan(score))
            score[rest] = heuristic_score(_features(batch, rest), cfg.weights)
            ctx.metrics.inc("measured", batch.num_rows - len(rest))
            ctx.metrics.inc("heuristic", len(rest))
            # 3) labels
            yield _write(batch, score, cfg, ctx)
            ctx.advance(batch.num_rows)


class CalibrateConfig(DifficultyConfig):
    min_rows: int = Field(
        20, ge=2, description="Rows with rollouts needed to fit weights (else the defaults)."
    )


@register
class DifficultyCalibrate(GlobalStage[CalibrateConfig]):
    """Difficulty with the heuristic fitted to pass@k of the rows that have rollouts."""

    name = "difficulty_calibrate"
    writes = ("difficulty", "difficulty_score")

    def process(self, batches: Iterator[pa.RecordBatch], ctx: Context) -> Iterator[Output]:
        cfg = self.config
        table = gather_table(batches)
        if table is None:
            return
        # 1) measured
        score = _measured(table, cfg.k)
        known = np.flatnonzero(~np.isnan(score))
        rest = np.flatnonzero(np.isnan(score))
        # fit the heuristic to the measured rows, then 2) estimate the rest
        fit = fit_weights(_features(table, known), score[known], cfg.min_rows)
        weights = fit.weights if fit.r2 is not None else cfg.weights
        score[rest] = heuristic_score(_features(table, rest), weights)
        ctx.metrics.set(
            "calibration",
            {
                "weights": list(weights),
                "rows": fit.rows,
                "r2": fit.r2,
                "fitted": fit.r2 is not None,
            },
        )
        ctx.metrics.inc("measured", len(known))
        ctx.metrics.inc("heuristic", len(rest))
        # 3) labels
        yield from _write(table, score, cfg, ctx).to_batches(max_chunksize=50_000)
