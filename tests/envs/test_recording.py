"""Record/replay: a trajectory re-executes identically from recorded tool results, branches
included; real tau-bench logs become replayable environments; the schema verifier finds the
logged calls valid.

Run: PYTHONPATH=. python -m pytest tests/envs/test_recording.py -q
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from trajsynth.core.schema import Message, ToolCall, Trajectory
from trajsynth.envs import EnvFactory, Recorder, ReplayEnvironment, example_tasks, import_tools
from trajsynth.envs.recording import paired_replies
from trajsynth.envs.verifiers.schema import check_call


def _messages(raw: list[dict]) -> list[Message]:
    out = []
    for m in raw:
        calls = [
            ToolCall(id=c["id"], name=c["function"]["name"], arguments=c["function"]["arguments"])
            for c in m.get("tool_calls") or []
        ]
        out.append(
            Message(
                role=m["role"],
                content=m.get("content"),
                tool_calls=calls,
                tool_call_id=m.get("tool_call_id"),
                name=m.get("name"),
            )
        )
    return out


def test_record_then_replay_is_identical(tmp_path: Path) -> None:
    records = tmp_path / "records.jsonl"
    rec_factory = EnvFactory({"recording": "record", "records": str(records)})
    traces = {}
    for task in example_tasks("travel") + example_tasks("files"):
        env = rec_factory.make(task.domain)
        env.reset(task.ground_truth)
        trace = []
        for c in task.ground_truth.flat_calls():
            r = env.call(c.name, c.arguments)
            trace.append((r.payload(), env.state_hash()))
        traces[task.task_id] = (task, trace)
    # a branch: restore a mid-episode snapshot and take another path
    task = example_tasks("travel")[2]
    env = rec_factory.make("travel")
    env.reset(task.ground_truth)
    snap = env.snapshot()
    branch = env.call(
        "book_flight", user_id="mia_chen", flight_id="SW101", payment_id="card_mc_4421"
    )
    branch_hash = env.state_hash()
    env.restore(snap)
    rec_factory.close()
    assert records.exists() and len(records.read_text().splitlines()) > 20

    replay_factory = EnvFactory({"recording": "replay", "records": str(records)})
    for task, trace in traces.values():
        env = replay_factory.make(task.domain)
        assert isinstance(env, ReplayEnvironment)
        env.reset(task.ground_truth)
        for c, (payload, h) in zip(task.ground_truth.flat_calls(), trace, strict=True):
            r = env.call(c.name, c.arguments)
            assert (r.payload(), env.state_hash()) == (payload, h), task.task_id
        assert env.state_hash() == task.ground_truth.final_state_hash
    env = replay_factory.make("travel")
    env.reset(example_tasks("travel")[2].ground_truth)
    snap = env.snapshot()
    r = env.call("book_flight", user_id="mia_chen", flight_id="SW101", payment_id="card_mc_4421")
    assert r.payload() == branch.payload() and env.state_hash() == branch_hash
    env.restore(snap)
    # a call nobody recorded is an error observation, and changes nothing
    before = env.state_hash()
    r = env.call("get_flight", flight_id="AT510")
    assert r.category == "not_recorded" and env.state_hash() == before


def test_tau_bench_logs_replay_their_tool_results(external_dir: Path) -> None:
    tools = import_tools(external_dir / "tau-bench/airline/tools_openai.json", "openai")
    runs = json.loads(
        (external_dir / "tau-bench/historical_trajectories/gpt-4o-airline.json").read_text()
    )
    recorder = Recorder()
    trajectories = []
    for i, run in enumerate(runs):
        traj = Trajectory(
            id=f"tau-{i}",
            task_id=str(run["task_id"]),
            domain="tau_airline",
            tools=tools.to_openai(),
            messages=_messages(run["traj"]),
        )
        recorder.add_trajectory(traj)
        trajectories.append(traj)
    calls = [c for t in trajectories for c in t.calls()]
    assert len(calls) == 1164  # FORMATS.md §1.2
    # every logged call is valid against the imported tools (FORMATS.md: checked)
    assert [check_call(c, tools) for c in calls] == [[]] * 1164
    # each run replays: the same calls get the logged tool replies back
    for traj in trajectories[:60]:
        env = ReplayEnvironment("tau_airline", tools, recorder)
        for c, logged in paired_replies(traj.messages):
            r = env.execute(c)
            with contextlib.suppress(json.JSONDecodeError):
                logged = json.loads(logged or "")
            assert r.ok and r.output == logged
    env = ReplayEnvironment("tau_airline", tools, recorder)
    r = env.call("get_user_details", user_id="nobody_000")
    assert r.category == "not_recorded"


def test_recorder_rejects_corrupt_files(tmp_path: Path) -> None:
    from trajsynth.core.errors import DataError

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"kind": "call"}\n')
    with pytest.raises(DataError, match=r"bad\.jsonl:1"):
        Recorder(bad)


def test_imported_toolset_is_a_replay_domain(tmp_path: Path, external_dir: Path) -> None:
    ts = import_tools(external_dir / "tau-bench/retail/tools_openai.json", "openai")
    path = ts.save(tmp_path / "retail.json")
    f = EnvFactory({"toolsets": {"tau_retail": {"file": str(path), "backend": "replay"}}})
    assert "tau_retail" in f.domains()
    assert f.toolset("tau_retail").names() == ts.names()
    env = f.make("tau_retail")
    assert env.call("get_order_details", order_id="#W0000000").category == "not_recorded"
