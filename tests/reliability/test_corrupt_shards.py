"""A shard overwritten in place (same size) is detected: a rerun reruns its stage, and
``stats`` / ``show`` / ``export`` fail with one message naming the file.

Run: PYTHONPATH=. python -m pytest tests/reliability/test_corrupt_shards.py -q
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from faultkit import corrupt_file

from trajsynth.core.errors import DataError
from trajsynth.core.ids import file_fingerprint
from trajsynth.pipeline.runner import run_pipeline
from trajsynth.pipeline.spec import load_pipeline
from trajsynth.store.integrity import verify_shards
from trajsynth.store.shards import list_shards

PIPE = {
    "name": "corrupt",
    "defaults": {"seed": 0, "shard_rows": 100},
    "stages": [
        {"id": "raw", "uses": "synthetic", "with": {"rows": 300}},
        {"id": "split", "uses": "split", "from": "raw", "with": {"eval_fraction": 0.2}},
        {"id": "pick", "uses": "sample", "from": "split", "with": {"n": 50}},
    ],
}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trajsynth", *args], capture_output=True, text=True, timeout=300
    )


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    pipe = tmp_path / "p.yaml"
    pipe.write_text(yaml.safe_dump(PIPE))
    out = tmp_path / "run"
    run_pipeline(load_pipeline(pipe), out=out)
    return out


def _corrupt_first_shard(run_dir: Path, stage: str) -> Path:
    shard = list_shards(run_dir / stage)[0]
    size = shard.stat().st_size
    corrupt_file(shard, 2048)
    assert shard.stat().st_size == size
    return shard


def test_rerun_reruns_a_stage_whose_shard_was_overwritten(run_dir: Path) -> None:
    pipe = run_dir.parent / "p.yaml"
    assert set(run_pipeline(load_pipeline(pipe), out=run_dir).skipped) == {"raw", "split", "pick"}
    shard = _corrupt_first_shard(run_dir, "split")
    result = run_pipeline(load_pipeline(pipe), out=run_dir)
    assert "split" in result.executed and "raw" in result.skipped
    manifest = json.loads((run_dir / "manifest.json").read_text())
    recorded = {
        s["file"]: s["fingerprint"]
        for s in manifest["stages"]["split"]["outputs"]["main"]["shards"]
    }
    assert file_fingerprint(shard) == recorded[shard.name]  # rewritten, and intact again
    assert "corrupt" in (run_dir / "logs" / "run.log").read_text()


def test_readers_refuse_a_corrupt_shard_with_one_message(run_dir: Path, tmp_path: Path) -> None:
    assert verify_shards(list_shards(run_dir / "pick")) == len(list_shards(run_dir / "pick"))
    shard = _corrupt_first_shard(run_dir, "pick")
    with pytest.raises(DataError, match="corrupt shard"):
        verify_shards(list_shards(run_dir / "pick"))
    for args in (
        ["stats", str(run_dir / "pick")],
        ["show", str(run_dir / "pick")],
        ["export", str(run_dir / "pick"), "--format", "jsonl", "--out", str(tmp_path / "x")],
    ):
        res = _cli(*args)
        assert res.returncode != 0, args
        assert "corrupt shard" in res.stderr and shard.name in res.stderr, res.stderr
        assert "Traceback" not in res.stderr + res.stdout
