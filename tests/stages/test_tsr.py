"""``tsr`` (METHODS.md §10, TSR row): best-of-N reaches the goal on tasks where plain sampling
at the same temperature does not; only executed actions enter the trajectory and the
environment ends in the chosen path's state; the candidate budget and environment steps are
counted (N × steps); beam search keeps at most B prefixes.

Run: PYTHONPATH=. python -m pytest tests/stages/test_tsr.py -q
"""

from __future__ import annotations

import json

import pytest

from trajsynth.core import GroundTruth, to_batch, to_records
from trajsynth.core.schema import Trajectory
from trajsynth.envs import EnvFactory
from trajsynth.envs.verifiers.final_state import replay
from trajsynth.llm.base import ChatRequest, RawChoice
from trajsynth.llm.scripted import use_scripted
from trajsynth.stages import Context, ContextSpec, build_stage

FACTORY = EnvFactory()


def run(
    cfg: dict, rows: list[Trajectory], ctx: Context | None = None
) -> tuple[list[Trajectory], Context]:
    ctx = ctx or Context(ContextSpec(stage_id="tsr", seed=0))
    stage = build_stage("tsr", cfg)
    return [r for out in stage.process(iter([to_batch(rows)]), ctx) for r in to_records(out)], ctx


@pytest.fixture(scope="module")
def tasks() -> list[Trajectory]:
    ctx = Context(ContextSpec(stage_id="tasks", seed=0))
    src = build_stage("magnet_tasks", {"tasks_per_domain": 6, "graph": {"similarity": "lexical"}})
    return [r for b in src.generate(ctx) for r in to_records(b)]


def test_best_of_n_reaches_the_goal_where_plain_sampling_does_not(tasks) -> None:
    plain, _ = run({"mode": "sample", "temperature": 1.0}, tasks)
    best, ctx = run({"mode": "best_of_n", "n": 4, "temperature": 1.0}, tasks)
    ok_plain = {r.task_id for r in plain if r.success}
    ok_best = {r.task_id for r in best if r.success}
    assert len(ok_best) > len(ok_plain)
    rescued = ok_best - ok_plain
    assert len(rescued) >= 3, (len(ok_plain), len(ok_best))
    c = ctx.metrics.snapshot()["counters"]
    for r in best:
        t = r.extra["tsr"]
        assert t["candidates"] == 4 * t["requests"]  # N candidates per step
        steps = sum(1 for m in r.messages if m.role == "assistant")
        assert t["requests"] == steps and len(r.step_rewards) == steps
        assert t["max_beams"] == 1
    assert c["candidates"] == sum(r.extra["tsr"]["candidates"] for r in best)


def test_only_executed_actions_and_the_chosen_state() -> None:
    example = next(t for t in FACTORY.example_tasks("travel") if t.task_id == "travel-convert")
    row = example.to_trajectory(FACTORY.toolset("travel"))
    good = {"amount": 250, "from_currency": "EUR", "to_currency": "USD"}
    choices = [good | {"from_currency": "XXX"}, good | {"amount": 25}, good]

    def policy(req: ChatRequest) -> list[RawChoice]:
        if req.messages[-1]["role"] == "tool":
            amount = json.loads(req.messages[-1]["content"])["converted_amount"]
            return [RawChoice(content=f"That is {amount} USD.")]
        return [
            RawChoice(
                tool_calls=[{"id": f"c{i}", "name": "convert_currency", "arguments": json.dumps(a)}]
            )
            for i, a in enumerate(choices[: req.n])
        ]

    ctx = Context(ContextSpec(stage_id="tsr", seed=0))
    use_scripted(ctx, "policy", policy)
    rows, ctx = run({"mode": "best_of_n", "n": 3, "logprobs": False}, [row], ctx)
    (r,) = rows
    assert r.success
    assert [json.loads(c.arguments) for c in r.calls()] == [good]  # only the kept action
    tool_msgs = [m for m in r.messages if m.role == "tool"]
    assert len(tool_msgs) == 1 and "error" not in tool_msgs[0].content
    t = r.extra["tsr"]
    assert (t["candidates"], t["env_steps"], t["requests"]) == (6, 3, 2)  # 3 + 3 candidates
    assert r.step_rewards[0] > 0.9 and len(r.step_rewards) == 2
    gt = GroundTruth.from_json(r.ground_truth)
    env = FACTORY.make("travel", seed=gt.env_seed)
    env.reset(gt)
    replay(env, r.calls())
    assert env.state_hash() == r.extra["final_state_hash"] == gt.final_state_hash


def test_search_on_a_writing_task_keeps_the_chosen_state() -> None:
    """Candidates that change the state are undone: the final state is the chosen path's."""
    example = next(
        t for t in FACTORY.example_tasks("travel") if t.task_id == "travel-book-cheapest-nonstop"
    )
    row = example.to_trajectory(FACTORY.toolset("travel"))
    rows, _ = run({"mode": "best_of_n", "n": 4}, [row])
    (r,) = rows
    gt = GroundTruth.from_json(r.ground_truth)
    env = FACTORY.make("travel", seed=gt.env_seed)
    env.reset(gt)
    replay(env, r.calls())
    assert env.state_hash() == r.extra["final_state_hash"]
    assert r.extra["tsr"]["env_steps"] >= len(r.calls())


def test_beam_keeps_at_most_b_prefixes(tasks) -> None:
    rows, _ = run({"mode": "beam", "n": 3, "beam": 2}, tasks[:10])
    assert rows and all(r.extra["tsr"]["max_beams"] <= 2 for r in rows)
    assert any(r.extra["tsr"]["max_beams"] == 2 for r in rows)
    for r in rows:
        assert r.extra["tsr"]["candidates"] == 3 * r.extra["tsr"]["requests"]
    best, _ = run({"mode": "best_of_n", "n": 3}, tasks[:10])
    # beam explores more than best-of-N for the same N
    assert sum(r.extra["tsr"]["candidates"] for r in rows) > sum(
        r.extra["tsr"]["candidates"] for r in best
    )
