"""Stage caching: an unchanged rerun executes nothing; a changed stage reruns with exactly
the stages downstream of it.

Run: python -m pytest tests/integration/test_cache.py -q
"""

from __future__ import annotations

from pathlib import Path

from trajsynth.pipeline import run_pipeline
from trajsynth.pipeline.spec import resolve_pipeline
from trajsynth.store import RunManifest, read_table

PIPE = {
    "name": "cache",
    "defaults": {"seed": 3, "shard_rows": 100, "workers": 1},
    "stages": [
        {"id": "raw", "uses": "synthetic", "with": {"rows": 300}},
        {"id": "parts", "uses": "split", "from": "raw", "with": {"eval_fraction": 0.2}},
        {"id": "train_pick", "uses": "sample", "from": "parts", "with": {"n": 50}},
        {"id": "eval_pick", "uses": "sample", "from": "parts:eval", "with": {"n": 20}},
        {"id": "side", "uses": "sample", "from": "raw", "with": {"fraction": 0.5}},
    ],
}


def run(out: Path, *overrides: str, force: bool = False):
    return run_pipeline(resolve_pipeline(PIPE, overrides=list(overrides)), out=out, force=force)


def executions(out: Path) -> dict[str, int]:
    return {
        sid: st.executions for sid, st in RunManifest.load(out / "manifest.json").stages.items()
    }


def test_unchanged_rerun_executes_no_stage(tmp_path: Path) -> None:
    first = run(tmp_path)
    assert first.executed == ["raw", "parts", "train_pick", "eval_pick", "side"]
    before = executions(tmp_path)
    second = run(tmp_path)
    assert second.executed == [] and len(second.skipped) == 5
    assert executions(tmp_path) == before  # the manifest agrees: nothing ran


def test_changed_config_reruns_that_stage_and_its_dependents_only(tmp_path: Path) -> None:
    run(tmp_path)
    before = executions(tmp_path)
    old_eval = read_table(tmp_path / "eval_pick", columns=["id"]).column("id").to_pylist()
    result = run(tmp_path, "stages.parts.with.eval_fraction=0.5")
    assert result.executed == ["parts", "train_pick", "eval_pick"]
    assert result.skipped == ["raw", "side"]
    after = executions(tmp_path)
    assert {s for s in after if after[s] != before[s]} == {"parts", "train_pick", "eval_pick"}
    new_eval = read_table(tmp_path / "eval_pick", columns=["id"]).column("id").to_pylist()
    assert new_eval != old_eval

    # a leaf change reruns only the leaf
    result = run(tmp_path, "stages.parts.with.eval_fraction=0.5", "stages.side.with.fraction=0.25")
    assert result.executed == ["side"]
    # the seed is part of every key: everything reruns
    result = run(
        tmp_path,
        "stages.parts.with.eval_fraction=0.5",
        "stages.side.with.fraction=0.25",
        "defaults.seed=4",
    )
    assert len(result.executed) == 5


def test_deleted_output_and_force_rerun(tmp_path: Path) -> None:
    run(tmp_path)
    for p in (tmp_path / "side").glob("part-*.parquet"):
        p.unlink()
    assert run(tmp_path).executed == ["side"]  # missing files are noticed
    assert len(run(tmp_path, force=True).executed) == 5
    assert executions(tmp_path)["raw"] == 2


def test_rerun_outputs_are_identical(tmp_path: Path) -> None:
    run(tmp_path / "a")
    run(tmp_path / "b")
    cols = ["id", "goal", "success", "messages"]
    for stage in ("raw", "train_pick", "eval_pick", "side"):
        a = read_table(tmp_path / "a" / stage, columns=cols)
        b = read_table(tmp_path / "b" / stage, columns=cols)
        assert a.equals(b), stage
