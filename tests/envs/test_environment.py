"""The Environment interface: reset/step/format_observation, errors as observations,
snapshot/restore, determinism, initial-state overrides, the factory and its config.

Run: PYTHONPATH=. python -m pytest tests/envs/test_environment.py -q
"""

from __future__ import annotations

import json

import pytest

from trajsynth.core.errors import ConfigError
from trajsynth.core.schema import Message, ToolCall
from trajsynth.core.task import GoldTurn, GroundTruth
from trajsynth.envs import EnvFactory, example_tasks
from trajsynth.envs.base import parse_action
from trajsynth.stages import Context, ContextSpec


def tc(tool: str, i: int = 0, /, **args: object) -> ToolCall:
    return ToolCall(id=f"c{i}", name=tool, arguments=json.dumps(args))


def test_episode_reset_step_done() -> None:
    env = EnvFactory({"max_steps": 3}).make("math")
    gt = GroundTruth(turns=[GoldTurn(request="What is 2+3?")])
    obs = env.reset(gt)
    assert obs.text == "What is 2+3?" and obs.results == ()
    obs, done, info = env.step(
        Message(role="assistant", tool_calls=[tc("calculate", expression="2+3")])
    )
    assert not done and obs.results[0].output["result"] == 5
    assert info == {"step": 1, "state_hash": env.state_hash(), "errors": [], "truncated": False}
    msgs = obs.to_messages()
    assert msgs[0].role == "tool" and msgs[0].tool_call_id == "c0"
    assert json.loads(msgs[0].content)["result"] == 5
    obs, done, info = env.step(Message(role="assistant", content="It is 5."))
    assert done and obs.results == () and obs.text == "It is 5."


def test_parallel_calls_run_in_order_and_format() -> None:
    env = EnvFactory().make("math")
    calls = [tc("store_value", 0, name="x", value=2), tc("recall_value", 1, name="x")]
    obs, _, _ = env.step(calls)
    assert [r.ok for r in obs.results] == [True, True] and obs.results[1].output["value"] == 2.0
    text = env.format_observation(obs)
    assert text.splitlines()[0].startswith("[store_value] {") and "[recall_value]" in text
    assert env.format_observation(obs.results[1]) == '{"name": "x", "value": 2.0}'


def test_errors_are_observations_with_categories() -> None:
    env = EnvFactory().make("travel")
    before = env.state_hash()
    obs, done, info = env.step(
        [
            tc("teleport", 0),
            ToolCall(id="c1", name="get_flight", arguments="{not json"),
            tc("get_flight", 2),
            tc("search_flights", 3, origin="SFO", destination="JFK", date="2025-07-01",
               cabin="first"),
            tc("get_flight", 4, flight_id=7),
            tc("get_flight", 5, flight_id="SW101", seat="12A"),
            tc("book_flight", 6, user_id="mia_chen", flight_id="SW101",
               payment_id="card_mc_4421", passengers=12),
            tc("get_flight", 7, flight_id="ZZ999"),
        ]
    )  # fmt: skip
    assert info["errors"] == [
        "unknown_tool",
        "malformed_arguments",
        "missing_required",
        "enum_violation",
        "wrong_type",
        "extra_parameter",
        "constraint_violation",
        "not_found",
    ]
    assert not done and env.state_hash() == before
    assert json.loads(obs.results[0].content()) == {
        "error": {"type": "unknown_tool", "message": "unknown tool 'teleport'"}
    }


def test_max_steps_truncates() -> None:
    env = EnvFactory({"max_steps": 2}).make("math")
    _, done, info = env.step([tc("list_values")])
    assert not done and not info["truncated"]
    _, done, info = env.step([tc("list_values")])
    assert done and info["truncated"]


