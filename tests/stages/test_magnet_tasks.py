"""``magnet_tasks`` (METHODS.md §10, Magnet row): every synthesized task's gold calls execute
and validate; Merge at p = 1 gives multi-call turns; Split turns expect a clarification and no
call; requests carry the user's values and never name a function; dropped candidates are
counted with their reason; a resumed source makes the same rows.

Run: PYTHONPATH=. python -m pytest tests/stages/test_magnet_tasks.py -q
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import pytest

from trajsynth.core import CAPABILITIES, GroundTruth, to_records
from trajsynth.core.errors import ConfigError
from trajsynth.core.surface import find
from trajsynth.envs import EnvFactory, import_tools
from trajsynth.envs.verifiers import check_call
from trajsynth.graph import FSP
from trajsynth.llm.base import ChatRequest
from trajsynth.llm.scripted import use_scripted
from trajsynth.llm.sim.phrasing import quotes_description
from trajsynth.stages import Context, ContextSpec, build_stage
from trajsynth.stages.common.queries import must_state, reject_query

FACTORY = EnvFactory()
BASE = {"graph": {"similarity": "lexical"}}


def synthesize(ctx: Context | None = None, offset: int = 0, **cfg: Any):
    stage = build_stage("magnet_tasks", {**BASE, **cfg})
    ctx = ctx or Context(ContextSpec(stage_id="tasks", seed=0))
    rows = [r for b in stage.generate(ctx, offset) for r in to_records(b)]
    return rows, ctx


@pytest.fixture(scope="module")
def made():
    return synthesize(tasks_per_domain=6, split_p=0.5)


def test_every_task_executes_and_validates(made) -> None:
    rows, ctx = made
    assert len(rows) == 30
    assert {r.domain for r in rows} == {"travel", "files", "messaging", "commerce", "math"}
    for r in rows:
        gt = GroundTruth.from_json(r.ground_truth)
        env = FACTORY.make(r.domain, seed=gt.env_seed)
        env.reset(gt)
        for c in gt.flat_calls():
            assert check_call({"name": c.name, "arguments": c.arguments}, r.tools) == []
            result = env.call(c.name, c.arguments)
            assert result.ok, (r.id, c.name, result.error)
            assert result.output == c.output  # the recorded output is what runs
        assert env.state_hash() == gt.final_state_hash
        # bindings: each threaded value is the earlier output's value at that path
        flat = gt.flat_calls()
        for b in gt.extra["bindings"]:
            value: Any = flat[b["from_call"]].output
            for key, idx in re.findall(r"([A-Za-z_]\w*)|\[(\d+)\]", b["path"]):
                value = value[key] if key else value[int(idx)]
            assert flat[b["call"]].arguments[b["param"]] == value
    counters = ctx.metrics.snapshot()["counters"]
    dropped = sum(v for k, v in counters.items() if k.startswith("dropped."))
    assert counters["tasks"] == 30
    assert counters["candidates"] == counters["tasks"] + dropped + counters.get("unused", 0)


def test_row_contract(made) -> None:
    rows, _ = made
    for r in rows:
        gt = GroundTruth.from_json(r.ground_truth)
        assert [m.role for m in r.messages] == ["system", "user"]
        assert r.messages[1].content == gt.turns[0].request == r.goal
        assert r.method == "magnet_tasks" and r.num_turns == 0
        assert set(r.capabilities) <= set(CAPABILITIES) and r.capabilities
        withheld = gt.extra["withheld_tools"]
        names = {t["function"]["name"] for t in r.tools}
        assert not set(withheld) & names
        assert len(names) + len(withheld) == len(FACTORY.toolset(r.domain))
        n = len(gt.flat_calls())
        assert ("single_call" in r.capabilities) == (n == 1)
        assert ("dependent_calls" in r.capabilities) == bool(gt.extra["bindings"])
    assert len({r.id for r in rows}) == len(rows)


def test_split_turns_expect_a_clarification_and_no_call(made) -> None:
    rows, _ = made
    param = func = 0
    for r in rows:
        gt = GroundTruth.from_json(r.ground_truth)
        for t, turn in enumerate(gt.turns):
            if turn.kind != "clarify":
                continue
            assert turn.answer and turn.clarification
            op = next(o for o in gt.extra["operations"] if o.startswith("split:"))
            if op.startswith("split:param"):
                param += 1
                assert "needs_clarification" in r.capabilities
                missing = gt.extra["fsp"]["turns"][t]["detail"]
                value = turn.steps[0][0].arguments[missing]
                assert turn.answer.endswith("?")  # the right first move is a question
                assert str(value) in turn.clarification  # the follow-up supplies the value
                if isinstance(value, str) and len(value) > 3:
                    assert value not in turn.request
            else:
                func += 1
                assert turn.steps == []  # no call is right
                assert "no_tool_needed" in r.capabilities
                assert gt.extra["withheld_tools"]
    assert param and func


def test_requests_carry_values_and_never_name_functions(made) -> None:
    rows, _ = made
    for r in rows:
        gt = GroundTruth.from_json(r.ground_truth)
        names = [t.name for t in FACTORY.toolset(r.domain)]
        for turn in gt.turns:
            assert reject_query(turn.request, names, {}) is None, turn.request
    assert reject_query("Please call book_flight now", ["book_flight"], {}) == "names_function"
    assert reject_query("Book it", [], {"f.x": "SW101"}) == "missing_value"
    assert reject_query("Book SW101 for 2", [], {"f.x": "SW101", "f.n": 2.0}) is None
    # a value in a form that maps back to it alone is stated; digits inside another are not
    assert (
        reject_query("Fly on March 5, 2024, two seats", [], {"f.d": "2024-03-05", "f.n": 2}) is None
    )
    assert reject_query("Fly on 2026-05-01", [], {"f.n": 2}) == "missing_value"
    assert reject_query("Order #W1053", [], {"f.n": 5}) == "missing_value"


def test_requests_on_imported_tools_never_quote_and_state_every_value(
    external_dir, tmp_path
) -> None:
    """Tools nobody here wrote (tau-bench's, imported): no request repeats six words of a
    tool's description or names a function, and each states every value the user must give.
    A phrasing that names one is passed over for the writer's next (tau's ``think`` tool
    came out "Check the think." once): the stage counts it, the request never shows it."""
    path = import_tools(external_dir / "tau-bench", "tau").save(tmp_path / "tau.json")
    env = {"domains": [], "toolsets": {"tau": str(path)}}
    stage = build_stage(
        "magnet_tasks", {**BASE, "tasks_per_domain": 8, "max_candidates": 80, "distractors": 6}
    )
    ctx = Context(ContextSpec(stage_id="tasks", seed=0, env=env))
    rows = [r for b in stage.generate(ctx, 0) for r in to_records(b)]
    assert len(rows) == 8
    values = 0
    for r in rows:
        gt = GroundTruth.from_json(r.ground_truth)
        descriptions = [t["function"]["description"] for t in r.tools]
        names = [t["function"]["name"] for t in r.tools]
        for turn in gt.turns:
            assert not quotes_description(turn.request, descriptions), turn.request
            assert reject_query(turn.request, names, {}) is None, turn.request
        for t, k, v in must_state(gt):
            assert find(v, gt.turns[t].request, k) is not None, (gt.turns[t].request, k, v)
            values += 1
    assert values >= 8
    counters = ctx.metrics.snapshot()["counters"]
    rejected = {k: n for k, n in counters.items() if k.startswith("rejected_query.")}
    assert set(rejected) <= {"rejected_query.names_function"} and sum(rejected.values()) <= 2


def test_merge_p1_gives_multi_call_turns_and_p0_single() -> None:
    rows, _ = synthesize(tasks_per_domain=3, domains=["travel", "commerce"], merge_p=1.0)
    multi = [
        t
        for r in rows
        for t in GroundTruth.from_json(r.ground_truth).turns
        if sum(map(len, t.steps)) > 1
    ]
    assert multi
    single, _ = synthesize(
        tasks_per_domain=3, domains=["travel"], merge_p=0.0, insert_p=0.0, split_p=0.0,
        magnify_p=0.0,
    )  # fmt: skip
    for r in single:
        for t in GroundTruth.from_json(r.ground_truth).turns:
            assert sum(map(len, t.steps)) == 1


def test_dropped_candidates_are_counted_with_their_reason() -> None:
    rows, ctx = synthesize(tasks_per_domain=4, domains=["files"], attempts=1, max_candidates=30)
    c = ctx.metrics.snapshot()["counters"]
    reasons = {k: v for k, v in c.items() if k.startswith("dropped.")}
    assert reasons and set(reasons) <= {
        "dropped.call_failed",
        "dropped.no_value",
        "dropped.no_path",
        "dropped.query_writer_failed",
        "dropped.no_valid_query",
    }
    assert c["candidates"] == c["tasks"] + sum(reasons.values()) + c.get("unused", 0)
    assert c["tasks"] == len(rows) <= 4
    assert reasons.get("dropped.call_failed", 0) > 0  # one draw per call: many fail


def test_query_writer_rejections_and_failures_drop_the_task() -> None:
    ctx = Context(ContextSpec(stage_id="tasks", seed=0))
    seen: list[ChatRequest] = []

    def writer(req: ChatRequest) -> str:
        seen.append(req)
        steps = req.metadata["steps"]
        name = steps[0][0]["name"]
        return json.dumps({"queries": [f"Use {name} please", "Do the thing"]})

    use_scripted(ctx, "query_writer", writer)
    rows, ctx = synthesize(ctx, tasks_per_domain=2, domains=["math"], max_candidates=6)
    c = ctx.metrics.snapshot()["counters"]
    assert rows == [] or all("Do the thing" in r.goal for r in rows)
    assert c.get("rejected_query.names_function", 0) >= 1
    # the second phrasing carries no value: every task with user values is dropped for it
    assert c.get("rejected_query.missing_value", 0) >= 1
    assert c["candidates"] == c["tasks"] + sum(
        v for k, v in c.items() if k.startswith("dropped.")
    ) + c.get("unused", 0)
    assert seen and "never name a function" in seen[0].messages[0]["content"]
    assert "The user states:" in seen[0].messages[1]["content"]


def test_same_rows_from_an_offset_and_seeded() -> None:
    rows, _ = synthesize(tasks_per_domain=3, domains=["travel", "math"])
    tail, _ = synthesize(offset=2, tasks_per_domain=3, domains=["travel", "math"])
    assert [r.id for r in tail] == [r.id for r in rows[2:]]
    assert [r.ground_truth for r in tail] == [r.ground_truth for r in rows[2:]]
    other, _ = synthesize(
        Context(ContextSpec(stage_id="tasks", seed=1)),
        tasks_per_domain=3,
        domains=["travel", "math"],
    )
    assert [r.id for r in other] != [r.id for r in rows]


def test_llm_edge_check_and_graph_stats() -> None:
    rows, ctx = synthesize(tasks_per_domain=2, domains=["travel"], edge_check=True)
    values = ctx.metrics.snapshot()["values"]
    stats = values["graph.travel"]
    assert stats["judged"]["asked"] >= 40 and stats["dependent_pairs"] >= 30
    assert rows


def test_fan_out_repeats_a_call_with_other_values_in_one_turn() -> None:
    rows, _ = synthesize(
        tasks_per_domain=4, walk_steps=1, parallel_p=1.0, parallel_copies=2, split_p=0.0,
        magnify_p=0.0, connect_p=0.0, insert_p=0.0,
    )  # fmt: skip
    assert len(rows) == 20
    fanned = 0
    for r in rows:
        gt = GroundTruth.from_json(r.ground_truth)
        step = gt.turns[0].steps[0]
        if len(step) < 2:
            continue
        fanned += 1
        assert "parallel_calls" in r.capabilities
        assert len({c.name for c in step}) == 1  # one function, asked several times...
        args = [json.dumps(c.arguments, sort_keys=True) for c in step]
        assert len(set(args)) == len(args)  # ...with other values each time
        assert "fan_out:1" in gt.extra["operations"]
    assert fanned >= 15  # a tool whose values cannot differ drops out, the rest fan out


def test_fan_out_with_vary_keeps_all_values_but_one_or_two() -> None:
    """BFCL's parallel questions ask again with one or two values changed ("the same for
    Rome"): with ``parallel_vary`` 2 a replica of a call that states several values keeps
    all but one or two of them (every value drawn anew without it)."""
    common = dict(
        tasks_per_domain=6, walk_steps=1, parallel_p=1.0, parallel_copies=2, split_p=0.0,
        magnify_p=0.0, connect_p=0.0, insert_p=0.0,
    )  # fmt: skip

    def changed(rows: list) -> Counter[int]:
        out: Counter[int] = Counter()
        for r in rows:
            step = GroundTruth.from_json(r.ground_truth).turns[0].steps[0]
            first = step[0].arguments
            if len(step) < 2 or len(first) < 3:
                continue
            for c in step[1:]:
                keys = set(first) | set(c.arguments)
                out[sum(first.get(k) != c.arguments.get(k) for k in keys)] += 1
        return out

    kept = changed(synthesize(parallel_vary=2, **common)[0])
    drawn = changed(synthesize(**common)[0])
    assert sum(kept.values()) >= 8 and 0 not in kept
    assert (kept[1] + kept[2]) / sum(kept.values()) > 0.8  # all but one or two kept
    assert (drawn[1] + drawn[2]) / sum(drawn.values()) < 0.5  # anew: most values differ


def test_bundle_asks_for_two_unrelated_things_in_one_turn() -> None:
    rows, _ = synthesize(
        tasks_per_domain=4, walk_steps=2, bundle_p=1.0, split_p=0.0, magnify_p=0.0,
        connect_p=0.0, insert_p=0.0, distractors=(0, 2),
    )  # fmt: skip
    assert len(rows) == 20
    bundled = 0
    for r in rows:
        gt = GroundTruth.from_json(r.ground_truth)
        if "bundle:1" not in gt.extra["operations"]:
            continue
        bundled += 1
        fsp = FSP.from_json(gt.extra["fsp"])
        at = next(i for i, t in enumerate(fsp.turns) if t.calls[0].independent)
        step = gt.turns[at].steps[0]
        # its turn's first step calls the independent function beside another one...
        assert len({c.name for c in step}) >= 2 and step[0].name == fsp.turns[at].calls[0].tool
        assert "parallel_calls" in r.capabilities
        # ...and both are offered (never taken for distractors or withheld)
        assert {c.name for c in step} <= {t["function"]["name"] for t in r.tools}
        env = FACTORY.make(r.domain, seed=gt.env_seed)
        env.reset(gt)
        for c in gt.flat_calls():
            assert env.call(c.name, c.arguments).ok
        assert env.state_hash() == gt.final_state_hash
    assert bundled >= 15


def test_bundle_max_asks_for_up_to_four_functions_in_one_step() -> None:
    rows, _ = synthesize(
        tasks_per_domain=4, walk_steps=1, bundle_p=1.0, bundle_max=3, max_calls=4, split_p=0.0,
        magnify_p=0.0, connect_p=0.0, insert_p=0.0, distractors=(0, 1),
    )  # fmt: skip
    widths: Counter[int] = Counter()
    for r in rows:
        gt = GroundTruth.from_json(r.ground_truth)
        step = gt.turns[0].steps[0]
        names = [c.name for c in step]
        widths[len(set(names))] += 1
        assert len(set(names)) == len(names) <= 4  # each another function, never past max_calls
        assert set(names) <= {t["function"]["name"] for t in r.tools}
        assert gt.extra["operations"].count("bundle:1") == len(names) - 1
    assert widths[2] and widths[3] and widths[4]  # one to three requests beside the first


def test_bundle_share_gives_another_function_the_same_values() -> None:
    """``bundle_share``: the added function takes the first call's values where its
    parameters are named alike, and nothing the first call was not given ("store tax_rate
    ... and recall tax_rate"); the calls still run as recorded."""
    rows, _ = synthesize(
        tasks_per_domain=8, walk_steps=1, bundle_p=1.0, bundle_share=1.0, split_p=0.0,
        magnify_p=0.0, connect_p=0.0, insert_p=0.0, distractors=(0, 1),
    )  # fmt: skip
    shared = same = 0
    for r in rows:
        gt = GroundTruth.from_json(r.ground_truth)
        if "bundle:share" not in gt.extra["operations"]:
            continue
        shared += 1
        first, other = gt.turns[0].steps[0][:2]
        assert first.name != other.name and FSP.from_json(gt.extra["fsp"]).calls()[1].shares == 0
        same += other.arguments.items() <= first.arguments.items()
        env = FACTORY.make(r.domain, seed=gt.env_seed)
        env.reset(gt)
        for c in gt.flat_calls():
            assert env.call(c.name, c.arguments).output == c.output
        assert env.state_hash() == gt.final_state_hash
    assert shared >= 8 and same / shared >= 0.8


def test_irrelevant_tasks_offer_no_tool_that_fits() -> None:
    rows, _ = synthesize(tasks_per_domain=3, irrelevant_p=1.0, distractors=(2, 4))
    assert len(rows) == 15
    for r in rows:
        gt = GroundTruth.from_json(r.ground_truth)
        assert r.capabilities == ["no_tool_needed"] and gt.flat_calls() == []
        (turn,) = gt.turns
        assert turn.kind == "clarify" and not turn.steps and turn.answer
        (withheld,) = gt.extra["withheld_tools"]
        offered = {t["function"]["name"] for t in r.tools}
        # as many offered as a task that needs one function: 1 + distractors (the math
        # domain's 10 tools cap none of these)
        assert withheld not in offered and 3 <= len(offered) <= 5
        assert r.goal and withheld not in r.goal
    # with no distractors an irrelevance task still offers one function, as a one-call task does
    rows, _ = synthesize(tasks_per_domain=2, irrelevant_p=1.0, distractors=0)
    assert rows and all(len(r.tools) == 1 for r in rows)


def test_distractors_drawn_from_a_range() -> None:
    rows, _ = synthesize(tasks_per_domain=6, distractors=(0, 3), split_p=0.0)
    extra = set()
    for r in rows:
        gt = GroundTruth.from_json(r.ground_truth)
        needed = {c.name for c in gt.flat_calls()}
        offered = {t["function"]["name"] for t in r.tools}
        assert needed <= offered
        extra.add(len(offered - needed))
    assert extra <= {0, 1, 2, 3} and len(extra) >= 3


def test_tasks_per_tool_gives_large_domains_more_tasks() -> None:
    rows, _ = synthesize(domains=["math", "messaging"], tasks_per_domain=2, tasks_per_tool=0.4)
    sizes = {d: len(FACTORY.toolset(d)) for d in ("math", "messaging")}
    made = {d: sum(r.domain == d for r in rows) for d in sizes}
    assert made == {d: max(2, round(0.4 * n)) for d, n in sizes.items()}
    assert (
        build_stage("magnet_tasks", {"tasks_per_tool": 0.4, "domains": ["math"]}).expected_rows()
        is None
    )


def test_ask_p_leaves_a_required_value_out_of_the_first_request() -> None:
    """``ask_p``: where no Split was drawn, the first turn misses a value the user must give;
    its right first answer asks (no call), the clarification gives the value, the calls
    follow. Without it (the default) no first turn is split that way."""
    rows, _ = synthesize(tasks_per_domain=4, split_p=0.0, ask_p=1.0)
    assert len(rows) == 20
    asked = stated = 0
    for r in rows:
        gt = GroundTruth.from_json(r.ground_truth)
        first = gt.turns[0]
        if "split:param:0" not in gt.extra["operations"]:
            continue  # every required value of the first call comes from an earlier call
        asked += 1
        assert first.kind == "clarify" and first.steps and first.clarification
        # the clarification gives a value the first call passes, one the request left out
        # (words and ids; a short number may occur in the request for another reason)
        given = [
            v
            for v in first.steps[0][0].arguments.values()
            if isinstance(v, str) and len(v) >= 4 and v in first.clarification
        ]
        assert r.goal == first.request and not any(v in r.goal for v in given)
        stated += bool(given)
    assert asked >= 16 and stated >= asked // 2
    plain, _ = synthesize(tasks_per_domain=4, split_p=0.0)
    assert not any(
        "split:param:0" in GroundTruth.from_json(r.ground_truth).extra["operations"] for r in plain
    )


def test_env_seeds_spread_tasks_over_starting_states_and_each_replays(
    external_dir, tmp_path
) -> None:
    """Tools without an implementation (tau-bench's, imported, simulated) start an episode
    with three entities of each kind: with one seed, those few ids recur in every task (an
    order id in 30 of 1,500 training calls). ``env_seeds: N`` is seeds 0..N-1, and each task
    replays on the seed it records."""
    path = import_tools(external_dir / "tau-bench", "tau").save(tmp_path / "tau.json")
    env = {"domains": [], "toolsets": {"tau": str(path)}}

    def made(seeds: Any) -> list[Any]:
        stage = build_stage(
            "magnet_tasks",
            {**BASE, "tasks_per_domain": 16, "max_candidates": 120, "env_seeds": seeds},
        )
        ctx = Context(ContextSpec(stage_id="tasks", seed=0, env=env))
        return [r for b in stage.generate(ctx, 0) for r in to_records(b)]

    def id_values(rows: list[Any]) -> list[str]:
        return [
            str(v)
            for r in rows
            for c in GroundTruth.from_json(r.ground_truth).flat_calls()
            for k, v in c.arguments.items()
            if k.endswith("_id") and isinstance(v, str)
        ]

    one, many = made([0]), made(16)
    seeds = Counter(GroundTruth.from_json(r.ground_truth).env_seed for r in many)
    assert len(seeds) >= 6 and set(seeds) <= set(range(16))
    ids_one, ids_many = id_values(one), id_values(many)
    assert len(ids_one) >= 8 and len(ids_many) >= 8
    # distinct ids per id passed: most repeat with one seed, few with sixteen
    assert len(set(ids_many)) / len(ids_many) > 1.5 * len(set(ids_one)) / len(ids_one)
    factory = EnvFactory(env)
    for r in many:
        gt = GroundTruth.from_json(r.ground_truth)
        replay = factory.make(r.domain, seed=gt.env_seed)
        replay.reset(gt)
        for c in gt.flat_calls():
            assert replay.call(c.name, c.arguments).output == c.output
        assert replay.state_hash() == gt.final_state_hash
    with pytest.raises(ConfigError, match="env_seeds: a count"):
        build_stage("magnet_tasks", {**BASE, "env_seeds": 0})
    with pytest.raises(ConfigError, match="env_seeds"):
        build_stage("magnet_tasks", {**BASE, "env_seeds": []})
