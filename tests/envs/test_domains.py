"""Built-in domains: tools and response schemas, example tasks execute, failure modes, data flow,
and every tool keeps the state's no-mutation rule.

Run: PYTHONPATH=. python -m pytest tests/envs/test_domains.py -q
"""

from __future__ import annotations

import json
import random
from collections import Counter

import jsonschema
import pytest

from trajsynth.core.ids import canonical_json
from trajsynth.core.schema import CAPABILITIES
from trajsynth.envs import BUILTIN_DOMAINS, EnvFactory, example_tasks, get_domain
from trajsynth.envs.verifiers.schema import check_arguments

DOMAINS = sorted(BUILTIN_DOMAINS)
TAGS = set(CAPABILITIES) - {"multi_call"}


def test_at_least_four_domains_and_forty_tools() -> None:
    assert len(DOMAINS) >= 4
    assert sum(len(d.tools) for d in BUILTIN_DOMAINS.values()) >= 40
    names = [t.name for d in BUILTIN_DOMAINS.values() for t in d.tools]
    assert len(names) == len(set(names))  # unique across domains too


@pytest.mark.parametrize("domain", DOMAINS)
def test_every_tool_has_a_typed_described_response_schema(domain: str) -> None:
    ts = get_domain(domain).toolset()
    kinds = Counter()
    for spec in ts.tools:
        assert spec.description, spec.name
        assert spec.problems() == [], spec.name
        jsonschema.Draft202012Validator.check_schema(spec.response)
        fields = spec.response_fields()
        assert fields, f"{spec.name}: response must be an object with fields"
        for fname, fschema in fields.items():
            assert fschema.get("description"), f"{spec.name}.{fname} has no description"
            assert "type" in fschema or "anyOf" in fschema, f"{spec.name}.{fname} has no type"
        for pname, pschema in spec.properties().items():
            assert pschema.get("description"), f"{spec.name}({pname}) has no description"
            kinds[pschema.get("type") if isinstance(pschema.get("type"), str) else "mixed"] += 1
            kinds["enum"] += "enum" in pschema
            kinds["optional"] += pname not in spec.required()
    # (b) optional parameters with defaults, enums, and varied types
    assert kinds["optional"] >= 4 and kinds["enum"] >= 1, kinds


def test_parameter_types_across_domains() -> None:
    kinds = Counter(
        p.get("type") if isinstance(p.get("type"), str) else "nullable"
        for d in BUILTIN_DOMAINS.values()
        for t in d.tools
        for p in t.spec.properties().values()
    )
    assert {"string", "integer", "number", "boolean", "array"} <= set(kinds)


def test_example_tasks_cover_every_capability_tag() -> None:
    tasks = example_tasks()
    assert len(tasks) >= 5 * len(DOMAINS)
    assert {c for t in tasks for c in t.capabilities} >= TAGS
    for domain in DOMAINS:  # each domain alone covers them too
        assert {c for t in example_tasks(domain) for c in t.capabilities} >= TAGS, domain


@pytest.mark.parametrize("domain", DOMAINS)
def test_example_tasks_execute(domain: str) -> None:
    factory = EnvFactory()
    tools = factory.toolset(domain)
    specs = {t.name: t for t in get_domain(domain).tools}
    for task in example_tasks(domain):
        gt = task.ground_truth
        expected_errors = set(gt.extra["expected_errors"])
        # the gold calls replay to the same outputs and the same final state, any number of times
        env = factory.make(domain)
        env.reset(gt)
        for i, call in enumerate(gt.flat_calls()):
            assert check_arguments(tools[call.name], call.arguments) == [], (task.task_id, i)
            result = env.call(call.name, call.arguments)
            assert result.payload() == call.output, (task.task_id, i)
            assert result.ok == (i not in expected_errors), (task.task_id, i, result.error)
            if result.ok:  # outputs conform to the published response schema
                jsonschema.validate(result.output, specs[call.name].spec.response)
        assert env.state_hash() == gt.final_state_hash, task.task_id
        # tags agree with the ground truth's shape
        caps = set(task.capabilities)
        n_calls = len(gt.flat_calls())
        if "single_call" in caps:
            assert n_calls == 1
        if "long_horizon" in caps:
            assert n_calls >= 5
        if "parallel_calls" in caps:
            assert any(len(step) > 1 for t in gt.turns for step in t.steps)
        if "dependent_calls" in caps:
            assert gt.extra["bindings"], task.task_id
        if "error_recovery" in caps:
            assert expected_errors
        if "no_tool_needed" in caps:
            assert n_calls == 0 and gt.turns[0].kind == "no_tool" and gt.turns[0].answer
        if "needs_clarification" in caps:
            assert any(t.kind == "clarify" and t.clarification for t in gt.turns)
        if "optional_params" in caps:
            assert any(set(c.arguments) - set(tools[c.name].required()) for c in gt.flat_calls()), (
                task.task_id
            )
        row = task.to_trajectory(tools)
        assert row.domain == domain and row.tools == tools.to_openai()


