"""``steca`` (METHODS.md §10, STeCa row): on a deterministic file system, a step after which
the rollout policy cannot succeed gets Monte Carlo value 0.0 against 1.0 before it and is
flagged deviated; identical actions are never flagged; the calibrated record keeps the
deviated step in the prompt and the expert's action (with the reflection) in the chosen
part; a step that raises the value is not deviated; a broken prefix is valued 0 without
rollouts; identical branches share one request; pairs export as STeCa and DPO records.

Run: PYTHONPATH=. python -m pytest tests/stages/test_steca.py -q
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from minutes_task import FACTORY, GOAL, GOLD, OPENING, TOOLS, WRITE
from typer.testing import CliRunner

from trajsynth.cli import app
from trajsynth.core import Message, Trajectory, to_batch, to_records
from trajsynth.core.task import GoldCall, GoldTurn
from trajsynth.llm.base import ChatRequest, RawChoice
from trajsynth.llm.scripted import use_scripted
from trajsynth.quality.ndtw import action_key
from trajsynth.stages import Context, ContextSpec, Emit, build_stage
from trajsynth.stages.common.replay import calls_message, play_steps
from trajsynth.store import ShardWriter

THOUGHT = "Listing the folder did not save anything; I should write the minutes file now."


def step(name: str, **args: Any) -> Message:
    return calls_message([{"name": name, "arguments": args}], key=name)


DONE = Message(role="assistant", content="Done.")
LIST = step("list_directory", path="/home/user/docs")


def rollout(steps: list[Message], key: str, *, success: bool, total: int = 0) -> Trajectory:
    """A rollout of the task whose tool results are what the tools return."""
    env = FACTORY.make("files", seed=0)
    result, _ = asyncio.run(play_steps(GOLD, env, OPENING, steps, tools=TOOLS))
    return Trajectory(
        id=key,
        task_id="files-minutes",
        goal=GOAL,
        domain="files",
        ground_truth=GOLD.model_dump(mode="json"),
        tools=TOOLS,
        messages=result.messages,
        success=success,
        rollouts_total=total or None,
        method="rejection_sampling",
    )


def names(req: ChatRequest) -> list[str]:
    return [
        (c.get("function") or c).get("name")
        for m in req.messages
        for c in m.get("tool_calls") or []
    ]


def gives_up_after_listing(req: ChatRequest) -> RawChoice:
    """The rollout policy: writes the file and answers — unless the folder was listed, after
    which it answers at once (so a listing step makes the task fail)."""
    done = names(req)
    if "list_directory" in done or "write_file" in done:
        return RawChoice(content="Done.")
    return RawChoice(tool_calls=[{"id": "w", "name": "write_file", "arguments": json.dumps(WRITE)}])


def run(rows: list[Trajectory], ctx: Context, **cfg: Any) -> list[Trajectory]:
    stage = build_stage("steca", cfg)
    out = []
    for b in stage.process(iter([to_batch(rows)]), ctx):
        assert not isinstance(b, Emit)
        out += to_records(b)
    return out


def scripted(policy: Any) -> tuple[Context, list[ChatRequest]]:
    ctx = Context(ContextSpec(stage_id="steca"))
    backend = use_scripted(ctx, "teacher", policy)
    reflector = use_scripted(ctx, "reflector", lambda req: THOUGHT)
    return ctx, [backend.requests, reflector.requests]


def test_monte_carlo_values_find_the_deviated_step_and_calibrate_it() -> None:
    listed = rollout([LIST, DONE], "a-listed", success=False)
    same = rollout([step("write_file", **WRITE), DONE], "b-same-as-expert", success=False)
    late = rollout([step("write_file", **WRITE), LIST, DONE], "c-late", success=False)
    ctx, (mc, reflect) = scripted(gives_up_after_listing)
    out = {r.parent_ids[0]: r for r in run([listed, same, late], ctx, expert="gold")}
    c = ctx.metrics.snapshot()["counters"]
    # the rollout identical to the expert has no deviated step
    assert set(out) == {listed.id, late.id} and c["skipped.no_deviation"] == 1
    row = out[listed.id]
    st = row.extra["steca"]
    # B (listing) from the start: 1.0 before it, 0.0 after it (5 rollouts each)
    assert st["t"] == 0 and st["values"] == {"previous": 1.0, "agent": 0.0}
    assert st["samples"]["previous"] == {"siblings": 0, "fresh": 5, "exact": False}
    assert row.step_rewards == [0.0, None, None]
    assert row.step_flags == [["deviated"], ["calibrated"], []]
    assert row.success and row.method == "steca" and row.parent_ids == [listed.id]
    # built like every episode row: the environment's version and each step's state change
    # (listing changes nothing, the write does, the answer nothing)
    assert row.env_version and row.env_version == ctx.envs.version(row.domain)
    assert [bool(json.loads(d)) for d in row.step_diffs] == [False, True, False]
    # the calibrated record: the deviated step and its observation in the prompt; the
    # expert's action, with the reflection as its thought, first in the chosen part
    prompt = row.messages[: st["prompt_len"]]
    chosen = row.messages[st["prompt_len"] :]
    assert [m.role for m in prompt] == ["system", "user", "assistant", "tool"]
    assert action_key(prompt[2]) == action_key(LIST)
    assert chosen[0].tool_calls[0].name == "write_file" and chosen[0].reasoning == THOUGHT
    assert [m["content"] for m in st["rejected"]] == ["Done."]
    assert st["deviation"] == pytest.approx(1 / 5**0.5) and st["reward"] == pytest.approx(
        1 + 0.01 / 5**0.5
    )
    assert row.extra["dpo"]["prompt_len"] == st["prompt_len"]
    # the later deviation: the identical first step is never flagged
    later = out[late.id]
    assert later.extra["steca"]["t"] == 1 and later.step_flags[0] == []
    assert later.step_flags[1] == ["deviated"]
    assert later.extra["steca"]["values"] == {"previous": 1.0, "agent": 1.0}  # ≤: deviated
    # identical branches share one request: 5 rollouts from the start cost 2 requests
    # (write, answer), 5 from after the listing 1, 5 from after the write 1 (shared with
    # the prefix of the later deviation) and 5 after write + listing 1
    assert c["mc_requests"] == 5 and len(mc) == 5 and {r.n for r in mc} == {5}
    assert len(reflect) == 2 and reflect[0].metadata["expert_action"][0]["name"] == "write_file"
    assert "last step is not optimal" in reflect[0].messages[0]["content"]


def test_separate_requests_when_grouping_is_off() -> None:
    listed = rollout([LIST, DONE], "a", success=False)
    ctx, (mc, _) = scripted(gives_up_after_listing)
    out = run([listed], ctx, expert="gold", group_requests=False)
    assert out[0].extra["steca"]["values"] == {"previous": 1.0, "agent": 0.0}
    assert len(mc) == 5 * 2 + 5 and {r.n for r in mc} == {1}


def test_a_step_that_raises_the_value_is_not_deviated_and_siblings_are_samples() -> None:
    """Six siblings from the start (one success): V(t−1) = 1/6 without a rollout; after the
    agent's listing the policy always succeeds, so V_agent = 1.0 > 1/6: not deviated."""
    expert = rollout([step("write_file", **WRITE), DONE], "e", success=True, total=8)
    won = rollout([step("write_file", **WRITE), DONE], "s", success=True, total=8)
    early = [rollout([DONE], f"f{i}", success=False, total=8) for i in range(5)]
    agent = rollout(
        [LIST, step("write_file", path=WRITE["path"], content="Minutse"), DONE],
        "x-agent",
        success=False,
        total=8,
    )

    def always_writes(req: ChatRequest) -> RawChoice:
        if "write_file" in names(req):
            return RawChoice(content="Done.")
        return RawChoice(
            tool_calls=[{"id": "w", "name": "write_file", "arguments": json.dumps(WRITE)}]
        )

    ctx, (mc, reflect) = scripted(always_writes)
    out = run([expert, won, *early, agent], ctx)
    c = ctx.metrics.snapshot()["counters"]
    # the stop-early failures deviate at step 0 (a premature answer): nothing to calibrate
    assert c["skipped.answer_deviation"] == 5
    assert out == [] and c["not_deviated"] == 1 and reflect == []
    assert len(mc) == 2  # only the agent's prefix needed fresh rollouts (write, answer)


