"""The reference filter (docs/methods.md, "Quality"): named, switchable rules, on whole columns.

A row is dropped when any enabled rule says so. The rules, in the order used to attribute a
dropped row to one rule (its *first* failing rule):

1) ``invalid_calls``: a call is invalid — verify recorded a format error (``format_errors``
   non-empty or ``failure_layer == "format"``), or the scores found arguments that are not a
   JSON object or a tool that was not offered (``reward_components["format_error"] == 1``);
2) ``incoherent``: ``reward_components["coherence"] < min_coherence`` (0.5; see
   :func:`trajsynth.quality.scores.coherence`: ungrounded arguments, failing calls repeated
   unchanged, an answer that ignores what the tools returned);
3) ``too_easy``: a success in fewer than ``min_turns`` (2) assistant turns, unless its
   task wants no call on some turn — a ``clarify`` turn, where the right first answer is a
   question for a missing value or a decline because no offered function fits (BFCL's
   irrelevance categories): one turn is all such a task takes, so it is not too easy;
4) ``inefficient``: a success with more than ``max_calls`` (8) tool calls;
5) ``low_quality``: ``quality_score < min_quality`` (0.7; the reference's simple pipeline
   example uses 0.6);
6) ``unsuccessful``: ``success`` is not true — the row failed verification, or nothing ever
   gave it a verdict (null). On by default, so data that did not verify never flows on;
   ``unsuccessful: false`` (``trajsynth filter --keep-unsuccessful``) keeps it.

Rows that were never scored still get a fair hearing: a missing ``quality_score`` is computed
on the columns (:func:`~trajsynth.quality.scores.completeness_columns`), and rows without a
``coherence`` component are scored one by one with
:func:`~trajsynth.quality.scores.score_conversation` (slower; run ``score`` first at scale).

:func:`apply_filter` returns the keep mask with two counts per rule: ``dropped`` (rows whose
first failing rule it is; these add up to the rows dropped) and ``failing`` (every row the
rule rejects, so one row may count under several rules).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from ..core.config import StrictModel
from ..core.schema import CONTEXT_FLAG
from ..core.task import GroundTruth
from .columns import map_value
from .scores import completeness_columns, score_conversation

__all__ = ["RULES", "FilterOutcome", "FilterRules", "apply_filter", "rule_failures"]

RULES = ("invalid_calls", "incoherent", "too_easy", "inefficient", "low_quality", "unsuccessful")


class FilterRules(StrictModel):
    """Which rules run, and their thresholds."""

    invalid_calls: bool = Field(True, description="Drop rows with an invalid call.")
    incoherent: bool = Field(True, description="Drop rows whose coherence is below min_coherence.")
    too_easy: bool = Field(
        True,
        description="Drop successes in fewer than min_turns turns, except tasks that ask "
        "for a question or a decline (a clarify turn in the ground truth).",
    )
    inefficient: bool = Field(True, description="Drop successes with more than max_calls calls.")
    low_quality: bool = Field(True, description="Drop rows whose quality is below min_quality.")
    unsuccessful: bool = Field(
        True, description="Drop rows whose success is not true (failed or never verified)."
    )
    min_quality: float = Field(
        0.7,
        ge=0,
        le=1,
        description="Quality threshold: low_quality drops rows whose quality_score is below it "
        "(reference: 0.7).",
    )
    min_coherence: float = Field(0.5, ge=0, le=1, description="Coherence threshold.")
    min_turns: int = Field(2, ge=0, description="Successes need at least this many turns.")
    max_calls: int = Field(8, ge=0, description="Successes may make at most this many calls.")

    def enabled(self) -> list[str]:
        return [r for r in RULES if getattr(self, r)]


@dataclass
class FilterOutcome:
    keep: np.ndarray  # bool per row
    first_rule: np.ndarray  # int8 per row: index into RULES, -1 when kept
    dropped: dict[str, int] = field(default_factory=dict)
    failing: dict[str, int] = field(default_factory=dict)
    computed: int = 0  # rows whose scores had to be computed here


def _column(table: pa.Table | pa.RecordBatch, name: str) -> pa.Array | pa.ChunkedArray | None:
    return table.column(name) if name in table.schema.names else None


def _bool(col: pa.Array | pa.ChunkedArray | None, n: int, default: bool = False) -> np.ndarray:
    if col is None:
        return np.full(n, default)
    return pc.fill_null(col, default).to_numpy(zero_copy_only=False).astype(bool)


def _floats(col: pa.Array | pa.ChunkedArray | None, n: int) -> np.ndarray:
    if col is None:
        return np.full(n, np.nan)
    return pc.fill_null(col.cast(pa.float64()), np.nan).to_numpy(zero_copy_only=False)


def _wants_no_call(table: pa.Table | pa.RecordBatch, idx: np.ndarray, n: int) -> np.ndarray:
    """Rows (among ``idx``) whose ground truth has a ``clarify`` turn: a question or a decline
    is the answer there, and a one-turn success is the whole task (rule 3)."""
    out = np.zeros(n, dtype=bool)
    col = _column(table, "ground_truth")
    if col is None or not len(idx):
        return out
    for i, text in zip(idx, col.take(pa.array(idx)).to_pylist(), strict=True):
        try:  # the schema's own parser (cached per text, as the rows of a task share it)
            gt = GroundTruth.from_text(text) if isinstance(text, str) else None
        except ValueError:  # not JSON, or not a ground truth: nothing says it wants no call
            continue
        out[i] = gt is not None and any(t.kind == "clarify" for t in gt.turns)
    return out


def rule_failures(
    table: pa.Table | pa.RecordBatch, rules: FilterRules
) -> tuple[dict[str, np.ndarray], int]:
    """Per enabled rule, a bool array (True = the row fails it); plus rows scored here."""
    n = table.num_rows
    success = _bool(_column(table, "success"), n)
    turns = pc.fill_null(table.column("num_turns"), 0).to_numpy(zero_copy_only=False)
    calls = pc.fill_null(table.column("num_tool_calls"), 0).to_numpy(zero_copy_only=False)
    comps = _column(table, "reward_components")
    coherence = map_value(comps, "coherence") if comps is not None else np.full(n, np.nan)
    fmt_component = map_value(comps, "format_error") if comps is not None else np.full(n, np.nan)
    computed = 0
    need = {"incoherent", "invalid_calls"} & set(rules.enabled())
    missing = np.flatnonzero(np.isnan(coherence)) if need else np.zeros(0, dtype=np.int64)
    if len(missing):
        # score the unscored rows one by one (the same function the score stage uses)
        coherence = coherence.copy()
        fmt_component = fmt_component.copy()
        idx = pa.array(missing)
        msgs = table.column("messages").take(idx).to_pylist()
        tools = table.column("tools").take(idx).to_pylist()
        errs = _column(table, "format_errors")
        errs_l = errs.take(idx).to_pylist() if errs is not None else [None] * len(missing)
        flags = _column(table, "step_flags")
        flags_l = flags.take(idx).to_pylist() if flags is not None else [None] * len(missing)
        for k, (m, t, e, f) in enumerate(zip(msgs, tools, errs_l, flags_l, strict=True)):
            s = score_conversation(
                m or [],
                json.loads(t) if t else None,
                format_errors=e or (),
                context_steps={i for i, fl in enumerate(f or []) if CONTEXT_FLAG in fl},
            )
            coherence[missing[k]] = s["coherence"]
            fmt_component[missing[k]] = s["format_error"]
        computed = len(missing)
    out: dict[str, np.ndarray] = {}
    if rules.invalid_calls:
        errs = _column(table, "format_errors")
        n_err = (
            pc.fill_null(pc.list_value_length(errs), 0).to_numpy(zero_copy_only=False)
            if errs is not None
            else np.zeros(n, dtype=np.int64)
        )
        layer = _column(table, "failure_layer")
        at_format = _bool(pc.equal(layer, "format"), n) if layer is not None else np.zeros(n, bool)
        out["invalid_calls"] = (n_err > 0) | at_format | (fmt_component >= 1.0)
    if rules.incoherent:
        out["incoherent"] = coherence < rules.min_coherence
    if rules.too_easy:
        short = success & (turns < rules.min_turns)
        out["too_easy"] = short & ~_wants_no_call(table, np.flatnonzero(short), n)
    if rules.inefficient:
        out["inefficient"] = success & (calls > rules.max_calls)
    if rules.low_quality:
        quality = _floats(_column(table, "quality_score"), n)
        unscored = np.isnan(quality)
        if unscored.any():
            idx = np.flatnonzero(unscored)
            comp = completeness_columns(table.column("messages").take(pa.array(idx)))
            eff = np.maximum(0.0, 1.0 - 0.1 * calls[idx])  # efficiency(), on columns
            quality = quality.copy()
            quality[idx] = 0.5 * eff + 0.5 * comp
        out["low_quality"] = quality < rules.min_quality - 1e-12
    if rules.unsuccessful:
        out["unsuccessful"] = ~success
    return out, computed


def apply_filter(table: pa.Table | pa.RecordBatch, rules: FilterRules) -> FilterOutcome:
    """Evaluate every enabled rule; see the module docstring for the two kinds of count."""
    n = table.num_rows
    fails, computed = rule_failures(table, rules)
    first = np.full(n, -1, dtype=np.int8)
    for i, name in reversed(list(enumerate(RULES))):
        if name in fails:
            first[fails[name]] = i
    keep = first < 0
    dropped = {name: int(np.sum(first == i)) for i, name in enumerate(RULES) if name in fails}
    failing = {name: int(np.sum(mask)) for name, mask in fails.items()}
    return FilterOutcome(
        keep=keep, first_rule=first, dropped=dropped, failing=failing, computed=computed
    )
