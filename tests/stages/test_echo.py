"""``echo`` (METHODS.md §10, ECHO row): a failed trajectory on the file system that
incidentally creates a file is relabelled "create that file", with a shorter trajectory that
replays to success; goals that were never observed are rejected; abstentions are not kept;
a second, longer rewrite of the same goal does not replace the first; on simulated failures,
every kept rewrite reaches only observed effects and verifies.

Run: PYTHONPATH=. python -m pytest tests/stages/test_echo.py -q
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from trajsynth.core import GroundTruth, Message, Trajectory, to_batch, to_records
from trajsynth.core.prompts import system_prompt
from trajsynth.core.task import GoldCall, GoldTurn
from trajsynth.envs import EnvFactory
from trajsynth.envs.verifiers import final_state_match
from trajsynth.llm.base import ChatRequest
from trajsynth.llm.scripted import use_scripted
from trajsynth.stages import Context, ContextSpec, Emit, build_stage
from trajsynth.stages.common.replay import calls_message, play_steps
from trajsynth.stages.methods.echo import GoalMemory

FACTORY = EnvFactory()
TOOLS = FACTORY.toolset("files").to_openai()
GOAL = "Save the meeting minutes to /home/user/docs/minutes.txt."
GOLD = GroundTruth(
    turns=[
        GoldTurn(
            request=GOAL,
            steps=[
                [
                    GoldCall(
                        name="write_file",
                        arguments={"path": "/home/user/docs/minutes.txt", "content": "Minutes"},
                    )
                ]
            ],
        )
    ],
    env_seed=0,
)
B = "/home/user/docs/B.txt"


def failed_row(steps: list[Message], key: str) -> Trajectory:
    """A failed trajectory whose tool results are what the tools really return."""
    opening = [Message(role="system", content=system_prompt()), Message(role="user", content=GOAL)]
    env = FACTORY.make("files", seed=0)
    result, _ = asyncio.run(play_steps(GOLD, env, opening, steps, tools=TOOLS))
    return Trajectory(
        id=f"failed-{key}",
        task_id="files-minutes",
        goal=GOAL,
        domain="files",
        ground_truth=GOLD.model_dump(mode="json"),
        tools=TOOLS,
        messages=result.messages,
        success=False,
        failure_layer="final_state",
        method="rejection_sampling",
    )


def step(name: str, key: Any = 0, **args: Any) -> Message:
    return calls_message([{"name": name, "arguments": args}], key=[name, key])


ANSWER = Message(role="assistant", content="I saved the minutes.")
INCIDENTAL = [
    step("list_directory", path="/home/user/docs"),
    step("write_file", path=B, content="Minutes"),
    step("read_file", path="/home/user/docs/nope.txt"),  # not_found: achieves nothing
    ANSWER,
]


def run_echo(rows: list[Trajectory], ctx: Context, **cfg: Any) -> list[Trajectory]:
    stage = build_stage("echo", cfg)
    return [r for b in stage.process(iter([to_batch(rows)]), ctx) for r in to_records(b)]


def exact_sim(stage_id: str = "echo") -> Context:
    """The default simulated rewriter, never abstaining and never wrong."""
    sim = {"rewriter_abstain_rate": 0.0, "rewriter_error_rate": 0.0}
    return Context(ContextSpec(stage_id=stage_id, llm={"rewriter": {"sim": sim}}))


def test_relabels_the_file_it_created_with_a_shorter_trajectory_that_replays() -> None:
    row = failed_row(INCIDENTAL, "a")
    ctx = exact_sim()
    out = run_echo([row], ctx)
    created = next(r for r in out if not r.extra["echo"]["observed"] and r.extra["echo"]["changes"])
    assert created.extra["echo"]["changes"] == [f"added files/{B}"]
    assert created.goal and "B.txt" in created.goal  # the relabelled goal: create B
    assert [(c.name, json.loads(c.arguments)) for c in created.calls()] == [
        ("write_file", {"path": B, "content": "Minutes"})
    ]
    assert created.num_tool_calls < row.num_tool_calls  # shorter than the failed original
    assert created.success and created.method == "echo" and created.parent_ids == [row.id]
    assert created.extra["echo"]["evidence_calls"] == [1]
    # built like every episode row: the environment's version and each step's state change
    assert created.env_version and created.env_version == ctx.envs.version("files")
    assert len(created.step_diffs) == created.num_turns == 2
    assert json.loads(created.step_diffs[0]) and json.loads(created.step_diffs[1]) == []
    # replays to success on a fresh environment: its new ground truth's final state
    gt = GroundTruth.from_json(created.ground_truth)
    assert gt.final_state_hash and gt.turns[0].request == created.goal
    res = final_state_match(created, gt, lambda: FACTORY.make("files", seed=0))
    assert res.ok
    verified = build_stage("verify", {}).process(iter([to_batch([created])]), Context())
    assert [r.success for b in verified for r in to_records(b)] == [True]
    # the other goals come from the same evidence: what listing the folder found out, and
    # both achievements together; the failed read is never a goal
    kinds = sorted(r.extra["echo"]["kind"] for r in out)
    assert kinds == ["info", "state", "state"]
    assert all("nope.txt" not in json.dumps(r.extra) for r in out)
    c = ctx.metrics.snapshot()["counters"]
    assert c["rewrite_requests"] == 3 and c["kept"] == 3 and c["llm.rewriter.requests"] == 3


def _scripted(reply: dict[str, Any] | str):
    def rewriter(req: ChatRequest) -> str:
        return reply if isinstance(reply, str) else json.dumps(reply)

    return rewriter


def test_goals_never_observed_are_rejected_and_abstentions_not_kept() -> None:
    row = failed_row([*INCIDENTAL[1:2], ANSWER], "b")  # only B.txt was created
    cases = {
        # C.txt was never created in the trajectory: the replay reaches another state
        "wrong_target": {
            "query": "Create C.txt",
            "workflow": "Step 1: write C.",
            "final_answer": "Done.",
            "calls": [
                {
                    "name": "write_file",
                    "arguments": {"path": "/home/user/docs/C.txt", "content": "Minutes"},
                }
            ],
        },
        "call_failed": {
            "query": "Read B",
            "workflow": "Step 1: read.",
            "final_answer": "Done.",
            "calls": [{"name": "read_file", "arguments": {"path": "/home/user/docs/none.txt"}}],
        },
        "invalid_call": {
            "query": "Create B",
            "workflow": "Step 1: write.",
            "final_answer": "Done.",
            "calls": [{"name": "teleport_file", "arguments": {"path": B}}],
        },
        "abstained": {"query": "", "workflow": "", "final_answer": "", "calls": []},
        "unreadable": "I am not sure what to write here.",
    }
    for reason, reply in cases.items():
        ctx = Context(ContextSpec(stage_id="echo"))
        backend = use_scripted(ctx, "rewriter", _scripted(reply))
        assert run_echo([row], ctx, tries=1) == []
        counters = ctx.metrics.snapshot()["counters"]
        key = reason if reason in ("abstained",) else f"rejected.{reason}"
        assert counters[key] == 1, (reason, counters)
        # the prompt shows the evidence; the simulator's payload holds only the goal's calls
        meta = backend.requests[0].metadata
        assert (
            meta["mode"] == "rewrite"
            and "added files/" + B in backend.requests[0].messages[1]["content"]
        )
        assert [c["name"] for m in meta["trajectory"] for c in m.get("tool_calls") or []] == [
            "write_file"
        ]


def test_a_second_longer_rewrite_does_not_replace_the_first() -> None:
    memory = GoalMemory()
    assert memory.offer("g", "first", (1, 40))
    assert not memory.offer("g", "longer", (2, 10))
    assert not memory.offer("g", "as long", (1, 40))
    assert memory.get("g") == "first"
    assert memory.offer("g", "shorter", (1, 12)) and memory.get("g") == "shorter"
    # in the stage: two failures reach the same file; the second needed two writes and its
    # rewrite keeps both, so it is longer; ECHO asks for both (ask: every) and keeps the first
    one = failed_row([step("write_file", path=B, content="Minutes"), ANSWER], "1")
    two = failed_row(
        [
            step("write_file", path=B, content="draft"),
            step("write_file", 1, path=B, content="Minutes", overwrite=True),
            ANSWER,
        ],
        "2",
    )
    replies = {
        one.id: [{"name": "write_file", "arguments": {"path": B, "content": "Minutes"}}],
        two.id: [
            {"name": "write_file", "arguments": {"path": B, "content": "draft"}},
            {"name": "write_file", "arguments": {"path": B, "content": "Minutes",
                                                 "overwrite": True}},
        ],
    }  # fmt: skip

    def rewriter(req: ChatRequest) -> str:
        text = req.messages[1]["content"]
        calls = replies[two.id] if '"draft"' in text else replies[one.id]
        wf = " ".join(f"Step {i + 1}: write B." for i in range(len(calls)))
        return json.dumps(
            {"query": "Save B.", "workflow": wf, "final_answer": "Saved.", "calls": calls}
        )

    ctx = Context(ContextSpec(stage_id="echo"))
    use_scripted(ctx, "rewriter", rewriter)
    out = run_echo([two, one], ctx, ask="every")
    assert len(out) == 1 and out[0].parent_ids == [one.id] and out[0].num_tool_calls == 1
    assert ctx.metrics.snapshot()["counters"]["rewrite_requests"] == 2
    # shortest_first asks once per goal, starting from the least evidence
    ctx = Context(ContextSpec(stage_id="echo"))
    use_scripted(ctx, "rewriter", rewriter)
    out = run_echo([two, one], ctx)
    assert [r.parent_ids for r in out] == [[one.id]]
    assert ctx.metrics.snapshot()["counters"]["rewrite_requests"] == 1


def test_simulated_failures_relabel_only_observed_effects_and_every_rewrite_verifies() -> None:
    """Rejection sampling's failures on example tasks, a rewriter that is often wrong: each
    kept rewrite reaches a state whose changes the failed trajectory made, and verifies."""
    tasks = [
        t.to_trajectory(FACTORY.toolset(t.domain))
        for d in ("files", "travel", "messaging")
        for t in FACTORY.example_tasks(d)
    ]
    rs_ctx = Context(ContextSpec(stage_id="rs", seed=1))
    stage = build_stage("rejection_sampling", {"n": 4})
    failed = [
        r
        for out in stage.process(iter([to_batch(tasks)]), rs_ctx)
        if isinstance(out, Emit)
        for r in to_records(out.data)
    ]
    assert len(failed) >= 20
    sim = {"rewriter_abstain_rate": 0.1, "rewriter_error_rate": 0.5}
    ctx = Context(ContextSpec(stage_id="echo", llm={"rewriter": {"sim": sim}}))
    out = run_echo(failed, ctx)
    counters = ctx.metrics.snapshot()["counters"]
    assert len(out) >= 10 and sum(v for k, v in counters.items() if k.startswith("rejected")) > 0
    parents = {r.id: r for r in failed}
    for r in out:
        parent = parents[r.parent_ids[0]]
        gt = GroundTruth.from_json(parent.ground_truth)
        # the parent's own effects, replayed
        env = FACTORY.make(parent.domain, seed=gt.env_seed, initial_state=gt.initial_state)
        env.reset(gt)
        start = env.snapshot()
        outputs = []
        for c in parent.calls():
            res = env.execute(c)
            if res.ok:
                outputs.append(json.dumps(res.output, sort_keys=True))
        observed = set(env.diff(start).describe())
        # the rewrite's effects, replayed
        env2 = FACTORY.make(parent.domain, seed=gt.env_seed, initial_state=gt.initial_state)
        env2.reset(gt)
        start2 = env2.snapshot()
        for c in r.calls():
            assert env2.execute(c).ok
        mine = {d.split(" (")[0] for d in env2.diff(start2).describe()}
        assert mine <= {d.split(" (")[0] for d in observed} | _intermediate(parent, FACTORY)
        for o in r.extra["echo"]["observed"]:
            assert json.dumps(o, sort_keys=True) in outputs
    verified = build_stage("verify", {}).process(iter([to_batch(out)]), Context())
    assert all(row.success for b in verified for row in to_records(b))


def _intermediate(parent: Trajectory, factory: EnvFactory) -> set[str]:
    """Records the parent changed at some point (a record created then changed again
    counts, as the goal may stop before the later change)."""
    gt = GroundTruth.from_json(parent.ground_truth)
    env = factory.make(parent.domain, seed=gt.env_seed, initial_state=gt.initial_state)
    env.reset(gt)
    out: set[str] = set()
    for c in parent.calls():
        before = env.snapshot()
        env.execute(c)
        out |= {d.split(" (")[0] for d in env.diff(before).describe()}
    return out
