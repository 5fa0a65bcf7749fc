"""Quality scores and rewards of one trajectory, as pure functions (docs/methods.md, "Quality").

The reference rules define three numbers; trajsynth computes all of them, plus the
coherence score the filter needs, with every weight configurable (:class:`ScoreWeights`):

1) **reference quality score** = ``0.5 · efficiency + 0.5 · completeness`` with
   ``efficiency = max(0, 1 − 0.1 · tool calls)`` (:func:`efficiency`) and ``completeness`` =
   the share of steps that have a thought, an action and an observation
   (:func:`completeness`);
2) **penalised reward** ``R = R_task − λ_eff · T − λ_format · 1(format error)``
   (:func:`penalized_reward`), the reference's ``λ_eff = 0.1`` with ``T = turns / max_turns``
   and ``λ_format = 0.5``;
3) **agent reward** = ``0.5 · completion + 0.3 · process + 0.2 · efficiency`` with
   ``process = 0.4 · effective-call ratio + 0.3 · coherence + 0.3 · error recovery``
   (:func:`agent_reward`, :func:`process_quality`);
4) **coherence** (:func:`coherence`), the mean of three checks, each in [0, 1]:
   a) *grounding*: the share of argument values (strings of ≥2 characters and numbers) that
      the system prompt, a user message, an earlier tool result, or the tools' own enums and
      defaults said before the call; a value the model made up is ungrounded;
   b) *repeat-free*: the share of failing calls that are not issued again unchanged (same
      name, same canonical arguments) later;
   c) *answer grounded*: whether the assistant's text after the first successful tool result
      mentions at least one value those results returned (1 when no tool returned a value).

Definitions the reference rules leave open, fixed here:

- a *step* is an assistant message. A step with calls is complete when it has a thought
  (non-empty ``reasoning``, or text ``content`` next to the calls) and every call got a tool
  result. A step without calls (a reply or the final answer) is its own thought and action;
  it is complete when its text is non-empty. No steps → completeness 0;
- ``R_task`` is ``reward_components["task"]`` when verify wrote one, else 1 for
  ``success`` and 0 otherwise; a *format error* is a verify format error, arguments that are
  not a JSON object, or a call to a tool that was not offered;
- *effective calls*: offered tool, parseable arguments, a result that is not an error, and
  not an exact repeat of an earlier successful call. No calls → ratio 1;
- *error recovery*: the share of failing calls followed later by a successful call of the same
  tool; no failing call → 1.

>>> round(reference_quality(efficiency(3), 0.75), 4)
0.725
>>> penalized_reward(1.0, turns=4, max_turns=20, format_error=True)
0.48
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from ..core.config import StrictModel
from .columns import flatten_calls, flatten_messages
from .trace import Trace, number_set, parse_trace, value_in_text

__all__ = [
    "Coherence",
    "ScoreWeights",
    "agent_reward",
    "coherence",
    "completeness",
    "completeness_columns",
    "effective_call_ratio",
    "efficiency",
    "error_recovery",
    "penalized_reward",
    "process_quality",
    "reference_quality",
    "score_conversation",
]


class ScoreWeights(StrictModel):
    """Every weight of the scores, with the reference values as defaults."""

    efficiency_per_call: float = Field(
        0.1, ge=0, description="Efficiency lost per tool call: max(0, 1 − this × calls)."
    )
    quality_efficiency: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Weight of efficiency in the quality score (rest: completeness).",
    )
    lambda_eff: float = Field(0.1, ge=0, description="λ_eff: cost penalty of the reward.")
    lambda_format: float = Field(0.5, ge=0, description="λ_format: format-error penalty.")
    cost_unit: Literal["turns", "calls"] = Field(
        "turns", description="T counts assistant turns or tool calls."
    )
    max_turns: int = Field(20, ge=1, description="T = min(1, count / max_turns).")
    completion: float = Field(0.5, ge=0, description="Agent reward: weight of completion.")
    process: float = Field(0.3, ge=0, description="Agent reward: weight of process quality.")
    efficiency: float = Field(0.2, ge=0, description="Agent reward: weight of efficiency.")
    effective_calls: float = Field(0.4, ge=0, description="Process: effective-call ratio.")
    coherence: float = Field(0.3, ge=0, description="Process: coherence.")
    error_recovery: float = Field(0.3, ge=0, description="Process: error recovery.")


# --------------------------------------------------------------------------------------
# 1) reference quality
# --------------------------------------------------------------------------------------


def efficiency(num_calls: int, per_call: float = 0.1) -> float:
    """``max(0, 1 − per_call · calls)``.

    >>> efficiency(0), efficiency(3), efficiency(12)
    (1.0, 0.7, 0.0)
    """
    return max(0.0, round(1.0 - per_call * num_calls, 12))


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def completeness(trace_or_messages: Trace | Sequence[Any]) -> float:
    """Share of steps with thought, action and observation (see the module docstring).

    >>> completeness([
    ...     {"role": "user", "content": "weather in Oslo?"},
    ...     {"role": "assistant", "reasoning": "look it up",
    ...      "tool_calls": [{"id": "1", "name": "weather", "arguments": "{}"}]},
    ...     {"role": "tool", "tool_call_id": "1", "content": "3C"},
    ...     {"role": "assistant", "tool_calls": [{"id": "2", "name": "weather"}]},
    ...     {"role": "assistant", "content": "It is 3C."}])
    0.6666666666666666
    """
    trace = (
        trace_or_messages
        if isinstance(trace_or_messages, Trace)
        else parse_trace(trace_or_messages)
    )
    if not trace.steps:
        return 0.0
    by_step: dict[int, list[bool]] = {}
    for c in trace.calls:
        by_step.setdefault(c.step, []).append(c.observation is not None)
    complete = 0
    for i, step in enumerate(trace.steps):
        observed = by_step.get(i)
        if observed:
            thought = _text(step.get("reasoning")) or _text(step.get("content"))
            complete += thought and all(observed)
        else:
            complete += _text(step.get("content"))
    return complete / len(trace.steps)


def reference_quality(eff: float, comp: float, efficiency_weight: float = 0.5) -> float:
    """``w · efficiency + (1 − w) · completeness`` (w = 0.5 in the reference)."""
    return efficiency_weight * eff + (1.0 - efficiency_weight) * comp


def completeness_columns(messages: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """:func:`completeness` for every row at once, on Arrow columns (no per-row objects).

    Tool messages are matched to calls by ``tool_call_id`` only (the per-row function also
    matches id-less tool messages by position).
    """
    msgs = flatten_messages(messages)
    n = len(msgs.offsets) - 1
    if len(msgs.row) == 0:
        return np.zeros(n)
    calls = flatten_calls(msgs)
    role = msgs.role
    is_assistant = pc.fill_null(pc.equal(role, "assistant"), False).to_numpy(zero_copy_only=False)
    is_tool = pc.fill_null(pc.equal(role, "tool"), False).to_numpy(zero_copy_only=False)

    def nonblank(a: pa.Array) -> np.ndarray:
        s = pc.utf8_trim_whitespace(pc.fill_null(a, ""))
        return pc.greater(pc.utf8_length(s), 0).to_numpy(zero_copy_only=False)

    has_text = nonblank(msgs.content)
    thought = has_text | nonblank(msgs.reasoning)
    n_calls = np.bincount(calls.message, minlength=len(msgs.row))
    # observed calls: (row, call id) found among (row, tool_call_id) of tool messages
    observed_per_msg = np.zeros(len(msgs.row), dtype=np.int64)
    if len(calls.row):
        tool_idx = np.flatnonzero(is_tool)
        tool_keys = (
            pa.table(
                {
                    "row": pa.array(msgs.row[tool_idx]),
                    "cid": msgs.tool_call_id.take(pa.array(tool_idx)),
                }
            )
            .group_by(["row", "cid"])
            .aggregate([])
        )
        call_keys = pa.table(
            {"row": pa.array(calls.row), "cid": calls.id, "msg": pa.array(calls.message)}
        )
        joined = call_keys.join(tool_keys, keys=["row", "cid"], join_type="inner")
        observed_per_msg = np.bincount(
            joined.column("msg").to_numpy(), minlength=len(msgs.row)
        ).astype(np.int64)
    with_calls = n_calls > 0
    complete = np.where(with_calls, thought & (observed_per_msg >= n_calls), has_text)
    complete &= is_assistant
    steps = np.bincount(msgs.row, weights=is_assistant, minlength=n)
    done = np.bincount(msgs.row, weights=complete, minlength=n)
    return np.divide(done, steps, out=np.zeros(n), where=steps > 0)


# --------------------------------------------------------------------------------------
# 2) penalised reward
# --------------------------------------------------------------------------------------


def penalized_reward(
    r_task: float,
    *,
    turns: int,
    max_turns: int = 20,
    format_error: bool = False,
    lambda_eff: float = 0.1,
    lambda_format: float = 0.5,
) -> float:
    """``R_task − λ_eff · min(1, turns / max_turns) − λ_format · 1(format error)``.

    >>> penalized_reward(1.0, turns=5, max_turns=10)
    0.95
    """
    cost = min(1.0, turns / max_turns)
    return round(r_task - lambda_eff * cost - lambda_format * float(format_error), 12)


# --------------------------------------------------------------------------------------
# 4) coherence (used by 3)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Coherence:
    grounding: float
    repeat_free: float
    answer_grounded: float

    @property
    def score(self) -> float:
        return (self.grounding + self.repeat_free + self.answer_grounded) / 3


def _grounding(trace: Trace) -> float:
    flags = [g for c in trace.calls for g in c.grounded]
    return sum(flags) / len(flags) if flags else 1.0


def _repeat_free(trace: Trace) -> float:
    failing = [c for c in trace.calls if c.error]
    if not failing:
        return 1.0
    later: dict[str, int] = {}
    for c in trace.calls:
        later[c.signature] = c.index  # last position of each signature
    repeated = sum(1 for c in failing if later[c.signature] > c.index)
    return 1.0 - repeated / len(failing)


def _answer_grounded(trace: Trace) -> float:
    if trace.first_success_at is None:
        return 1.0
    values = [
        v
        for c, vals in zip(trace.calls, trace.observation_values, strict=True)
        if c.succeeded
        for v in vals
        if not (isinstance(v, float) and v in (0.0, 1.0))
        and not (isinstance(v, str) and len(v) < 3)
    ]
    if not values:
        return 1.0
    text = "\n".join(t for pos, t in trace.replies if pos > trace.first_success_at)
    if not text:
        return 0.0
    folded = text.casefold()
    numbers = number_set(text)
    return 1.0 if any(value_in_text(v, folded, numbers) for v in values) else 0.0


def coherence(trace: Trace) -> Coherence:
    """The three coherence checks of the module docstring (4a–4c)."""
    return Coherence(_grounding(trace), _repeat_free(trace), _answer_grounded(trace))


# --------------------------------------------------------------------------------------
# 3) agent reward
# --------------------------------------------------------------------------------------


def effective_call_ratio(trace: Trace) -> float:
    """Share of calls that did useful work (see the module docstring)."""
    if not trace.calls:
        return 1.0
    seen_ok: set[str] = set()
    effective = 0
    for c in trace.calls:
        useful = c.known_tool and c.args is not None and c.succeeded
        if useful and c.signature not in seen_ok:
            effective += 1
        if c.succeeded:
            seen_ok.add(c.signature)
    return effective / len(trace.calls)


def error_recovery(trace: Trace) -> float:
    """Share of failing calls followed by a successful call of the same tool."""
    failing = [c for c in trace.calls if c.error]
    if not failing:
        return 1.0
    recovered = 0
    for c in failing:
        if any(d.name == c.name and d.succeeded for d in trace.calls[c.index + 1 :]):
            recovered += 1
    return recovered / len(failing)


def process_quality(
    effective: float, coherent: float, recovery: float, weights: ScoreWeights | None = None
) -> float:
    """``0.4 · effective-call ratio + 0.3 · coherence + 0.3 · error recovery``."""
    w = weights or ScoreWeights()
    return w.effective_calls * effective + w.coherence * coherent + w.error_recovery * recovery


def agent_reward(
    completion: float, process: float, eff: float, weights: ScoreWeights | None = None
) -> float:
    """``0.5 · completion + 0.3 · process + 0.2 · efficiency``.

    >>> round(agent_reward(1.0, 0.8, 0.7), 4)
    0.88
    """
    w = weights or ScoreWeights()
    return w.completion * completion + w.process * process + w.efficiency * eff


# --------------------------------------------------------------------------------------
# everything for one row
# --------------------------------------------------------------------------------------


def score_conversation(
    messages: Sequence[Any],
    tools: Any = None,
    *,
    success: bool | None = None,
    format_errors: Sequence[str] = (),
    components: dict[str, float] | None = None,
    weights: ScoreWeights | None = None,
    context_steps: Collection[int] = (),
) -> dict[str, float]:
    """Every score of one trajectory, as named components (all floats).

    ``context_steps``: assistant steps kept only as context (STeCa's deviated step); their
    calls do not count as format errors.

    Keys: ``efficiency``, ``completeness``, ``quality``, ``grounding``, ``repeat_free``,
    ``answer_grounded``, ``coherence``, ``effective_calls``, ``error_recovery``,
    ``process``, ``completion``, ``agent_reward``, ``turn_cost``, ``format_error``,
    ``penalized_reward``.
    """
    w = weights or ScoreWeights()
    trace = parse_trace(messages, tools)
    eff = efficiency(trace.num_calls, w.efficiency_per_call)
    comp = completeness(trace)
    coh = coherence(trace)
    effective = effective_call_ratio(trace)
    recovery = error_recovery(trace)
    components = components or {}
    r_task = components.get("task")
    if r_task is None or np.isnan(r_task):
        r_task = 1.0 if success else 0.0
    fmt_error = bool(format_errors) or any(
        (c.args is None or not c.known_tool) and c.step not in context_steps for c in trace.calls
    )
    count = len(trace.steps) if w.cost_unit == "turns" else trace.num_calls
    process = process_quality(effective, coh.score, recovery, w)
    parts = {
        "efficiency": eff,
        "completeness": comp,
        "quality": reference_quality(eff, comp, w.quality_efficiency),
        "grounding": coh.grounding,
        "repeat_free": coh.repeat_free,
        "answer_grounded": coh.answer_grounded,
        "coherence": coh.score,
        "effective_calls": effective,
        "error_recovery": recovery,
        "process": process,
        "completion": float(r_task),
        "agent_reward": agent_reward(float(r_task), process, eff, w),
        "turn_cost": min(1.0, count / w.max_turns),
        "format_error": float(fmt_error),
        "penalized_reward": penalized_reward(
            float(r_task),
            turns=count,
            max_turns=w.max_turns,
            format_error=fmt_error,
            lambda_eff=w.lambda_eff,
            lambda_format=w.lambda_format,
        ),
    }
    # rounded, so that 0.1 + 0.2 style noise never decides a threshold
    return {k: round(float(v), 10) for k, v in parts.items()}
