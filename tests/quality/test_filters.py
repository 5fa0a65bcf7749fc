"""The reference filter: one crafted row per rule, switching each rule off, first-rule and
any-rule counts, rows scored on the fly, and the ``filter`` stage's outputs and metrics.

Run: python -m pytest tests/quality/test_filters.py -q
"""

from __future__ import annotations

import pytest
from qrows import call, row

from trajsynth.core import to_batch
from trajsynth.quality.filters import RULES, FilterRules, apply_filter
from trajsynth.stages import Context, ContextSpec, Emit, build_stage

GOOD_STEPS = [
    ("think", "look", [call("get_weather", city="Oslo")], [{"sky": "cloudy"}]),
    ("say", "Cloudy in Oslo."),
]


def scored(rid: str, *, quality: float = 0.9, coherence: float = 0.9, fmt: float = 0.0, **kw):
    steps = kw.pop("steps", GOOD_STEPS)
    return row(
        rid,
        "Weather in Oslo?",
        steps,
        quality_score=quality,
        reward_components={"coherence": coherence, "format_error": fmt},
        **kw,
    )


ROWS = [
    scored("keep"),
    scored("fmt-verify", format_errors=["missing_required: city"]),
    scored("fmt-layer", failure_layer="format", failure_reason="bad json"),
    scored("fmt-score", fmt=1.0),
    scored("incoherent", coherence=0.3),
    scored("too-easy", steps=[("say", "Cloudy.")]),
    scored(
        "inefficient",
        steps=[
            ("think", "all", [call("get_weather", city="Oslo")] * 9, [{"sky": "x"}] * 9),
            ("say", "x"),
        ],
    ),
    scored("low-quality", quality=0.65),
    scored("failed-but-fine", success=False),
    scored("failed-easy", success=False, steps=[("say", "no idea")]),  # not too easy: unsuccessful
    scored("never-verified", success=None),
    scored("two-rules", quality=0.1, format_errors=["wrong_type: city"]),
]


def kept(outcome, rows=ROWS) -> list[str]:
    return [r.id for r, k in zip(rows, outcome.keep, strict=True) if k]


def test_each_rule_drops_its_row() -> None:
    out = apply_filter(to_batch(ROWS), FilterRules())
    assert kept(out) == ["keep"]
    assert out.dropped == {
        "invalid_calls": 4,
        "incoherent": 1,
        "too_easy": 1,
        "inefficient": 1,
        "low_quality": 1,
        "unsuccessful": 3,  # on by default: failed, and never verified (success null)
    }
    # "two-rules" is dropped by invalid_calls first but also fails low_quality
    assert out.failing["low_quality"] == 2 and out.failing["invalid_calls"] == 4
    assert sum(out.dropped.values()) == len(ROWS) - int(out.keep.sum())
    first = dict(zip((r.id for r in ROWS), out.first_rule.tolist(), strict=True))
    assert RULES[first["two-rules"]] == "invalid_calls" and first["keep"] == -1


@pytest.mark.parametrize(
    "rule, rescued",
    [
        ("invalid_calls", {"fmt-verify", "fmt-layer", "fmt-score"}),
        ("incoherent", {"incoherent"}),
        ("too_easy", {"too-easy"}),
        ("inefficient", {"inefficient"}),
        ("low_quality", {"low-quality"}),
        ("unsuccessful", {"failed-but-fine", "failed-easy", "never-verified"}),
    ],
)
def test_each_rule_can_be_switched_off(rule: str, rescued: set[str]) -> None:
    out = apply_filter(to_batch(ROWS), FilterRules(**{rule: False}))
    assert set(kept(out)) == {"keep"} | rescued
    assert rule not in out.dropped


def test_thresholds_and_the_success_rule() -> None:
    batch = to_batch(ROWS)
    assert "low-quality" in kept(apply_filter(batch, FilterRules(min_quality=0.6)))
    assert "inefficient" in kept(apply_filter(batch, FilterRules(max_calls=9)))
    assert "incoherent" in kept(apply_filter(batch, FilterRules(min_coherence=0.3)))
    # rows that did not verify are dropped unless asked for: the rule is on by default
    assert FilterRules().unsuccessful is True
    out = apply_filter(batch, FilterRules(unsuccessful=False))
    assert kept(out) == ["keep", "failed-but-fine", "failed-easy", "never-verified"]


def test_unscored_rows_are_scored_here() -> None:
    clean = row("clean", "Weather in Oslo?", GOOD_STEPS)
    messy = row(
        "messy",
        "Book flight FL100",
        [
            ("think", None, [call("search_flights", destination="Lima")], [{"error": "x"}]),
            ("think", None, [call("search_flights", destination="Lima")], [{"error": "x"}]),
            ("say", "Done."),
        ],
    )
    out = apply_filter(to_batch([clean, messy]), FilterRules())
    assert out.computed == 2
    assert out.keep.tolist() == [True, False]
    # messy: coherence (0 + 0.5 + 1) / 3 = 0.5 is not below 0.5; quality 0.5·0.8 + 0.5·(1/3)
    assert out.failing == {
        "invalid_calls": 0,
        "incoherent": 0,
        "too_easy": 0,
        "inefficient": 0,
        "low_quality": 1,
        "unsuccessful": 0,
    }


def test_filter_stage_outputs_and_metrics() -> None:
    stage = build_stage("filter", {"keep_rejected": True})
    ctx = Context(ContextSpec(stage_id="f"))
    half = len(ROWS) // 2
    outputs = list(stage.process(iter([to_batch(ROWS[:half]), to_batch(ROWS[half:])]), ctx))
    main = [i for o in outputs if not isinstance(o, Emit) for i in o.column("id").to_pylist()]
    rejected = [i for o in outputs if isinstance(o, Emit) for i in o.data.column("id").to_pylist()]
    assert main == ["keep"]
    assert len(rejected) == len(ROWS) - 1
    counters = ctx.metrics.snapshot()["counters"]
    assert counters["rows_in"] == len(ROWS) and counters["kept"] == 1
    assert counters["dropped.unsuccessful"] == 3
    assert counters["dropped.invalid_calls"] == 4 and counters["failing.low_quality"] == 2
    assert ctx.metrics.snapshot()["values"]["thresholds"]["min_quality"] == 0.7


def test_too_easy_keeps_a_one_turn_decline_or_question_its_task_asks_for() -> None:
    """A task no offered function fits (or that lacks a required value) is answered in one
    turn with no call: that is the lesson (BFCL's irrelevance categories), not an easy row.
    A chat turn answered in one turn is still too easy."""
    from trajsynth.core.task import GoldTurn, GroundTruth

    def gold(kind: str, answer: str) -> GroundTruth:
        return GroundTruth(turns=[GoldTurn(request="Weather in Oslo?", kind=kind, answer=answer)])

    rows = [
        scored(
            "decline",
            steps=[("say", "No tool here gives weather.")],
            ground_truth=gold("clarify", "No tool here gives weather."),
        ),
        scored("chat", steps=[("say", "Hello!")], ground_truth=gold("no_tool", "Hello!")),
        scored("no-gold", steps=[("say", "Cloudy.")]),
    ]
    out = apply_filter(to_batch(rows), FilterRules())
    assert kept(out, rows) == ["decline"] and out.dropped["too_easy"] == 2
