"""``label_noise`` (wrong labels at a seeded rate, the truth kept aside) and JGLV finding them
with the simulated judge; the report's precision, recall and bootstrap intervals.

Run: PYTHONPATH=. python -m pytest tests/stages/test_label_noise.py -q
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from trajsynth.core import Trajectory
from trajsynth.core.task import GroundTruth
from trajsynth.envs import EnvFactory
from trajsynth.envs.verifiers import exact_multiset_reward
from trajsynth.llm.base import ChatRequest, RawChoice, TokenLogprob
from trajsynth.llm.scripted import use_scripted
from trajsynth.quality.intervals import mean_interval, paired_difference
from trajsynth.stages import Context, ContextSpec
from trajsynth.stages.common.label_noise import noise_of
from trajsynth.stages.common.looptool import locate_step
from trajsynth.train.eval import gold_steps

from .test_looptool import run

FACTORY = EnvFactory()
ROWS = [
    ex.to_trajectory(FACTORY.toolset(domain))
    for domain in ("math", "travel", "commerce")
    for ex in FACTORY.example_tasks(domain)
]
CONVERT = next(r for r in ROWS if r.task_id == "travel-convert")  # convert_currency(250, EUR→USD)


def noisy(rows: list[Trajectory], rate: float = 1.0, seed: int = 0, **cfg: Any):
    ctx = Context(ContextSpec(stage_id="noisy", seed=seed))
    return run("label_noise", {"rate": rate, **cfg}, rows, ctx)["main"], ctx


def calls(row: Trajectory) -> list[tuple[str, dict]]:
    return [
        (c.name, json.loads(c.arguments))
        for m in row.messages
        if m.role == "assistant"
        for c in m.tool_calls
    ]


def test_wrong_labels_pass_verification_and_keep_the_truth_aside() -> None:
    """Every corruptible row gets one wrong label in its last call step: the gold and the
    conversation follow the wrong calls (they execute, and ``verify`` passes them, as it would
    pass a generator's wrong label), the user's request is unchanged, and the clean calls are
    only in ``extra["label_noise"]``."""
    out, ctx = noisy(ROWS)
    counters = ctx.metrics.counters
    assert counters["rows"] == len(ROWS) == len(out)
    wrong = [r for r in out if noise_of(r.extra)]
    assert len(wrong) == counters["injected"] >= 8
    assert counters["injected"] + counters.get("not_corruptible", 0) == len(ROWS)
    assert {noise_of(r.extra)["kind"] for r in wrong} == {"value", "swap", "missing"}
    before = {r.id: r for r in ROWS}
    for row in wrong:
        noise = noise_of(row.extra)
        clean = before[row.id]
        gt = GroundTruth.from_json(row.ground_truth)
        t, s = locate_step(gt, noise["step"])
        got = [{"name": c.name, "arguments": c.arguments} for c in gt.turns[t].steps[s]]
        assert got == noise["noisy"] != noise["clean"]
        old = GroundTruth.from_json(clean.ground_truth)
        assert [{"name": c.name, "arguments": c.arguments} for c in old.turns[t].steps[s]] == (
            noise["clean"]
        )
        assert (
            exact_multiset_reward(gold_steps(gt)[noise["step"]], gold_steps(old)[noise["step"]])
            == 0.0
        )
        # the conversation follows the wrong label; the request still asks for the clean one
        assert [n for n, _ in calls(row)] == [c.name for c in gt.flat_calls()]
        assert [a for _, a in calls(row)] == [c.arguments for c in gt.flat_calls()]
        requests = [t.request for t in old.turns]
        assert [m.content for m in row.messages if m.role == "user"][: len(requests)] == requests
        assert [t.request for t in gt.turns] == requests
        assert "label_noise" not in json.dumps([m.model_dump() for m in row.messages])
        assert (row.id, row.task_id, row.method) == (clean.id, clean.task_id, clean.method)
    ctx = Context(ContextSpec(stage_id="verify"))
    verified = run("verify", {}, wrong, ctx)["main"]
    assert all(r.success for r in verified), [r.failure_reason for r in verified]


def test_the_rate_is_seeded_per_row() -> None:
    """The same rows get the same errors on every run, whatever the input order; exactly the
    rate's share of rows is made wrong (rows that cannot be are passed over); another seed
    picks other rows; rate 0 changes nothing."""
    many = [r.derive(id=f"{r.id}-{k}") for k in range(10) for r in ROWS]
    a, ctx = noisy(many, rate=0.3)
    b, _ = noisy(many[::-1], rate=0.3)
    assert [r.id for r in a] == [r.id for r in many]  # the input order is kept
    pick = {r.id: noise_of(r.extra) for r in a}
    assert pick == {r.id: noise_of(r.extra) for r in b}
    assert sum(1 for v in pick.values() if v) == round(0.3 * len(many)) == 63
    assert ctx.metrics.counters["not_corruptible"] > 0
    c, _ = noisy(many, rate=0.3, seed=1)
    assert {r.id for r in c if noise_of(r.extra)} != {k for k, v in pick.items() if v}
    zero, ctx = noisy(many, rate=0.0)
    assert [r.model_dump() for r in zero] == [r.model_dump() for r in many]
    assert ctx.metrics.counters.get("injected", 0) == 0
    only, _ = noisy(ROWS, kinds=["swap"])
    assert {noise_of(r.extra)["kind"] for r in only if noise_of(r.extra)} == {"swap"}


# --------------------------------------------------------------------------------------
# JGLV finds them
# --------------------------------------------------------------------------------------


def student(answers: dict[str, list[tuple[str, dict]]]):
    """A scripted student: per goal, the calls of its one step; then a text answer."""

    def handler(request: ChatRequest) -> RawChoice:
        goal = next(m["content"] for m in request.messages if m["role"] == "user")
        if request.messages[-1]["role"] == "tool":
            return RawChoice(content="Done.", logprobs=[TokenLogprob(token="t", logprob=-0.1)])
        return RawChoice(
            tool_calls=[
                {"id": f"c{i}", "name": n, "arguments": json.dumps(a)}
                for i, (n, a) in enumerate(answers[goal])
            ],
            logprobs=[TokenLogprob(token="t", logprob=-0.5)] * 4,
            finish_reason="tool_calls",
        )

    return handler


def asking(row: Trajectory, request: str) -> Trajectory:
    """The row under another id, its user asking ``request`` (the scripted student's key)."""
    gt = GroundTruth.from_json(row.ground_truth)
    turns = [gt.turns[0].model_copy(update={"request": request}), *gt.turns[1:]]
    new = gt.model_copy(update={"turns": turns}).model_dump(mode="json")
    said = gt.turns[0].request
    messages = [
        m.model_copy(update={"content": request}) if m.role == "user" and m.content == said else m
        for m in row.messages
    ]
    return row.derive(id=f"{row.id}-{request}", goal=request, ground_truth=new, messages=messages)


def probe_and_judge(rows: list[Trajectory], answers: dict[str, list[tuple[str, dict]]]):
    ctx = Context(ContextSpec(stage_id="round1.gcp", iteration=1))
    use_scripted(ctx, "student", student(answers))
    probed = run("gcp", {"role": "student"}, rows, ctx)
    llm = {"judge": {"backend": "sim", "sim": {"judge_accuracy": 1.0}}}
    ctx = Context(ContextSpec(stage_id="round1.jglv", iteration=1, llm=llm))
    return probed, run("jglv", {}, probed["failed"], ctx), ctx


def test_jglv_finds_the_injected_wrong_labels_with_the_simulated_judge() -> None:
    """The student answers what the request asks: where the label was made wrong, the
    simulated judge blames the label and JGLV relabels the row with the clean calls; where
    the student erred on a clean label, it blames the student; where both are wrong, it
    says so. The relabelled row is clean again (no truth record left)."""
    (wrong,), _ = noisy([CONVERT], kinds=["value"])
    noise = noise_of(wrong.extra)
    asked = [(c["name"], c["arguments"]) for c in noise["clean"]]
    other = [("convert_currency", {"amount": 999, "from_currency": "EUR", "to_currency": "USD"})]
    rows = [
        wrong,  # the student is right, the label wrong
        asking(CONVERT, "student wrong"),  # the label right, the student wrong
        asking(wrong, "both wrong"),
    ]
    answers = {CONVERT.goal: asked, "student wrong": other, "both wrong": other}
    _, judged, ctx = probe_and_judge(rows[:2], answers)
    (fixed,) = judged["corrected"]
    assert fixed.parent_ids == [wrong.id] and noise_of(fixed.extra) is None
    gt = GroundTruth.from_json(fixed.ground_truth)
    assert [(c.name, c.arguments) for c in gt.flat_calls()] == asked
    status = {r.id: r.extra["jglv"]["status"] for r in judged["main"]}
    assert status == {wrong.id: "original_incorrect", rows[1].id: "model_incorrect"}
    counters = ctx.metrics.counters
    assert counters["noise.judged"] == 1 and counters["noise.found"] == 1
    assert counters["noise.false_alarms"] == 0
    # both wrong: no relabelling, not expanded
    _, judged, ctx = probe_and_judge([rows[2]], answers)
    assert "corrected" not in judged and "main" not in judged
    assert judged["dropped"][0].extra["jglv"]["status"] == "both_incorrect"
    assert ctx.metrics.counters["noise.judged"] == 1 and ctx.metrics.counters["noise.found"] == 0


# --------------------------------------------------------------------------------------
# the report
# --------------------------------------------------------------------------------------


def test_intervals() -> None:
    half = [1.0] * 25 + [0.0] * 25
    mean, (lo, hi) = mean_interval(half)
    assert (
        mean == 0.5 and lo == pytest.approx(0.36, abs=0.03) and hi == pytest.approx(0.64, abs=0.03)
    )
    assert mean_interval(half) == mean_interval(half)  # seeded
    assert mean_interval([]) == (None, (None, None))
    assert mean_interval([1.0]) == (1.0, (None, None))
    # paired: one task in 50 better → +0.02, and an interval that includes 0
    better = list(half)
    better[25] = 1.0
    diff, (lo, hi) = paired_difference(better, half)
    assert diff == 0.02 and lo == 0.0 and hi == pytest.approx(0.06, abs=0.021)
    # the same 10 extra tasks solved: the whole interval above 0
    diff, (lo, hi) = paired_difference([1.0] * 35 + [0.0] * 15, half)
    assert diff == 0.2 and 0.0 < lo < 0.2 < hi
    with pytest.raises(ValueError, match="same tasks"):
        paired_difference([1.0], [1.0, 0.0])


def episode(i: int, policy: str, set_: str, it: int, ok: bool, **extra: Any) -> Trajectory:
    return CONVERT.derive(
        id=f"e{policy}{set_}{it}-{i}",
        task_id=f"t{i}",
        method="gcp",
        iteration=it,
        capabilities=["single_call"],
        parent_ids=[f"row{i}"],
        reward_components={"exact_match": float(ok), "tool_match": 1.0},
        extra={"gcp": {"policy": policy, "set": set_, **extra.pop("gcp", {})}, **extra},
    )


def test_report_intervals_paired_difference_and_jglv_precision_recall() -> None:
    from trajsynth.stages.looptool.report import _markdown, build_report

    n = 50
    rows = [episode(i, "teacher", "probe", 0, True) for i in range(n)]
    rows += [episode(i, "student", "probe", 1, i < 10) for i in range(n)]
    rows += [episode(i, "student", "probe", 2, i < 30) for i in range(n)]
    rows += [episode(i, "student", "static", 0, i < 20) for i in range(n)]
    # GCP probed 10 training rows in round 1: 4 with wrong labels, 3 failed at that step
    wrong = {"label_noise": {"step": 0, "kind": "value", "clean": [], "noisy": []}}
    for i in range(10):
        gcp = {"status": "failed" if i < 6 else "easy", "step": 0}
        rows.append(
            episode(
                100 + i,
                "student",
                "data",
                1,
                i >= 6,
                gcp=gcp,
                **(wrong if i < 4 and i != 3 else {}),
            )
        )
    rows.append(episode(103, "student", "data", 1, True, gcp={"status": "easy"}, **wrong))
    # JGLV relabelled rows 100 and 101 (wrong labels) and 105 (a right one)
    seed = [CONVERT.derive(id=f"s{k}", extra=wrong if k < 5 else {}) for k in range(50)]
    made = [
        CONVERT.derive(
            id=f"c{k}",
            method="jglv",
            parent_ids=[f"row{k}"],
            extra={"looptool": {"origin": "corrected", "iteration": 1}},
        )
        for k in (100, 101, 105)
    ]
    report = build_report(rows + seed + made)
    its = report["iterations"]
    assert report["probe_tasks"] == 50 and report["probe_tasks_by_capability"]["overall"] == 50
    assert its[1]["student"]["overall"] == 0.6
    lo, hi = its[1]["student_ci"]["overall"]
    assert 0.45 < lo < 0.6 < hi < 0.75
    static = report["static_baseline"]
    assert static["loop_minus_static"] == pytest.approx(0.2)
    lo, hi = static["loop_minus_static_ci"]
    assert 0.0 < lo < 0.2 < hi  # the loop solves the static student's tasks and 10 more
    assert static["verdict"] == "the loop beats the static data"
    noise = report["label_noise"]
    assert (noise["seed_rows"], noise["seed_noisy"], noise["rate"]) == (50, 5, 0.1)
    (first, _) = noise["iterations"]
    assert first["probed"] == 11 and first["probed_noisy"] == 4 and first["judged_noisy"] == 3
    assert (first["relabelled"], first["found"], first["false_alarms"]) == (3, 2, 1)
    assert first["precision"] == pytest.approx(2 / 3, abs=1e-4) and first["recall"] == 0.5
    text = _markdown(report)
    assert "| overall (50) | 0.20 [" in text
    assert "paired bootstrap interval: +0.20 [+0." in text
    assert "precision 0.67 (2 of 3 labels it replaced were wrong), recall 0.50" in text
    # the final dataset (graded rows): 10 easy, 9 medium, 1 hard against 30/50/20
    graded = [
        CONVERT.derive(id=f"f{k}", difficulty=d, extra=wrong if k == 0 else {})
        for k, d in enumerate(["easy"] * 10 + ["medium"] * 9 + ["hard"])
    ]
    final = build_report(rows + seed + made + graded)["final_dataset"]
    assert final["difficulty"] == {"easy": 10, "medium": 9, "hard": 1}
    assert final["short"] == {"easy": 0, "medium": 1, "hard": 3} and final["wrong_labels"] == 1
    assert build_report(rows + seed + made + graded)["label_noise"] == noise  # not data rows
    text = _markdown(build_report(rows + seed + made + graded))
    assert "Final dataset: 20 rows, 10 easy / 9 medium / 1 hard (50/45/5% against the " in text
    assert (
        "target 30/50/20%: medium short by 1, hard short by 3); wrong labels left in it: 1." in text
    )
    report["sections"].append({"title": "BFCL", "lines": ["a line"]})
    assert _markdown(report).endswith("## BFCL\n\na line\n")
    # a static student no better: the interval includes 0
    rows = [r for r in rows if (r.extra["gcp"]["set"], r.iteration) != ("static", 0)]
    rows += [episode(i, "student", "static", 0, i < 29) for i in range(n)]
    assert build_report(rows)["static_baseline"]["verdict"] == (
        "no difference the probe set can detect"
    )
