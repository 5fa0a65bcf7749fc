"""RunFolder: where each of a run's files lives, for a pipeline run, a one-stage folder and a
run on object storage (whose local files go to this machine's scratch folder).

Run: python -m pytest tests/store/test_layout.py -q
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trajsynth.store.layout import RunFolder


def test_a_pipeline_runs_files(tmp_path: Path) -> None:
    run = RunFolder.at(tmp_path / "run")
    assert not run.remote and run.scratch == tmp_path / "run"
    assert run.manifest == tmp_path / "run" / "manifest.json"
    assert run.output("raw") == tmp_path / "run" / "raw"
    assert run.output("rollouts", "failed") == tmp_path / "run" / "rollouts" / "failed"
    assert run.artifacts("train") == tmp_path / "run" / "artifacts" / "train"
    assert run.log == tmp_path / "run" / "logs" / "run.log" and run.logs == run.log.parent
    assert run.spill("dedup", shared=False) == tmp_path / "run" / ".spill" / "dedup"
    assert run.relative(run.output("raw") / "part-00000.parquet") == "raw/part-00000.parquet"


def test_a_one_stage_folder_is_the_stages_folder(tmp_path: Path) -> None:
    run = RunFolder.at(tmp_path / "f", single=True)
    assert run.output("filter") == tmp_path / "f"
    assert run.output("filter", "rejected") == tmp_path / "f" / "rejected"
    assert run.artifacts("filter") == tmp_path / "f" / "artifacts"


def test_a_run_on_object_storage_keeps_local_files_in_scratch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAJSYNTH_SCRATCH", str(tmp_path / "scratch"))
    run = RunFolder.at("s3://bucket/run")
    assert run.remote and str(run.manifest) == "s3://bucket/run/manifest.json"
    assert run.scratch.parent == tmp_path / "scratch" and run.scratch.is_dir()
    assert run.artifacts("train").parent.parent == run.scratch  # written here ...
    assert str(run.artifacts("train", stored=True)) == "s3://bucket/run/artifacts/train"
    assert run.log.is_relative_to(run.scratch) and str(run.logs) == "s3://bucket/run/logs"
    assert run.spill("dedup", shared=True) == run.root / ".spill" / "dedup"  # Ray nodes read it
    assert run.spill("dedup", shared=False).is_relative_to(run.scratch)


def test_the_folders_that_may_hold_a_shard_folder(tmp_path: Path) -> None:
    side = tmp_path / "run" / "rollouts" / "failed"
    assert [(r.root, r.single, s) for r, s in RunFolder.holding(side)] == [
        (side, True, None),
        (side.parent, False, "failed"),
        (tmp_path / "run", False, "rollouts"),
    ]
