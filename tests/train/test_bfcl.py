"""BFCL built in (``trajsynth.train.bfcl``, ``trajsynth eval --benchmark bfcl``): an oracle that
answers with the possible answers scores 100% on every category, prose scores 0 where a call is
due and 100% on irrelevance, a wrong value is counted as one, the spread limit is stable,
contamination finds BFCL's single-turn names and questions, and a run compared with a baseline
gets each difference on the shared questions with a paired interval.

Run: python -m pytest tests/train/test_bfcl.py -q
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from trajsynth.core.errors import ConfigError, DataError, InputNotFoundError
from trajsynth.core.schema import Message, ToolCall
from trajsynth.llm.base import ChatRequest
from trajsynth.llm.parsing import format_hermes
from trajsynth.llm.scripted import scripted_client
from trajsynth.train.bfcl import (
    MEAN_OVER,
    BfclConfig,
    compare_answers,
    contamination,
    evaluate_bfcl,
    load_category,
    read_answers,
    single_turn_index,
)

CATS = ["simple_python", "multiple", "parallel", "parallel_multiple", "live_simple"]


@pytest.fixture(scope="module")
def bfcl_dir(external_dir: Path) -> Path:
    return external_dir / "bfcl"


def _question(request: ChatRequest) -> str:
    return next(m["content"] for m in request.messages if m["role"] == "user")


def oracle(bfcl_dir: Path, categories: list[str], limit: int) -> Any:
    """Answers each question with its first possible answer, as hermes text."""
    gold = {}
    for cat in categories:
        for e in load_category(cat, data_dir=bfcl_dir, limit=limit):
            gold[e.turns[0][-1]["content"]] = e.gold[0] if e.gold else []

    def answer(request: ChatRequest) -> str:
        calls = gold[_question(request)]
        if not calls:
            return "I cannot help with that using these tools."
        return format_hermes([(c.name, c.arguments) for c in calls])

    return answer


def test_oracle_scores_every_category_fully(bfcl_dir: Path) -> None:
    cats = [*CATS, "irrelevance", "live_irrelevance"]
    client = scripted_client("eval", oracle(bfcl_dir, cats, 12))
    report = evaluate_bfcl(client, BfclConfig(categories=cats, limit=12, data_dir=str(bfcl_dir)))
    for cat in cats:
        score = report.categories[cat]
        assert score.total == 12, cat
        assert score.accuracy == 1.0, (cat, score.errors)
    assert report.mean == 1.0 and set(MEAN_OVER) <= set(report.categories)
    assert report.mean_interval == (1.0, 1.0) and report.intervals()["irrelevance"] == (1.0, 1.0)


def test_prose_scores_zero_on_calls_and_full_on_irrelevance(bfcl_dir: Path) -> None:
    client = scripted_client("eval", lambda r: "Sure! The answer is probably 42.")
    cfg = BfclConfig(categories=["simple_python", "irrelevance"], limit=5, data_dir=str(bfcl_dir))
    report = evaluate_bfcl(client, cfg)
    assert report.categories["simple_python"].accuracy == 0.0
    assert report.categories["simple_python"].errors == {"wrong_count": 5}
    assert report.categories["irrelevance"].accuracy == 1.0
    assert report.mean is None  # not every MEAN_OVER category was run


def test_a_wrong_value_or_unparseable_call_is_wrong(bfcl_dir: Path) -> None:
    entries = load_category("simple_python", data_dir=bfcl_dir, limit=4)
    first = entries[0].turns[0][-1]["content"]
    gold = {e.turns[0][-1]["content"]: e.gold[0][0] for e in entries}

    def answer(request: ChatRequest) -> str:
        call = gold[_question(request)]
        if _question(request) == first:  # every value replaced by a wrong one
            args = {
                k: ("nonsense" if isinstance(v, str) else 987654) for k, v in call.arguments.items()
            }
            return format_hermes([(call.name, args)])
        if _question(request) == entries[1].turns[0][-1]["content"]:
            return '<tool_call>{"name": "' + call.name + '", "arguments": {broken</tool_call>'
        return format_hermes([(call.name, call.arguments)])

    report = evaluate_bfcl(
        scripted_client("eval", answer),
        BfclConfig(categories=["simple_python"], limit=4, data_dir=str(bfcl_dir)),
    )
    score = report.categories["simple_python"]
    assert (score.correct, score.total) == (2, 4)
    low, high = score.interval  # 2 of 4: the bootstrap's 95% interval spans 0 to 1
    assert low == 0.0 and high == 1.0
    wrong = {a["id"]: a for a in report.answers if not a["correct"]}
    assert set(wrong) == {entries[0].id, entries[1].id}
    assert sum(score.errors.values()) == 2


def test_limit_spreads_over_the_file_and_is_stable(bfcl_dir: Path) -> None:
    every = load_category("simple_python", data_dir=bfcl_dir)
    some = load_category("simple_python", data_dir=bfcl_dir, limit=10)
    assert len(some) == 10 and len(every) > 100
    idx = [every.index(e) for e in some]
    assert idx[0] == 0 and idx[-1] > len(every) * 0.8  # not the first ten
    assert [e.id for e in some] == [
        e.id for e in load_category("simple_python", data_dir=bfcl_dir, limit=10)
    ]


def test_bad_input_is_one_clear_error(bfcl_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown BFCL category: simple_cobol"):
        evaluate_bfcl(None, BfclConfig(categories=["simple_cobol"], data_dir=str(bfcl_dir)))
    with pytest.raises(InputNotFoundError, match="does not exist"):
        load_category("simple_python", data_dir=tmp_path / "nowhere")
    with pytest.raises(InputNotFoundError, match="missing from the BFCL data"):
        load_category("simple_python", data_dir=tmp_path)


def test_cli_benchmark_errors_exit_2_without_traceback(bfcl_dir: Path, tmp_path: Path) -> None:
    base = [sys.executable, "-m", "trajsynth", "eval", "--base-url", "http://127.0.0.1:9/v1"]
    cases = [
        (["--benchmark", "mmlu"], "unknown benchmark 'mmlu'"),
        (["--benchmark", "bfcl", "--categories", "simple_cobol"], "unknown BFCL category"),
        (["--benchmark", "bfcl", "--data-dir", str(tmp_path / "x")], "does not exist"),
        (["--benchmark", "bfcl", "--tasks", str(tmp_path)], "either --tasks or --benchmark"),
        (["--benchmark", "bfcl", "--baseline", str(tmp_path / "a.json")], "no answers file"),
        (["--tasks", str(tmp_path), "--baseline", str(tmp_path)], "--baseline goes with"),
    ]
    for args, needle in cases:
        res = subprocess.run([*base, *args], capture_output=True, text=True, timeout=120)
        assert res.returncode == 2, (args, res.stderr)
        assert needle in res.stderr and "Traceback" not in res.stderr + res.stdout


def test_contamination_finds_bfcl_names_and_questions(bfcl_dir: Path) -> None:
    index = single_turn_index(bfcl_dir)
    entry = load_category("simple_python", data_dir=bfcl_dir, limit=1)[0]
    fn = entry.tools.tools[0]
    assert fn.name in index.names and len(index.questions) > 1000

    def row(name: str, goal: str) -> Any:
        call = ToolCall(id="c1", name=name, arguments="{}")
        messages = [
            Message(role="user", content=goal),
            Message(role="assistant", tool_calls=[call]),
        ]
        tools = [{"type": "function", "function": {"name": name}}]
        return SimpleNamespace(tools=tools, messages=messages, goal=goal)

    clean = row("lookup_weather_for_my_trip", "What's the weather in Lisbon tomorrow?")
    assert contamination([clean], index)["count"] == 0
    dirty = row(fn.name, entry.turns[0][-1]["content"].upper())  # case and spacing ignored
    found = contamination([clean, dirty], index)
    assert found["count"] == 2 and found["names"] == [fn.name] and len(found["questions"]) == 1


def test_report_json_shape(bfcl_dir: Path) -> None:
    client = scripted_client("eval", oracle(bfcl_dir, CATS, 2))
    report = evaluate_bfcl(client, BfclConfig(categories=CATS, limit=2, data_dir=str(bfcl_dir)))
    data = json.loads(report.model_dump_json())
    assert data["benchmark"] == "bfcl" and data["limit"] == 2 and data["mean"] == 1.0
    assert "answers" not in data
    assert report.accuracies() == {**{c: 1.0 for c in CATS}, "mean": 1.0}


def test_the_mean_interval_resamples_within_each_category() -> None:
    from trajsynth.train.bfcl import stratified_mean_interval

    # five categories of 20, 7 right in each: a mean of 0.35, about ±0.09 with 100 questions
    groups = [[True] * 7 + [False] * 13 for _ in range(5)]
    low, high = stratified_mean_interval(groups)
    assert 0.24 <= low < 0.35 < high <= 0.46
    assert stratified_mean_interval(groups) == (low, high)  # seeded
    assert stratified_mean_interval([[True], [False, True]]) == (None, None)
    # one category all right, one all wrong: no spread within either, so none in the mean
    assert stratified_mean_interval([[True] * 20, [False] * 20]) == (0.5, 0.5)


def test_a_baseline_comparison_pairs_the_questions_both_runs_answered(
    bfcl_dir: Path, tmp_path: Path
) -> None:
    cats = [*CATS, "irrelevance"]
    cfg = BfclConfig(categories=cats, limit=6, data_dir=str(bfcl_dir))
    right = evaluate_bfcl(scripted_client("eval", oracle(bfcl_dir, cats, 6)), cfg).answers
    prose = evaluate_bfcl(scripted_client("eval", lambda r: "No idea."), cfg).answers
    versus = compare_answers(right, prose)
    for cat in CATS:  # every call category: 6 of 6 against 0 of 6, on every resample
        d = versus[cat]
        assert (d.questions, d.baseline, d.accuracy, d.difference) == (6, 0.0, 1.0, 1.0)
        assert d.interval == (1.0, 1.0)
    assert versus["irrelevance"].difference == 0.0  # both declined every one
    assert versus["mean"].questions == 30 and versus["mean"].difference == 1.0
    # half the baseline's answers right in each category: the paired differences are 0 or 1
    half = [{**a, "correct": a["correct"] or i % 2 == 0} for i, a in enumerate(prose)]
    mixed = compare_answers(right, half)["mean"]
    assert mixed.difference == 0.5 and 0.2 <= mixed.interval[0] < 0.5 < mixed.interval[1] <= 0.8
    # only the shared questions count; a file from elsewhere is one clear error
    partial = compare_answers(right[:3], prose)
    assert set(partial) == {"simple_python"} and partial["simple_python"].questions == 3
    with pytest.raises(DataError, match="share no question"):
        compare_answers(right, [{**a, "id": "x" + a["id"]} for a in prose])
    (tmp_path / "rows.json").write_text(json.dumps([{"messages": []}]))
    with pytest.raises(DataError, match="not a BFCL answers file"):
        read_answers(tmp_path / "rows.json")
    (tmp_path / "a.json").write_text(json.dumps(right))
    assert read_answers(tmp_path / "a.json") == json.loads(json.dumps(right))
