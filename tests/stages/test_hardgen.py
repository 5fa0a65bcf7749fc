"""``hardgen`` (METHODS.md §10, HardGen row): two probe policies that fail only on tool X
mark X as a failure API (one failing probe is not enough); the sampler never emits a tool
before its prerequisite (a tiny DAG and the travel graph); hard queries leave the middle
steps implicit; hints never contain a gold argument value (even when the verifier leaks
one); a reasoner wrong twice then right is kept with 3 attempts, one wrong 3 times is
discarded.

Run: PYTHONPATH=. python -m pytest tests/stages/test_hardgen.py -q
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

import pytest

from trajsynth.core import to_batch, to_records
from trajsynth.core.errors import ConfigError
from trajsynth.core.task import GoldCall
from trajsynth.envs import EnvFactory, Toolset, ToolSpec
from trajsynth.graph import GraphConfig, build_graph
from trajsynth.llm.base import ChatRequest, RawChoice
from trajsynth.llm.scripted import use_scripted
from trajsynth.stages import Context, ContextSpec, build_stage
from trajsynth.stages.methods.hardgen import gold_values, legal_trace, redact_hint, sample_trace

FACTORY = EnvFactory()
LEXICAL = GraphConfig(similarity="lexical")


def example_rows(*domains: str) -> list:
    return [
        t.to_trajectory(FACTORY.toolset(t.domain))
        for d in domains
        for t in FACTORY.example_tasks(d)
        if t.ground_truth.flat_calls() and not t.ground_truth.extra.get("expected_errors")
    ]


def done_calls(req: ChatRequest) -> int:
    return sum(len(m.get("tool_calls") or []) for m in req.messages if m["role"] == "assistant")


def gold_of(req: ChatRequest) -> list[dict[str, Any]]:
    gt = req.metadata["ground_truth"]
    return [c for t in gt["turns"] for s in t["steps"] for c in s]


def call(name: str, args: dict[str, Any]) -> RawChoice:
    return RawChoice(tool_calls=[{"id": f"c{len(args)}", "name": name,
                                  "arguments": json.dumps(args)}])  # fmt: skip


def plays_gold(wrong_on: set[str] = frozenset(), *, wrong: bool = False):  # type: ignore[assignment]
    """A scripted policy that plays the task's gold calls in order (one per step, then an
    answer); calls to ``wrong_on`` tools (or every call, with ``wrong``) get a bogus
    argument, which the schema check rejects."""

    def policy(req: ChatRequest) -> RawChoice:
        gold = gold_of(req)
        k = done_calls(req)
        if k >= len(gold):
            return RawChoice(content="All done.")
        c = gold[k]
        args = dict(c["arguments"])
        if wrong or c["name"] in wrong_on:
            args["bogus_argument"] = 1
        return call(c["name"], args)

    return policy


def run(rows: list, ctx: Context, **cfg: Any) -> list:
    stage = build_stage("hardgen", cfg)
    return [r for b in stage.process(iter([to_batch(rows)]), ctx) for r in to_records(b)]


def test_failure_apis_need_every_probe_to_fail() -> None:
    rows = example_rows("travel")
    ctx = Context(ContextSpec(stage_id="hg"))
    use_scripted(ctx, "student", plays_gold({"search_flights", "get_user"}))
    use_scripted(ctx, "teacher", plays_gold({"search_flights"}))
    run(rows, ctx, tasks=1, max_candidates=1)
    values = ctx.metrics.snapshot()["values"]
    assert values["failure_apis"] == ["travel.search_flights"]
    rates = values["failure_rates"]
    assert rates["student"]["travel.get_user"][0] > 0  # the student alone fails get_user
    assert rates["teacher"]["travel.get_user"][0] == 0
    with pytest.raises(ConfigError, match="at least two different probe roles"):
        build_stage("hardgen", {"probe_roles": ["teacher", "teacher"]})


def tiny_toolset() -> Toolset:
    city = ToolSpec(
        name="find_city",
        description="Find a city by its name.",
        parameters={"type": "object", "properties": {"name": {"type": "string",
                    "description": "City name."}}, "required": ["name"]},
        response={"type": "object", "properties": {"city_id": {"type": "string",
                  "description": "Id of the city."}}},
    )  # fmt: skip
    weather = ToolSpec(
        name="get_weather",
        description="Weather forecast for a city.",
        parameters={"type": "object", "properties": {"city_id": {"type": "string",
                    "description": "Id of the city, from find_city."}}, "required": ["city_id"]},
        response={"type": "object", "properties": {"summary": {"type": "string"}}},
    )  # fmt: skip
    book = ToolSpec(
        name="book_tour",
        description="Book a guided tour in a city.",
        parameters={"type": "object", "properties": {
            "city_id": {"type": "string", "description": "Id of the city, from find_city."},
            "people": {"type": "integer", "description": "Number of people."}},
            "required": ["city_id", "people"]},
        response={"type": "object", "properties": {"tour_id": {"type": "string"}}},
    )  # fmt: skip
    return Toolset(name="tiny", tools=[city, weather, book])


def test_the_sampler_never_emits_a_tool_before_its_prerequisite() -> None:
    graph = build_graph(tiny_toolset(), LEXICAL)
    assert graph.prerequisites("get_weather") == {"city_id": ["find_city"]}
    seen = 0
    for seed in range(200):
        got = sample_trace(graph, {"get_weather": 1.0, "book_tour": 2.0}, random.Random(seed),
                           min_calls=1, max_calls=8)  # fmt: skip
        if got is None:
            continue
        target, trace = got
        seen += 1
        tools = [c.tool for c in trace]
        assert tools[-1] == target and legal_trace(graph, trace) == []
        for i, t in enumerate(tools):
            if t in ("get_weather", "book_tour"):
                assert "find_city" in tools[:i]
    assert seen >= 150
    # the real travel graph: every prerequisite of every call bound to an earlier call
    travel = build_graph(FACTORY.toolset("travel"), LEXICAL)
    targets = {"book_flight": 1.0, "cancel_booking": 1.0, "get_booking": 0.5}
    traces = [
        sample_trace(travel, targets, random.Random(s), min_calls=2, max_calls=8)
        for s in range(120)
    ]
    traces = [t for t in traces if t is not None]
    assert len(traces) >= 40
    for _, trace in traces:
        pos = {c.uid: i for i, c in enumerate(trace)}
        for i, c in enumerate(trace):
            bound = c.bound()
            for param in travel.prerequisites(c.tool):
                assert param in bound and pos[bound[param].source] < i


def test_hints_never_contain_gold_values() -> None:
    args = {"flight_id": "SW330", "passengers": 2, "user_id": "omar_haddad", "price": 159.0}
    gold = [GoldCall(name="book_flight", arguments=args)]
    values = gold_values(gold)
    assert set(values) == {"SW330", "omar_haddad", "159"}
    text, leaked = redact_hint("Use SW330 for omar_haddad at 159 in call 2.", values)
    assert leaked and not any(v.lower() in text.lower() for v in values) and "call 2" in text
    # in the stage: a verifier that leaks every value; the reasoner never sees one
    rows = example_rows("travel")
    ctx = Context(ContextSpec(stage_id="hg"))
    use_scripted(ctx, "student", lambda req: RawChoice(content="I cannot help."))
    use_scripted(ctx, "probe2", lambda req: RawChoice(content="I cannot help."))
    reasoner = use_scripted(ctx, "teacher", plays_gold(wrong=True))

    def leaky(req: ChatRequest) -> str:
        vals = gold_values([GoldCall(**c) for s in req.metadata["gold"] for c in s])
        return json.dumps({"correct": False, "hint": "Use " + ", ".join(vals) + " exactly."})

    use_scripted(ctx, "verifier", leaky)
    out = run(rows, ctx, probe_roles=["student", "probe2"], tasks=3, max_attempts=3)
    assert out == []  # always wrong: discarded
    c = ctx.metrics.snapshot()["counters"]
    assert c["discarded"] >= 1 and c["hints.redacted"] == c["hints"] == 2 * c["discarded"]
    for req in reasoner.requests:
        gt = req.metadata["ground_truth"]
        vals = gold_values([GoldCall(**x) for t in gt["turns"] for s in t["steps"] for x in s])
        sent = req.messages[1]["content"]
        hints = sent.split("[Hints from a reviewer]")[1] if "[Hints" in sent else ""
        for v in vals:
            assert not re.search(rf"(?<![\w.]){re.escape(v)}(?!\w)", hints, re.I), (v, hints)


def test_wrong_twice_then_right_is_kept_with_three_attempts() -> None:
    rows = example_rows("travel", "commerce")
    ctx = Context(ContextSpec(stage_id="hg"))
    use_scripted(ctx, "student", lambda req: RawChoice(content="I cannot help."))
    use_scripted(ctx, "probe2", lambda req: RawChoice(content="I cannot help."))
    right, wrong = plays_gold(), plays_gold(wrong=True)

    def reasoner(req: ChatRequest) -> RawChoice:
        return (right if req.metadata["attempt"] == 2 else wrong)(req)

    seen = use_scripted(ctx, "teacher", reasoner)
    out = run(rows, ctx, probe_roles=["student", "probe2"], tasks=3)
    assert len(out) == 3
    for r in out:
        hg = r.extra["hardgen"]
        assert hg["attempts"] == 3 and len(hg["hints"]) == 2
        assert r.success and r.method == "hardgen" and r.parent_ids
        # recorded without the hints; the hard query names no function
        assert "[Hints" not in r.messages[1].content and r.goal == r.messages[1].content
        names = [t["function"]["name"] for t in r.tools]
        assert not any(re.search(rf"\b{n}\b", r.goal) for n in names)
        adv = r.ground_truth.extra["advanced_tool"]
        assert adv["name"] == hg["target"] + "_adv" and adv["chain"][-1] == hg["target"]
        # the user's values are in the query; values from earlier outputs are not needed
        for v in r.ground_truth.extra["advanced_arguments"].values():
            if isinstance(v, str):
                assert v.lower() in r.goal.lower()
    # attempts 2 and 3 carried hints in what was sent
    assert any("[Hints from a reviewer]" in q.messages[1]["content"] for q in seen.requests)
    c = ctx.metrics.snapshot()["counters"]
    assert c["attempts.3"] == 3 and c["kept"] == 3


def test_default_simulated_roles_end_to_end() -> None:
    """The offline default: a weak student and the teacher as probes; the simulator's
    verifier hints reveal no gold value."""
    weak = {"wrong_argument_value": 0.3, "drop_optional_param": 0.5,
            "missing_dependent_call": 0.4}  # fmt: skip
    ctx = Context(ContextSpec(stage_id="hg", llm={"student": {"sim": {"profile": weak}}}))
    out = run(example_rows("travel", "messaging", "commerce"), ctx, tasks=6, probe_rollouts=2)
    c = ctx.metrics.snapshot()["counters"]
    assert c["failure_apis"] >= 1 and len(out) >= 3
    for r in out:
        vals = gold_values(r.ground_truth.flat_calls())
        for h in r.extra["hardgen"]["hints"]:
            assert not any(re.search(rf"(?<![\w.]){re.escape(v)}(?!\w)", h, re.I) for v in vals)
        assert 2 <= r.num_tool_calls <= 8 and r.extra["hardgen"]["attempts"] <= 3


def test_a_checkpoint_in_needs_plays_the_student_probe(tmp_path) -> None:
    """In a LoopTool round HardGen probes the student just trained: ``checkpoint_role`` makes
    that probe the checkpoint named in ``needs:`` (the ``local`` backend). An untrained tiny
    student fails every tool and the teacher only ``search_flights``: that is the one failure
    API. Without ``needs:`` the stage says what is missing."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from trajsynth.train.tiny import TinyConfig, build_tiny

    rows = [r for r in example_rows("travel") if r.task_id == "travel-book-cheapest-nonstop"]
    tiny = TinyConfig(vocab_size=400, hidden_size=32, intermediate_size=64, num_layers=1)
    folder = build_tiny(rows, tmp_path / "student", tiny)
    ctx = Context(ContextSpec(stage_id="round1.hardgen", artifacts_in={"train": str(folder)}))
    use_scripted(ctx, "teacher", plays_gold({"search_flights"}))
    run(rows, ctx, tasks=1, checkpoint_role="student")
    snap = ctx.metrics.snapshot()
    assert snap["values"]["failure_apis"] == ["travel.search_flights"]
    rates = snap["values"]["failure_rates"]
    # the untrained checkpoint failed every gold call of the task: four tools, each 1 of 1
    assert rates["student"] == {
        f"travel.{t}": [1, 1] for t in ("find_user", "search_flights", "get_user", "book_flight")
    }
    assert snap["counters"]["llm.student.requests"] >= len(rows)  # the local model answered
    with pytest.raises(ConfigError, match="needs"):
        run(rows, Context(ContextSpec(stage_id="hg")), checkpoint_role="student")
    with pytest.raises(ConfigError, match="checkpoint_role"):
        build_stage("hardgen", {"checkpoint_role": "judge"})