def test_a_broken_prefix_is_worth_zero_without_rollouts() -> None:
    bad = step("teleport_file", path="/tmp/x")  # not an offered tool: a format error
    agent = rollout([bad, step("write_file", **WRITE), DONE], "a", success=False)
    ctx, (mc, _) = scripted(gives_up_after_listing)
    out = run([agent], ctx, expert="gold")
    st = out[0].extra["steca"]
    assert st["values"]["agent"] == 0.0 and st["samples"]["agent"]["exact"] is True
    assert len(mc) == 2  # the 5 rollouts from the start only
    # its own format error is the deviated step's: the calibrated row verifies
    assert out[0].success and out[0].step_flags[0] == ["deviated"]


def test_pairs_export_as_steca_and_dpo_records(tmp_path: Path) -> None:
    listed = rollout([LIST, DONE], "a", success=False)
    ctx, _ = scripted(gives_up_after_listing)
    rows = run([listed], ctx, expert="gold")
    with ShardWriter(tmp_path / "steca") as w:
        w.write(to_batch(rows))
    cli = CliRunner()
    res = cli.invoke(
        app, ["export", str(tmp_path / "steca"), "--format", "steca", "--out", str(tmp_path / "o")]
    )
    assert res.exit_code == 0, res.output
    rec = json.loads((tmp_path / "o" / "steca.jsonl").read_text())
    assert set(rec) == {"id", "prompt", "chosen", "rejected", "deviation", "reward", "tools"}
    assert rec["chosen"][0]["tool_calls"][0]["function"]["name"] == "write_file"
    assert rec["chosen"][0]["reasoning_content"] == THOUGHT
    assert rec["rejected"] == [{"role": "assistant", "content": "Done."}]
    assert rec["reward"] == pytest.approx(1 + 0.01 * rec["deviation"])
    res = cli.invoke(
        app, ["export", str(tmp_path / "steca"), "--format", "dpo", "--out", str(tmp_path / "d")]
    )
    assert res.exit_code == 0, res.output
    dpo = json.loads((tmp_path / "d" / "dpo.jsonl").read_text())
    assert dpo["prompt"] == rec["prompt"] and dpo["chosen"] == rec["chosen"]