def test_action_forms() -> None:
    assert parse_action("bye") == ([], "bye")
    calls, text = parse_action(
        {"role": "assistant", "tool_calls": [
            {"id": "x", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]}
    )  # fmt: skip
    assert text is None and calls[0].name == "f" and json.loads(calls[0].arguments) == {"a": 1}
    assert parse_action(tc("g"))[0][0].name == "g"
    assert parse_action({"name": "h", "arguments": "{}"})[0][0].name == "h"


def test_snapshot_restore_branches() -> None:
    env = EnvFactory().make("commerce")
    snap = env.snapshot()
    r = env.call("cancel_order", order_id="#W1002", reason="no longer needed")
    assert r.ok
    after_cancel = env.state_hash()
    d = env.diff(snap)  # the card refund leaves the customer record as it was
    assert [(c.table, c.key, c.kind, c.fields) for c in d] == [
        ("orders", "#W1002", "changed", ("cancel_reason", "status"))
    ]
    env.restore(snap)
    assert env.state_hash() == snap.state.hash()
    r = env.call("cancel_order", order_id="#W1002", reason="no longer needed")
    assert r.ok and env.state_hash() == after_cancel  # same branch, same state
    env.restore(snap)
    env.call("modify_order_address", order_id="#W1002", address1="1 A St", city="SF", state="CA",
             zip="94110")  # fmt: skip
    assert env.state_hash() not in (after_cancel, snap.state.hash())
    assert env.steps == 0  # call() does not count as a step


def test_reset_applies_seed_and_initial_state() -> None:
    f = EnvFactory()
    gt = GroundTruth(
        turns=[GoldTurn(request="x")],
        env_seed=3,
        initial_state={"memory": {"pi_ish": {"name": "pi_ish", "value": 3.14}, "tax_rate": None}},
    )
    env = f.make("math")
    env.reset(gt)
    assert env.call("recall_value", name="pi_ish").output["value"] == 3.14
    assert env.call("recall_value", name="tax_rate").category == "not_found"
    assert env.state_hash() == f.make("math", seed=3, initial_state=gt.initial_state).state_hash()
    env.reset()  # back to the environment's own seed
    assert env.state_hash() == f.make("math").state_hash()


def test_writing_tools_are_atomic() -> None:
    env = EnvFactory().make("files")
    before = env.state_hash()
    # moving a folder into a missing parent fails after nothing was written
    r = env.call("move_path", source="/home/user/docs", destination="/nowhere/docs")
    assert r.category == "not_found" and env.state_hash() == before
    big = "x" * (65 * 1024)
    assert env.call("append_to_file", path="/tmp/scratch.txt", content=big).category == (
        "limit_exceeded"
    )
    assert env.state_hash() == before


def test_factory_config_and_errors() -> None:
    f = EnvFactory({"domains": ["travel", "math"]})
    assert f.domains() == ["travel", "math"]
    with pytest.raises(ConfigError, match="unknown domain 'files'"):
        f.make("files")
    with pytest.raises(ConfigError, match="max_stepz"):
        EnvFactory({"max_stepz": 3})
    with pytest.raises(ConfigError, match="unknown domain"):
        EnvFactory({"domains": ["casino"]})
    with pytest.raises(ConfigError, match="records"):
        EnvFactory({"recording": "replay"})
    assert len(f.example_tasks()) == len(example_tasks("travel")) + len(example_tasks("math"))


def test_context_envs_builds_the_factory_from_the_pipeline_env() -> None:
    ctx = Context(ContextSpec(env={"domains": ["math"], "max_steps": 5}))
    assert ctx.envs.domains() == ["math"]
    assert ctx.envs.make("math").max_steps == 5


def test_python_exec_in_a_domain() -> None:
    f = EnvFactory({"python_exec": True, "sandbox": {"pool_size": 1}})
    try:
        assert "python_exec" in f.toolset("files").names()
        env = f.make("files")
        before = env.state_hash()
        r = env.call("python_exec", code="import math\nprint(math.factorial(10))")
        assert r.ok and r.output["stdout"] == "3628800\n" and r.output["exit_code"] == 0
        r = env.call("python_exec", code="raise ValueError('boom')")
        assert r.ok and r.output["exit_code"] == 1 and "ValueError: boom" in r.output["stderr"]
        assert env.state_hash() == before
        r = env.call("python_exec", code="print(1)", timeout_s=99)
        assert r.category == "constraint_violation"
    finally:
        f.close()
