"""Action distances and STeCa's nDTW deviation weight (Wang et al. 2025, "STeCa: Step-level
Trajectory Calibration for LLM Agent Learning", arXiv:2502.14276, ACL Findings, steps 3
and 6; code ``data_collection/data_explored_alfworld.py::plan_ndtw``).

STeCa compares two action sequences (the chosen continuation and the rejected one) with a
normalised dynamic time warping distance and turns it into a per-sample training weight:

1) the distance of two actions, ``d(a, b) = 1 − sim(a, b)`` in [0, 1]. STeCa takes the BERT
   [CLS] cosine of ``Action:`` lines; for JSON tool calls trajsynth uses an exact, model-free
   similarity (:func:`action_similarity`): 1 for the same calls (order within a step ignored),
   otherwise the Jaccard overlap of their ``name`` and ``name.arg=value`` tokens; two text
   steps are equal when they are the same kind (a question, or an answer) and otherwise
   compared by their word sets;
2) DTW over the two sequences with that cost (steps: match, insertion, deletion), normalised
   by the diagonal, ``deviation = DTW / sqrt(n² + m²)`` — the official code's formula (it is
   a distance, 0 for identical sequences, not the exponential nDTW of Ilharco et al.);
3) weights: a calibration (or expert) sample gets ``1 + 0.01 · deviation``, an explored
   success ``1 − 0.01 · deviation`` and is kept only when ``deviation < 0.013``.

>>> from trajsynth.core.schema import Message, ToolCall
>>> a = Message(role="assistant", tool_calls=[ToolCall(id="1", name="add", arguments='{"a": 1}')])
>>> b = Message(role="assistant", tool_calls=[ToolCall(id="2", name="add", arguments='{"a": 2}')])
>>> action_similarity(a, a), round(action_similarity(a, b), 3)
(1.0, 0.333)
>>> ndtw_deviation([a, a], [a, a])
0.0
>>> round(ndtw_deviation([a], [b]), 4)
0.4714
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any, Literal

from ..core.ids import canonical_json
from ..core.schema import Message

__all__ = [
    "EXPLORED_MAX_DEVIATION",
    "action_key",
    "action_similarity",
    "is_question",
    "ndtw_deviation",
    "steca_weight",
]

#: STeCa keeps an explored success only below this deviation (code: ``deviation < 0.013``)
EXPLORED_MAX_DEVIATION = 0.013

_WORD = re.compile(r"[a-z0-9]+")


def is_question(text: str | None) -> bool:
    """A text step that asks the user something (ends with '?')."""
    return bool(text and text.strip().endswith("?"))


def _args(raw: str) -> Any:
    try:
        return json.loads(raw) if raw.strip() else {}
    except ValueError:
        return raw


def action_key(message: Message) -> tuple[Any, ...]:
    """What an assistant step *does*, for equality: its calls as a sorted tuple of
    (name, canonical arguments) — call ids and reasoning ignored — or, for a text step,
    whether it asks a question or answers.

    >>> action_key(Message(role="assistant", content="Which city?"))
    ('text', 'question')
    """
    if message.tool_calls:
        return (
            "calls",
            tuple(sorted((c.name, canonical_json(_args(c.arguments))) for c in message.tool_calls)),
        )
    return ("text", "question" if is_question(message.content) else "answer")


def _tokens(message: Message) -> set[str]:
    out: set[str] = set()
    for c in message.tool_calls:
        out.add(c.name)
        args = _args(c.arguments)
        if isinstance(args, dict):
            out |= {f"{c.name}.{k}={canonical_json(v)}" for k, v in args.items()}
        else:
            out.add(f"{c.name}:{args}")
    return out


def action_similarity(a: Message, b: Message) -> float:
    """Step 1's similarity of two assistant steps, in [0, 1]."""
    ka, kb = action_key(a), action_key(b)
    if ka == kb:
        return 1.0
    if ka[0] != kb[0]:
        return 0.0
    if ka[0] == "text":
        wa = set(_WORD.findall((a.content or "").lower()))
        wb = set(_WORD.findall((b.content or "").lower()))
        return len(wa & wb) / len(wa | wb) if wa | wb else 0.0
    ta, tb = _tokens(a), _tokens(b)
    return len(ta & tb) / len(ta | tb) if ta | tb else 0.0


def ndtw_deviation(chosen: Sequence[Message], rejected: Sequence[Message]) -> float:
    """Step 2: DTW over the two step sequences with cost ``1 − similarity``, divided by
    ``sqrt(n² + m²)``. An empty side deviates fully (1.0) from a non-empty one."""
    n, m = len(chosen), len(rejected)
    if n == 0 and m == 0:
        return 0.0
    if n == 0 or m == 0:
        return 1.0
    inf = math.inf
    prev = [inf] * (m + 1)
    prev[0] = 0.0
    for i in range(1, n + 1):
        cur = [inf] * (m + 1)
        for j in range(1, m + 1):
            cost = 1.0 - action_similarity(chosen[i - 1], rejected[j - 1])
            best = min(prev[j], cur[j - 1], prev[j - 1])
            cur[j] = cost + best
        prev = cur
    return prev[m] / math.sqrt(n * n + m * m)


def steca_weight(deviation: float, kind: Literal["calibration", "explored"]) -> float | None:
    """Step 3: the training weight of a sample, or None when an explored success deviates
    too much to keep."""
    if kind == "calibration":
        return 1.0 + 0.01 * deviation
    if deviation >= EXPLORED_MAX_DEVIATION:
        return None
    return 1.0 - 0.01 * deviation
