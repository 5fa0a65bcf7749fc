"""Every score formula on crafted conversations, with the exact values worked out by hand in
the comments (quality score, penalised reward, coherence and its three checks, effective calls,
error recovery, process quality, agent reward), and the column-wise completeness.

Run: python -m pytest tests/quality/test_scores.py -q
"""

from __future__ import annotations

import pytest
from qrows import TOOLS, call, conversation, dicts

from trajsynth.core import to_batch
from trajsynth.quality.scores import (
    ScoreWeights,
    agent_reward,
    completeness,
    completeness_columns,
    efficiency,
    penalized_reward,
    process_quality,
    reference_quality,
    score_conversation,
)

# A: one grounded call, a complete thought, an answer that uses the result
CLEAN = conversation(
    "What is the weather in Oslo?",
    [
        (
            "think",
            "Look up Oslo.",
            [call("get_weather", city="Oslo")],
            [{"temp_c": 3, "sky": "cloudy"}],
        ),
        ("say", "It is 3C and cloudy in Oslo."),
    ],
)
# B: an invented city twice (the same failing call repeated), a recovery, a call without a
# result, and an answer that ignores what the tools returned
MESSY = conversation(
    "Book flight FL100 to Paris",
    [
        ("think", None, [call("search_flights", destination="Lima")], [{"error": "no such city"}]),
        ("think", None, [call("search_flights", destination="Lima")], [{"error": "no such city"}]),
        (
            "think",
            "retry",
            [call("search_flights", destination="Paris")],
            [{"flights": ["FL100", "FL200"]}],
        ),
        ("think", "book", [call("book_flight", flight_id="FL100")], [None]),
        ("say", "Done."),
    ],
)
# C: a tool that is not offered, with arguments that are not JSON
BROKEN = conversation(
    "Go to Mars",
    [
        ("think", "go", [("teleport", '{"to": "Mars"')], ["Error: unknown tool"]),
        ("say", "I cannot."),
    ],
)


def test_reference_quality_formula() -> None:
    # efficiency = max(0, 1 - 0.1 * calls); quality = 0.5 efficiency + 0.5 completeness
    assert [efficiency(n) for n in (0, 1, 4, 10, 13)] == [1.0, 0.9, 0.6, 0.0, 0.0]
    assert efficiency(4, per_call=0.2) == pytest.approx(0.2)
    assert reference_quality(0.6, 0.4) == pytest.approx(0.5)
    assert reference_quality(0.6, 0.4, efficiency_weight=0.25) == pytest.approx(0.45)


def test_completeness_counts_thought_action_observation() -> None:
    assert completeness(dicts(CLEAN)) == 1.0
    # MESSY: steps 1, 2 lack a thought, step 4 lacks its result; step 3 and "Done." are whole
    assert completeness(dicts(MESSY)) == pytest.approx(2 / 5)
    assert completeness(dicts(conversation("hi", []))) == 0.0  # no assistant step at all
    # a step whose thought is in `content` next to the call counts as thought
    msgs = dicts(CLEAN)
    msgs[1]["reasoning"], msgs[1]["content"] = None, "Checking the weather first."
    assert completeness(msgs) == 1.0


def test_completeness_columns_match_the_row_function() -> None:
    from trajsynth.core import Trajectory

    convs = [CLEAN, MESSY, BROKEN, conversation("hi", []), conversation("hi", [("say", " ")])]
    rows = [Trajectory(id=str(i), task_id="t", messages=m) for i, m in enumerate(convs)]
    got = completeness_columns(to_batch(rows).column("messages"))
    assert got.tolist() == pytest.approx([completeness(dicts(m)) for m in convs])
    # BROKEN is complete: a failing result is still an observation
    assert got.tolist() == pytest.approx([1.0, 0.4, 1.0, 0.0, 0.0])


def test_penalized_reward_formula() -> None:
    # R = R_task - λ_eff · min(1, T / max_turns) - λ_format · 1(format error)
    assert penalized_reward(1.0, turns=2) == pytest.approx(0.99)
    assert penalized_reward(1.0, turns=40) == pytest.approx(0.9)  # T capped at 1
    assert penalized_reward(0.0, turns=2, format_error=True) == pytest.approx(-0.51)
    assert penalized_reward(
        1.0, turns=3, max_turns=10, format_error=True, lambda_eff=0.2, lambda_format=0.3
    ) == pytest.approx(0.64)


def test_agent_reward_and_process_formulas() -> None:
    assert process_quality(0.25, 1 / 3, 1.0) == pytest.approx(0.5)
    assert agent_reward(0.0, 0.5, 0.6) == pytest.approx(0.27)
    w = ScoreWeights(completion=1.0, process=0.0, efficiency=0.0)
    assert agent_reward(0.7, 0.1, 0.1, w) == pytest.approx(0.7)


