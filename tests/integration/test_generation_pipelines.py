"""The four generation pipelines (magnet, rejection, director_actor, tsr) validate and run
offline end to end, small, through the real runner; a rerun is a cache hit.

Run: PYTHONPATH=. python -m pytest tests/integration/test_generation_pipelines.py -q
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trajsynth.pipeline import run_pipeline
from trajsynth.pipeline.spec import builtin_pipelines, load_pipeline
from trajsynth.store import read_records

SMALL = [
    "stages.tasks.with.tasks_per_domain=2",
    "stages.tasks.with.domains=[travel,commerce]",
    "stages.tasks.with.graph.similarity=lexical",
]


@pytest.mark.parametrize("name", ["magnet", "rejection", "director_actor", "tsr"])
def test_pipeline_runs_offline(name: str, tmp_path: Path) -> None:
    assert name in builtin_pipelines()
    load_pipeline(name)  # validates as shipped
    result = run_pipeline(name, out=tmp_path, overrides=SMALL)
    tasks = read_records(result.output("tasks"))
    assert len(tasks) == 4 and {t.method for t in tasks} == {"magnet_tasks"}
    produced = {
        "magnet": ("pairs", "magnet_pairs"),
        "rejection": ("rollouts", "rejection_sampling"),
        "director_actor": ("conversations", "director_actor"),
        "tsr": ("search", "tsr"),
    }[name]
    out_dir = result.output(produced[0])
    rows = read_records(out_dir) if any(out_dir.glob("*.parquet")) else []
    assert all(r.method == produced[1] for r in rows)
    if name in ("director_actor", "tsr"):
        assert len(rows) == (8 if name == "director_actor" else 4)
    if name == "tsr":
        plain = read_records(result.output("plain"))
        assert sum(r.success for r in rows) >= sum(r.success for r in plain)
    # the pipelines end with verify (an independent replay; what fails goes to `failed`) and
    # filter
    verified = read_records(result.output("verified"))
    failed = read_records(result.output("verified", "failed"))
    assert len(verified) + len(failed) == len(rows)
    assert all(r.success is not False for r in verified)
    assert all(r.success is False and r.failure_layer for r in failed)
    if name in ("rejection", "magnet"):  # rows kept as successes pass the replay too
        assert failed == [] and all(r.success for r in verified)
    filtered = read_records(result.output("filtered"))
    assert {r.id for r in filtered} <= {r.id for r in verified}
    assert all(r.success for r in filtered)
    again = run_pipeline(name, out=tmp_path, overrides=SMALL)
    assert again.executed == [] and set(again.skipped) == set(result.executed)