def test_simulated_rollouts_never_flag_identical_actions() -> None:
    """Rejection sampling's rollouts of example tasks: every calibrated row's steps before
    the deviated one are the expert's actions, and the deviated one differs from it."""
    tasks = [
        t.to_trajectory(FACTORY.toolset(t.domain))
        for d in ("travel", "commerce")
        for t in FACTORY.example_tasks(d)
    ]
    rs = build_stage("rejection_sampling", {"n": 6})
    ctx = Context(ContextSpec(stage_id="rs", seed=2))
    rows: list[Trajectory] = []
    for out in rs.process(iter([to_batch(tasks)]), ctx):
        rows += to_records(out.data if isinstance(out, Emit) else out)
    ctx = Context(ContextSpec(stage_id="steca", seed=2))
    out = run(rows, ctx, horizon="turn")
    assert len(out) >= 3
    by_id = {r.id: r for r in rows}
    for r in out:
        st = r.extra["steca"]
        t = st["t"]
        expert = by_id[st["expert"]]
        e_steps = [m for m in expert.messages if m.role == "assistant"]
        steps = [m for m in r.messages if m.role == "assistant"]
        assert [action_key(m) for m in steps[:t]] == [action_key(m) for m in e_steps[:t]]
        assert action_key(steps[t]) != action_key(e_steps[t])
        assert r.step_flags[t] == ["deviated"] and all(not f for f in r.step_flags[:t])
        assert st["values"]["agent"] <= st["values"]["previous"]
    c = ctx.metrics.snapshot()["counters"]
    assert c["llm.reflector.requests"] == c["deviated"]


def test_decide_early_stops_once_the_rule_is_decided() -> None:
    listed = rollout([LIST, DONE], "a", success=False)
    ctx, (mc, _) = scripted(gives_up_after_listing)
    out = run([listed], ctx, expert="gold", decide_early=True)
    st = out[0].extra["steca"]
    # V(t−1) = 1.0 from 5 rollouts; one failing rollout after the listing already decides
    # V_agent ≤ 1.0, so it is the only one taken
    assert st["values"] == {"previous": 1.0, "agent": 0.0}
    assert st["samples"]["agent"]["fresh"] == 1 and len(mc) == 3


def test_turn_horizon_ends_rollouts_with_the_steps_turn() -> None:
    read = {"path": WRITE["path"]}
    gold2 = GOLD.model_copy(
        update={
            "turns": [
                GOLD.turns[0],
                GoldTurn(request="Now read it back.",
                         steps=[[GoldCall(name="read_file", arguments=read)]]),
            ]
        }
    )  # fmt: skip

    def two_turns(req: ChatRequest) -> RawChoice:
        users = sum(1 for m in req.messages if m["role"] == "user")
        done = names(req)
        if users == 1:
            if "list_directory" in done or "write_file" in done:
                return RawChoice(content="Done.")
            return RawChoice(tool_calls=[{"id": "w", "name": "write_file",
                                          "arguments": json.dumps(WRITE)}])  # fmt: skip
        if "read_file" in done:
            return RawChoice(content="It says Minutes.")
        return RawChoice(
            tool_calls=[{"id": "r", "name": "read_file", "arguments": json.dumps(read)}]
        )

    env = FACTORY.make("files", seed=0)
    steps = [LIST, DONE, step("read_file", **read), DONE]
    result, _ = asyncio.run(play_steps(gold2, env, OPENING, steps, tools=TOOLS))
    agent = Trajectory(id="a", task_id="files-minutes-2", goal=GOAL, domain="files",
                       ground_truth=gold2.model_dump(mode="json"), tools=TOOLS,
                       messages=result.messages, success=False)  # fmt: skip
    counts = {}
    for horizon in ("turn", "episode"):
        ctx, (mc, _) = scripted(two_turns)
        out = run([agent], ctx, expert="gold", horizon=horizon)
        assert out[0].extra["steca"]["values"] == {"previous": 1.0, "agent": 0.0}
        assert out[0].extra["steca"]["horizon"] == horizon
        counts[horizon] = len(mc)
        if horizon == "turn":  # no rollout ever reached the second request
            assert all(sum(m["role"] == "user" for m in r.messages) == 1 for r in mc)
    # turn: write + answer from the start, an answer after the listing; episode: both go on
    # into the second turn (read + answer)
    assert counts == {"turn": 3, "episode": 7}
