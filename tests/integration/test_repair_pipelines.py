"""The repair pipelines (``echo_steca``, ``hardgen``) validate as shipped and run offline end
to end, small, through the real runner: ECHO and STeCa rows reach the quality chain with
their lineage, HardGen rows verify; a rerun is a cache hit.

Run: PYTHONPATH=. python -m pytest tests/integration/test_repair_pipelines.py -q
"""

from __future__ import annotations

from pathlib import Path

from trajsynth.pipeline import run_pipeline
from trajsynth.pipeline.spec import builtin_pipelines, load_pipeline
from trajsynth.store import read_records

SMALL_TASKS = [
    "stages.tasks.with.tasks_per_domain=2",
    "stages.tasks.with.domains=[travel,commerce]",
]


def test_echo_steca_runs_offline(tmp_path: Path) -> None:
    assert "echo_steca" in builtin_pipelines()
    load_pipeline("echo_steca")
    result = run_pipeline("echo_steca", out=tmp_path, overrides=SMALL_TASKS)
    rollouts = read_records(result.output("rollouts")) + read_records(
        result.output("rollouts", "failed")
    )
    failed = {r.id for r in rollouts if not r.success}
    echo = read_records(result.output("echo"))
    steca = read_records(result.output("steca"))
    assert echo and steca
    assert all(r.method == "echo" and r.parent_ids[0] in failed for r in echo)
    assert all(r.method == "steca" and r.parent_ids[0] in failed for r in steca)
    assert all(any("deviated" in f for f in r.step_flags) for r in steca)
    verified = read_records(result.output("verified"))
    by_method = {m: [r for r in verified if r.method == m] for m in ("echo", "steca")}
    assert all(r.success for r in by_method["echo"])  # every rewrite replays to its goal
    filtered = read_records(result.output("filtered"))
    assert {r.method for r in filtered} >= {"rejection_sampling", "echo"}
    again = run_pipeline("echo_steca", out=tmp_path, overrides=SMALL_TASKS)
    assert again.executed == [] and set(again.skipped) == set(result.executed)


def test_hardgen_runs_offline(tmp_path: Path) -> None:
    assert "hardgen" in builtin_pipelines()
    load_pipeline("hardgen")
    overrides = [*SMALL_TASKS, "stages.hard.with.tasks=4"]
    result = run_pipeline("hardgen", out=tmp_path, overrides=overrides)
    hard = read_records(result.output("hard"))
    assert hard and all(r.method == "hardgen" and r.success for r in hard)
    assert all(1 <= r.extra["hardgen"]["attempts"] <= 3 for r in hard)
    scored = read_records(result.output("scored"))
    assert all(r.success for r in scored) and all(r.quality_score is not None for r in scored)