def test_ids_flow_between_tools() -> None:
    """Data flow for the function-signature graph: outputs feed later inputs in the examples,
    and the parameter and field names agree (flight_id → flight_id, user_id → user_id...)."""
    bindings = [(t, b) for t in example_tasks() for b in t.ground_truth.extra["bindings"]]
    assert len(bindings) >= 30
    calls = {t.task_id: t.ground_truth.flat_calls() for t in example_tasks()}
    same_name = 0
    for task, b in bindings:
        leaf = b["path"].split(".")[-1].split("[")[0]
        same_name += leaf == b["param"] or (leaf.endswith("_id") and b["param"].endswith("ids"))
        assert calls[task.task_id][b["from_call"]].output is not None
    assert same_name >= 20


def test_failure_modes_are_realistic() -> None:
    f = EnvFactory()
    travel = f.make("travel")
    r = travel.call("book_flight", user_id="mia_chen", flight_id="BJ404", payment_id="card_mc_4421")
    assert r.category == "unavailable" and "sold out" in r.error["message"]
    r = travel.call("get_flight", flight_id="XX000")
    assert r.category == "not_found"
    r = travel.call("book_flight", user_id="mia_chen", flight_id="SW102", payment_id="gift_mc_01")
    assert r.category == "limit_exceeded"  # 305 > 150 on the gift card
    r = travel.call("book_flight", user_id="mia_chen", flight_id="SW050", payment_id="card_mc_4421")
    assert r.category == "invalid_value"  # departed before "today"
    files = f.make("files")
    assert files.call("read_file", path="/nope.txt").category == "not_found"
    assert files.call("delete_path", path="/home/user/docs").category == "conflict"
    assert files.call("read_file", path="/home/user/docs").category == "invalid_value"
    msg = f.make("messaging")
    r = msg.call("create_event", title="x", date="2025-06-17", start_time="10:15")
    assert r.category == "conflict"
    assert msg.call("find_free_slot", date="2025-06-18", duration_minutes=480,
                    attendee_ids=["c_dana"]).category == "unavailable"  # fmt: skip
    shop = f.make("commerce")
    r = shop.call("return_items", order_id="#W1002", item_ids=["I-2001"], payment_id="pm_sara_card")
    assert r.category == "conflict"  # pending, not delivered
    r = shop.call("exchange_items", order_id="#W1001", item_ids=["I-1002"],
                  new_item_ids=["I-1003"], payment_id="pm_sara_card")  # fmt: skip
    assert r.category == "unavailable"  # out of stock variant
    math = f.make("math")
    assert math.call("calculate", expression="1/0").category == "invalid_value"
    assert math.call("calculate", expression="__import__('os')").category == "invalid_value"
    assert math.call("convert_units", value=1, from_unit="kg", to_unit="m").category == (
        "invalid_value"
    )
    # every one of those refusals left the state untouched
    for env, domain in ((travel, "travel"), (files, "files"), (shop, "commerce")):
        assert env.state_hash() == f.make(domain).state_hash()


def test_seeds_change_bulk_data_but_not_the_core() -> None:
    a, b = get_domain("travel").make(seed=0), get_domain("travel").make(seed=1)
    assert a.state_hash() != b.state_hash()
    assert (
        a.call("get_flight", flight_id="SW101").output
        == b.call("get_flight", flight_id="SW101").output
    )
    again = get_domain("travel").make(seed=1)
    assert again.state_hash() == b.state_hash()  # deterministic given the seed


@pytest.mark.parametrize("domain", DOMAINS)
def test_tools_never_mutate_records_in_place(domain: str) -> None:
    """Random calls (gold calls with perturbed arguments) between snapshots: every snapshot
    must still read exactly as when it was taken, and restoring it must give its hash."""
    rng = random.Random(7)
    calls = [c for t in example_tasks(domain) for c in t.ground_truth.flat_calls()]
    env = get_domain(domain).make()
    snaps = []
    for step in range(120):
        if step % 10 == 0:
            snap = env.snapshot()
            snaps.append((snap, canonical_json(env.state()), env.state_hash()))
        call = rng.choice(calls)
        args = dict(call.arguments)
        if args and rng.random() < 0.3:  # perturb one value
            k = rng.choice(sorted(args))
            args[k] = rng.choice([0, 1, "x", [], None, args[k]])
        env.call(call.name, json.loads(json.dumps(args)))
        if rng.random() < 0.15:
            back = rng.choice(snaps)
            env.restore(back[0])
    for snap, text, h in snaps:
        env.restore(snap)
        assert canonical_json(env.state()) == text
        assert env.state_hash() == h


def test_round_number_refuses_what_a_decimal_cannot_hold() -> None:
    from trajsynth.envs import EnvFactory

    env = EnvFactory().make("math", seed=0)
    env.reset()
    for value in (1e30, float("inf")):
        result = env.call("round_number", {"value": value, "digits": 5})
        assert not result.ok and result.error["type"] == "invalid_value"  # not a tool crash
    assert env.call("round_number", {"value": 2.345, "digits": 2}).output["result"] == 2.34
