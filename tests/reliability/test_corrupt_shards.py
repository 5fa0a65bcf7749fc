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
    assert "changed on disk (content fingerprint" in (run_dir / "logs" / "run.log").read_text()


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


def _flip_a_bit_pyarrow_still_reads(shard: Path) -> None:
    """Flip one bit of ``shard`` where pyarrow still reads the file, with other values
    (issue 23: 126 of 300 random one-bit flips were read so): the first such bit from the
    middle of the file on."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = shard.read_bytes()
    before = pq.read_table(pa.BufferReader(data))
    for offset in range(len(data) // 2, len(data)):
        flipped = bytearray(data)
        flipped[offset] ^= 1
        try:
            after = pq.read_table(pa.BufferReader(bytes(flipped)))
        except Exception:
            continue
        if not after.equals(before):
            shard.write_bytes(bytes(flipped))
            return
    raise AssertionError(f"no silently readable bit flip in {shard}")


def test_every_reader_refuses_a_shard_with_a_bit_pyarrow_reads_silently(
    run_dir: Path, tmp_path: Path
) -> None:
    """Issue 23: ``filter``, ``dedup``, ``balance`` and ``stage … --in`` read such a shard
    (exit 0, altered rows). Every reader goes through the one verified read now: the CLI
    commands, a pipeline reading it by path, and the store's reading functions."""
    from trajsynth.store.shards import (
        ShardReader,
        iter_batches,
        iter_shard,
        read_records,
        read_table,
    )

    shard = list_shards(run_dir / "split")[1]
    _flip_a_bit_pyarrow_still_reads(shard)
    for args in (
        ["filter", str(run_dir / "split"), "--out", str(tmp_path / "f")],
        ["dedup", str(run_dir / "split"), "--out", str(tmp_path / "d")],
        ["balance", str(run_dir / "split"), "--out", str(tmp_path / "b")],
        ["stage", "sample", "--in", str(run_dir / "split"), "--out", str(tmp_path / "s"),
         "--set", "n=100"],
    ):  # fmt: skip
        res = _cli(*args)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert "corrupt shard" in res.stderr and shard.name in res.stderr, res.stderr
        assert "Traceback" not in res.stderr + res.stdout
    pipe = tmp_path / "by_path.yaml"
    stages = [{"id": "s", "uses": "sample", "from": str(run_dir / "split"), "with": {"n": 10}}]
    pipe.write_text(yaml.safe_dump({"name": "by_path", "stages": stages}))
    with pytest.raises(DataError, match="corrupt shard"):
        run_pipeline(load_pipeline(pipe), out=tmp_path / "by_path")
    for read in (
        lambda: read_table(run_dir / "split"),
        lambda: read_table(run_dir / "split", columns=["id"]),  # a projection too
        lambda: read_records(shard),
        lambda: list(iter_batches(run_dir / "split")),
        lambda: list(iter_shard(shard)),
        lambda: ShardReader(str(shard))(),
    ):
        with pytest.raises(DataError, match="corrupt shard"):
            read()


def test_the_runner_hands_its_records_to_readers_in_other_processes(tmp_path: Path) -> None:
    """A map unit (any executor: the record travels in the picklable task) and a streaming
    global stage's shard reader check the record the runner gives them, not a manifest."""
    import pickle

    from trajsynth.store.integrity import ShardCheck
    from trajsynth.store.shards import ShardReader, iter_shard

    pipe = tmp_path / "p.yaml"
    pipe.write_text(yaml.safe_dump({**PIPE, "stages": PIPE["stages"][:1]}))
    run_pipeline(load_pipeline(pipe), out=tmp_path / "run")
    shard = list_shards(tmp_path / "run" / "raw")[0]
    right = ShardCheck(shard.stat().st_size, file_fingerprint(shard))
    wrong = ShardCheck(shard.stat().st_size, "0" * 32)
    assert sum(b.num_rows for b in iter_shard(shard, check=right)) == 100
    with pytest.raises(DataError, match="corrupt shard"):
        list(iter_shard(shard, check=wrong))
    reader = pickle.loads(pickle.dumps(ShardReader(str(shard), wrong)))
    with pytest.raises(DataError, match="corrupt shard"):
        reader(["id"])
    assert list(iter_shard(shard, check=None))  # a shard no run recorded: read as it is
