"""``rejection_sampling`` (METHODS.md §10, rejection-sampling row): crafted rollouts are
rejected at the right layer (format / format / execution / kept / judge); failures go to the
``failed`` output with their reason; a policy that ignores the previous output fails; with the
default simulated teacher the pass@1 and pass@8 per capability appear in ``trajsynth stats``.

Run: PYTHONPATH=. python -m pytest tests/stages/test_rejection_sampling.py -q
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from trajsynth.cli import app
from trajsynth.core import GroundTruth, Trajectory, to_batch, to_records
from trajsynth.envs import EnvFactory
from trajsynth.llm.base import ChatRequest, RawChoice
from trajsynth.llm.scripted import use_scripted
from trajsynth.pipeline import run_pipeline
from trajsynth.quality.stats import pass_at_k
from trajsynth.stages import Context, ContextSpec, Emit, build_stage

FACTORY = EnvFactory()
CONVERT = next(t for t in FACTORY.example_tasks("travel") if t.task_id == "travel-convert")
TASK = CONVERT.to_trajectory(FACTORY.toolset("travel"))


def run(stage_cfg: dict[str, Any], rows: list[Trajectory], ctx: Context):
    stage = build_stage("rejection_sampling", stage_cfg)
    main, failed = [], []
    for out in stage.process(iter([to_batch(rows)]), ctx):
        if isinstance(out, Emit):
            assert out.name == "failed"
            failed += to_records(out.data)
        else:
            main += to_records(out)
    return main, failed


def call(name: str, args: str) -> RawChoice:
    return RawChoice(tool_calls=[{"id": "c1", "name": name, "arguments": args}])


def test_crafted_rollouts_are_rejected_at_the_right_layer() -> None:
    ctx = Context(ContextSpec(stage_id="rs", seed=0))
    seeds = {ctx.row_seed(TASK.id, r): r for r in range(5)}
    judge_seeds = {ctx.row_seed(TASK.id, r, "judge"): r for r in range(5)}
    good = '{"amount": 250, "from_currency": "EUR", "to_currency": "USD"}'
    crafted = {
        0: call("convert_currency", "{'amount': 250"),  # malformed JSON
        1: call("convert_money", good),  # unknown function
        2: call("convert_currency", good.replace("EUR", "XXX")),  # executes with an error
        3: call("convert_currency", good),  # valid
        4: call("convert_currency", good),  # valid, but the judge says no
    }

    def teacher(req: ChatRequest) -> RawChoice:
        r = seeds[req.seed]
        if req.messages[-1]["role"] == "tool":
            return RawChoice(content="250 EUR is 270.0 USD.")
        return crafted[r]

    def judge(req: ChatRequest) -> str:
        r = judge_seeds[req.seed]
        assert req.metadata["mode"] == "apigen"
        return json.dumps(
            {"thought": "fine" if r == 3 else "wrong", "passes": "yes" if r == 3 else "no"}
        )

    use_scripted(ctx, "teacher", teacher)
    use_scripted(ctx, "judge", judge)
    main, failed = run({"n": 5, "first_step_n": False, "judge": True}, [TASK], ctx)
    assert [r.extra["rollout"] for r in main] == [3]
    layers = {r.extra["rollout"]: (r.failure_layer, r.failure_reason) for r in failed}
    assert [layers[i][0] for i in range(5) if i != 3] == ["format", "format", "execution", "judge"]
    assert "not a JSON object" in layers[0][1] and "unknown_tool" in layers[1][1]
    assert "not_found" in layers[2][1] and layers[4][1] == "wrong"
    kept = main[0]
    assert kept.success and kept.reward == 1.0 and kept.judge.verdict == "pass"
    assert kept.reward_components == {
        "format": 1.0, "execution": 1.0, "final_state": 1.0, "outputs": 1.0, "call_match": 1.0,
        "judge": 1.0,
    }  # fmt: skip
    for r in [*main, *failed]:
        assert (r.rollouts_total, r.rollouts_passed) == (5, 1)
        assert r.parent_ids == [TASK.id] and r.method == "rejection_sampling"
        assert r.task_id == TASK.task_id
    c = ctx.metrics.snapshot()["counters"]
    assert (c["rollouts"], c["passed"], c["rejected.format"], c["rejected.judge"]) == (5, 1, 2, 1)


def test_generation_failure_is_a_rejection_not_a_crash() -> None:
    from trajsynth.core.errors import EndpointError

    ctx = Context(ContextSpec(stage_id="rs", seed=0))

    def down(req: ChatRequest) -> str:
        raise EndpointError("503 after 5 retries")

    use_scripted(ctx, "teacher", down)
    main, failed = run({"n": 3}, [TASK], ctx)
    assert main == [] and [r.failure_layer for r in failed] == ["generation"] * 3
    assert "503" in failed[0].failure_reason


def test_a_policy_that_ignores_the_previous_output_fails() -> None:
    """The dependent call must take the value an earlier call returned (threading)."""
    task = next(
        t for t in FACTORY.example_tasks("travel") if t.task_id == "travel-cancel-and-refund"
    )
    row = task.to_trajectory(FACTORY.toolset("travel"))
    gt = task.ground_truth

    def teacher(req: ChatRequest) -> RawChoice:
        done = sum(1 for m in req.messages if m["role"] == "assistant" and m.get("tool_calls"))
        calls = gt.flat_calls()
        if done == len(calls):
            return RawChoice(content="Cancelled; refunded " + " ".join(gt.required_outputs))
        c = calls[done]
        args = dict(c.arguments)
        if c.name == "cancel_booking":
            args["booking_id"] = "BK-OH0002"  # not the id list_bookings returned
        return call(c.name, json.dumps(args))

    ctx = Context(ContextSpec(stage_id="rs", seed=0))
    use_scripted(ctx, "teacher", teacher)
    main, failed = run({"n": 1}, [row], ctx)
    assert main == [] and failed[0].failure_layer == "execution"


@pytest.fixture(scope="module")
def pipeline_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("rejection")
    run_pipeline(
        Path(__file__).resolve().parents[2] / "pipelines" / "rejection.yaml",
        out=out,
        overrides=[
            "stages.tasks.with.tasks_per_domain=5",
            "stages.tasks.with.graph.similarity=lexical",
        ],
    )
    return out


def test_default_teacher_pass_at_k_per_capability_in_stats(pipeline_run: Path) -> None:
    main = [r for p in sorted((pipeline_run / "rollouts").glob("part-*.parquet")) for r in _read(p)]
    failed = [
        r
        for p in sorted((pipeline_run / "rollouts" / "failed").glob("*.parquet"))
        for r in _read(p)
    ]
    assert main and failed
    assert all(r.success for r in main) and not any(r.success for r in failed)
    assert all(r.failure_layer for r in failed)
    per_task: dict[str, tuple[int, int, list[str]]] = {}
    for r in [*main, *failed]:
        per_task[r.task_id] = (r.rollouts_total, r.rollouts_passed, r.capabilities)
    assert len(per_task) == 25 and {n for n, _, _ in per_task.values()} == {8}
    counts = Counter(r.task_id for r in main)
    assert all(counts.get(t, 0) == c for t, (_, c, _) in per_task.items())
    # what `trajsynth stats` must show, computed here from the counts
    want: dict[str, dict[str, float]] = {}
    for n, c, caps in per_task.values():
        for cap in ["(all)", *caps]:
            w = want.setdefault(cap, {"tasks": 0, "p1": 0.0, "p8": 0.0})
            w["tasks"] += 1
            w["p1"] += pass_at_k(n, c, 1)
            w["p8"] += pass_at_k(n, c, 8)
    res = CliRunner().invoke(
        app, ["stats", str(pipeline_run / "rollouts" / "**" / "*.parquet"), "--json"]
    )
    assert res.exit_code == 0, res.output
    shown = json.loads(res.output)["pass_at_k"]
    assert set(shown) == set(want)
    for cap, w in want.items():
        assert shown[cap]["tasks"] == w["tasks"]
        assert shown[cap]["pass@1"] == pytest.approx(w["p1"] / w["tasks"])
        assert shown[cap]["pass@8"] == pytest.approx(w["p8"] / w["tasks"])
    overall = shown["(all)"]
    assert 0.1 < overall["pass@1"] < overall["pass@8"] <= 1.0
    # the simulated teacher is calibrated weaker on dependent calls than on single calls
    assert shown["single_call"]["pass@1"] > shown["dependent_calls"]["pass@1"]
    table = CliRunner().invoke(app, ["stats", str(pipeline_run / "rollouts" / "**" / "*.parquet")])
    assert "pass@k by capability" in table.output and "pass@8" in table.output


def _read(path: Path) -> list[Trajectory]:
    from trajsynth.store import read_records

    return list(read_records(path))


def test_ground_truth_roundtrip_of_the_rollouts(pipeline_run: Path) -> None:
    rows = [r for p in sorted((pipeline_run / "rollouts").glob("part-*.parquet")) for r in _read(p)]
    for r in rows[:20]:
        gt = GroundTruth.from_json(r.ground_truth)
        assert r.extra["final_state_hash"] == gt.final_state_hash
        assert r.messages[0].role == "system" and r.num_turns >= 1


def test_a_domain_with_no_task_solved_is_a_finding() -> None:
    """Every rollout of the commerce task fails (the teacher answers in prose), the travel task
    is solved: the stage names commerce, and only it, in its findings; with both solved it has
    none."""
    other = next(iter(FACTORY.example_tasks("commerce")))
    other_row = other.to_trajectory(FACTORY.toolset("commerce"))
    good = '{"amount": 250, "from_currency": "EUR", "to_currency": "USD"}'

    def teacher(req: ChatRequest) -> RawChoice:
        names = {t["function"]["name"] for t in req.tools or []}
        if req.messages[-1]["role"] == "tool":
            return RawChoice(content="250 EUR is 270.0 USD.")
        if "convert_currency" in names:
            return call("convert_currency", good)
        return RawChoice(content="I would rather not.")

    ctx = Context(ContextSpec(stage_id="rs", seed=0))
    use_scripted(ctx, "teacher", teacher)
    stage = build_stage("rejection_sampling", {"n": 2, "first_step_n": False})
    for _ in stage.process(iter([to_batch([TASK, other_row])]), ctx):
        pass
    metrics = ctx.metrics.snapshot()
    c = metrics["counters"]
    assert (c["domain.travel.tasks"], c["domain.travel.solved"]) == (1, 1)
    assert (c["domain.commerce.tasks"], c["domain.commerce.solved"]) == (1, 0)
    assert stage.findings(metrics) == [
        "1 of 2 domains had no task solved in 2 rollouts each, so none of its rows reaches the "
        "output: commerce (1 task) (the failed side output says why)"
    ]
    c["domain.commerce.solved"] = 1
    assert stage.findings(metrics) == []
