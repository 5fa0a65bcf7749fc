"""STeCa's deviation measure (``trajsynth.quality.ndtw``): action equality ignores call ids
and reasoning; the DTW distance over actions is normalised by the diagonal as STeCa's code
does; calibration samples weigh 1 + 0.01·d and explored successes 1 − 0.01·d, kept only
below 0.013; the docstring examples hold; the replay helpers' doctests and ECHO's memory rule
hold too.

Run: PYTHONPATH=. python -m pytest tests/quality/test_ndtw.py -q
"""

from __future__ import annotations

import doctest
import importlib
import math

import pytest

from trajsynth.core.schema import Message, ToolCall
from trajsynth.quality.ndtw import action_key, action_similarity, ndtw_deviation, steca_weight


def call(name: str, args: str, cid: str = "x", thought: str | None = None) -> Message:
    return Message(
        role="assistant",
        tool_calls=[ToolCall(id=cid, name=name, arguments=args)],
        reasoning=thought,
    )


@pytest.mark.parametrize("name", ["trajsynth.quality.ndtw", "trajsynth.stages.methods.echo"])
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0


def test_action_equality_ignores_ids_reasoning_and_key_order() -> None:
    a = call("add", '{"a": 1, "b": 2}', "id1", "first")
    b = call("add", '{"b": 2, "a": 1}', "id2", "other thought")
    assert action_key(a) == action_key(b) and action_similarity(a, b) == 1.0
    q1 = Message(role="assistant", content="Which city do you mean?")
    q2 = Message(role="assistant", content="Could you say which date?")
    ans = Message(role="assistant", content="Done.")
    assert action_key(q1) == action_key(q2) != action_key(ans)
    assert action_similarity(a, ans) == 0.0
    # parallel calls: order within a step does not matter
    f1, g1 = ToolCall(id="1", name="f", arguments="{}"), ToolCall(id="2", name="g", arguments="{}")
    f2, g2 = ToolCall(id="3", name="f", arguments="{}"), ToolCall(id="4", name="g", arguments="{}")
    p1 = Message(role="assistant", tool_calls=[f1, g1])
    p2 = Message(role="assistant", tool_calls=[g2, f2])
    assert action_key(p1) == action_key(p2)


def test_dtw_distance_normalised_by_the_diagonal() -> None:
    a, b, c = call("f", "{}"), call("g", "{}"), call("h", "{}")
    assert ndtw_deviation([a, b, c], [a, b, c]) == 0.0
    # one substitution in three steps: cost 1 on the diagonal path, over sqrt(9 + 9)
    assert ndtw_deviation([a, b, c], [a, c, c]) == pytest.approx(1 / math.sqrt(18))
    # a repeated step is absorbed by warping (cost 0)
    assert ndtw_deviation([a, b], [a, a, b]) == 0.0
    assert ndtw_deviation([], []) == 0.0 and ndtw_deviation([a], []) == 1.0


def test_weights() -> None:
    assert steca_weight(0.5, "calibration") == pytest.approx(1.005)
    assert steca_weight(0.01, "explored") == pytest.approx(0.9999)
    assert steca_weight(0.013, "explored") is None