def test_clean_conversation_scores() -> None:
    s = score_conversation(dicts(CLEAN), TOOLS, success=True)
    assert s["efficiency"] == 0.9 and s["completeness"] == 1.0
    assert s["quality"] == pytest.approx(0.95)
    assert (s["grounding"], s["repeat_free"], s["answer_grounded"]) == (1.0, 1.0, 1.0)
    assert s["coherence"] == 1.0 and s["effective_calls"] == 1.0 and s["error_recovery"] == 1.0
    assert s["process"] == pytest.approx(1.0)
    assert s["agent_reward"] == pytest.approx(0.5 + 0.3 + 0.2 * 0.9)
    assert s["turn_cost"] == pytest.approx(0.1) and s["format_error"] == 0.0
    assert s["penalized_reward"] == pytest.approx(0.99)


def test_messy_conversation_scores() -> None:
    s = score_conversation(dicts(MESSY), TOOLS, success=False)
    assert s["efficiency"] == pytest.approx(0.6)  # 4 calls
    assert s["completeness"] == pytest.approx(0.4)
    assert s["quality"] == pytest.approx(0.5)
    # grounding: "lima" twice ungrounded, "paris" and "fl100" said by the user → 2/4
    assert s["grounding"] == pytest.approx(0.5)
    # two failing calls, the first repeated unchanged → 1 - 1/2
    assert s["repeat_free"] == pytest.approx(0.5)
    # "Done." mentions neither FL100 nor FL200 → 0
    assert s["answer_grounded"] == 0.0
    assert s["coherence"] == pytest.approx(1 / 3)
    # effective: only the Paris search (errors, and a call with no result, do not count)
    assert s["effective_calls"] == pytest.approx(0.25)
    # both failing searches are followed by a successful search → recovered
    assert s["error_recovery"] == 1.0
    assert s["process"] == pytest.approx(0.5)
    assert s["agent_reward"] == pytest.approx(0.27)
    assert s["penalized_reward"] == pytest.approx(-0.025)  # 0 - 0.1 · 5/20


def test_broken_conversation_scores() -> None:
    s = score_conversation(dicts(BROKEN), TOOLS, success=False)
    assert s["format_error"] == 1.0  # unknown tool and malformed arguments
    assert s["penalized_reward"] == pytest.approx(-0.51)
    assert s["effective_calls"] == 0.0
    assert s["error_recovery"] == 0.0  # the failing call is never followed by a success
    assert s["repeat_free"] == 1.0 and s["grounding"] == 1.0  # no repeat; no parseable value


def test_verify_outputs_feed_the_reward() -> None:
    # format errors found by verify count even when the calls themselves parse
    s = score_conversation(dicts(CLEAN), TOOLS, success=True, format_errors=["wrong_type: city"])
    assert s["format_error"] == 1.0 and s["penalized_reward"] == pytest.approx(0.49)
    # R_task comes from verify's task component when there is one (partial credit)
    s = score_conversation(dicts(CLEAN), TOOLS, success=False, components={"task": 0.5})
    assert s["completion"] == 0.5 and s["penalized_reward"] == pytest.approx(0.49)
    # weights are configurable: cost counted in calls over max_turns 4
    w = ScoreWeights(cost_unit="calls", max_turns=4, lambda_eff=0.4)
    s = score_conversation(dicts(MESSY), TOOLS, success=True, weights=w)
    assert s["turn_cost"] == 1.0 and s["penalized_reward"] == pytest.approx(0.6)


def test_tool_messages_without_ids_are_matched_in_order() -> None:
    msgs = dicts(CLEAN)
    msgs[2]["tool_call_id"] = None
    assert completeness(msgs) == 1.0
    assert score_conversation(msgs, TOOLS, success=True)["effective_calls"] == 1.0


def test_context_steps_are_not_format_errors() -> None:
    """STeCa keeps a deviated (wrong) step as context: its calls are not format errors."""
    from trajsynth.core import Message, ToolCall, Trajectory
    from trajsynth.envs.verifiers import check_trajectory

    tools = [
        {
            "type": "function",
            "function": {
                "name": "f",
                "parameters": {
                    "type": "object",
                    "properties": {"x": {"type": "integer"}},
                    "required": ["x"],
                },
            },
        }
    ]
    msgs = [
        Message(role="user", content="do f with x=1"),
        Message(role="assistant", tool_calls=[ToolCall(id="a", name="f", arguments="{bad")]),
        Message(role="tool", tool_call_id="a", name="f", content="error: bad arguments"),
        Message(
            role="assistant",
            reasoning="the last call was malformed",
            tool_calls=[ToolCall(id="b", name="f", arguments='{"x": 1}')],
        ),
        Message(role="tool", tool_call_id="b", name="f", content='{"ok": true}'),
        Message(role="assistant", content="done: ok"),
    ]
    plain = Trajectory(id="p", task_id="t", tools=tools, messages=msgs)
    calibrated = plain.derive(id="c", step_flags=[["deviated"], ["calibrated"], []])
    assert check_trajectory(plain) and check_trajectory(calibrated) == []
    assert calibrated.context_steps() == {0}
    dumped = [m.model_dump() for m in msgs]
    assert score_conversation(dumped, tools)["format_error"] == 1.0
    assert score_conversation(dumped, tools, context_steps={0})["format_error"] == 0.0
