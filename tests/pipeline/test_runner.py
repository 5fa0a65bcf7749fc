"""Runner behaviours beyond caching and resume: empty outputs, failing stages.

Run: python -m pytest tests/pipeline/test_runner.py -q
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trajsynth.core import StageFailed
from trajsynth.pipeline import run_pipeline
from trajsynth.pipeline.spec import resolve_pipeline
from trajsynth.stages import MapStage, StageConfig, register
from trajsynth.store import count_rows, read_table


@register
class Explode(MapStage):
    """Test stage that fails on its second unit."""

    name = "test_explode"

    class Config(StageConfig):
        pass

    def process(self, batches, ctx):
        for b in batches:
            if ctx.unit and ctx.unit.endswith("part-00001.parquet"):
                raise ValueError("boom on purpose")
            yield b


def pipe(*stages: dict) -> dict:
    return {
        "name": "r",
        "defaults": {"shard_rows": 20},
        "stages": [{"id": "raw", "uses": "synthetic", "with": {"rows": 50}}, *stages],
    }


def test_empty_results_read_as_zero_rows(tmp_path: Path) -> None:
    run_pipeline(
        resolve_pipeline(
            pipe(
                {"id": "none", "uses": "sample", "from": "raw", "with": {"n": 0}},
                {"id": "split_all", "uses": "split", "from": "raw", "with": {"eval_fraction": 0.0}},
                {"id": "after", "uses": "sample", "from": "split_all:eval", "with": {"n": 5}},
            )
        ),
        out=tmp_path,
    )
    assert count_rows(tmp_path / "none") == 0
    assert read_table(tmp_path / "none").num_rows == 0
    assert count_rows(tmp_path / "split_all" / "eval") == 0
    assert count_rows(tmp_path / "after") == 0


def test_a_failing_stage_is_named_and_logged(tmp_path: Path) -> None:
    with pytest.raises(
        StageFailed,
        match=r"stage 'bad' \(test_explode\) failed: ValueError: "
        r"boom on purpose",
    ) as info:
        run_pipeline(
            resolve_pipeline(pipe({"id": "bad", "uses": "test_explode", "from": "raw"})),
            out=tmp_path,
        )
    assert "run.log" in (info.value.hint or "")
    log = (tmp_path / "logs" / "run.log").read_text()
    assert "Traceback" in log and "boom on purpose" in log
    from trajsynth.store import RunManifest

    state = RunManifest.load(tmp_path / "manifest.json").stages["bad"]
    assert state.status == "failed" and "boom" in (state.error or "")
    assert len(state.units) == 1  # the unit before the failure stays committed
