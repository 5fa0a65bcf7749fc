"""The shard store: sizes, atomic commits, reading files/folders/globs, clear errors.

Run: python -m pytest tests/store -q
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from trajsynth.core import DataError, InputNotFoundError, to_batch
from trajsynth.stages.plumbing.synthetic import synthetic_row
from trajsynth.store import (
    RunManifest,
    ShardWriter,
    StageState,
    count_rows,
    iter_batches,
    list_shards,
    read_table,
)


def rows(n: int, start: int = 0):
    return [synthetic_row(i, seed=1) for i in range(start, start + n)]


def test_writer_cuts_shards_of_the_configured_size(tmp_path: Path) -> None:
    committed = []
    with ShardWriter(tmp_path, shard_rows=40, on_commit=committed.append) as w:
        w.write(to_batch(rows(25)))
        w.write(to_batch(rows(60, 25)))
        w.write(rows(15, 85))  # lists of records are accepted too
    assert [s.rows for s in w.shards] == [40, 40, 20]
    assert [s.file for s in committed] == [
        "part-00000.parquet",
        "part-00001.parquet",
        "part-00002.parquet",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == [s.file for s in committed]
    ids = read_table(tmp_path, columns=["id"]).column("id").to_pylist()
    assert ids == [r.id for r in rows(100)]
    assert count_rows(tmp_path) == 100


def test_fingerprint_is_content_hash(tmp_path: Path) -> None:
    a = ShardWriter(tmp_path / "a", shard_rows=10)
    b = ShardWriter(tmp_path / "b", shard_rows=10)
    batch = to_batch(rows(10))
    a.write(batch)
    b.write(batch)
    assert a.shards[0].fingerprint == b.shards[0].fingerprint
    c = ShardWriter(tmp_path / "c", shard_rows=10)
    c.write(to_batch(rows(10, 1)))
    assert c.shards[0].fingerprint != a.shards[0].fingerprint


def test_leftover_temp_files_are_removed_and_never_read(tmp_path: Path) -> None:
    (tmp_path / ".tmp-123-part-00000.parquet").write_bytes(b"half a shard")
    w = ShardWriter(tmp_path, shard_rows=5)
    assert not list(tmp_path.glob(".tmp-*"))
    w.write(to_batch(rows(5)))
    assert count_rows(tmp_path) == 5


def test_reader_projection_and_streaming(tmp_path: Path) -> None:
    with ShardWriter(tmp_path, shard_rows=30) as w:
        w.write(to_batch(rows(70)))
    batches = list(iter_batches(tmp_path, columns=["id", "success"], batch_size=16))
    assert all(b.schema.names == ["id", "success"] for b in batches)
    assert sum(b.num_rows for b in batches) == 70
    assert max(b.num_rows for b in batches) <= 16


def test_file_folder_and_glob_inputs(tmp_path: Path) -> None:
    for name in ("x", "y"):
        with ShardWriter(tmp_path / name, shard_rows=10) as w:
            w.write(to_batch(rows(15)))
    assert len(list_shards(tmp_path / "x")) == 2
    assert len(list_shards(tmp_path / "x" / "part-00001.parquet")) == 1
    assert count_rows(str(tmp_path / "*" / "part-*.parquet")) == 30
    assert count_rows([tmp_path / "x", tmp_path / "y"]) == 30


def test_missing_and_empty_inputs_are_user_errors(tmp_path: Path) -> None:
    with pytest.raises(InputNotFoundError, match="does not exist"):
        list_shards(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputNotFoundError, match="holds no Parquet"):
        list_shards(tmp_path / "empty")
    with pytest.raises(InputNotFoundError, match="no Parquet shards match"):
        list_shards(str(tmp_path / "*.parquet"))


def test_corrupt_and_truncated_files_name_the_file(tmp_path: Path) -> None:
    with ShardWriter(tmp_path / "ok", shard_rows=50) as w:
        w.write(to_batch(rows(50)))
    good = (tmp_path / "ok" / "part-00000.parquet").read_bytes()
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "part-00000.parquet").write_bytes(good[: len(good) // 2])  # truncated
    with pytest.raises(DataError, match=r"part-00000\.parquet"):
        read_table(bad)
    (bad / "part-00000.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(DataError, match=r"bad/part-00000\.parquet.*not a readable Parquet"):
        list(iter_batches(bad))


def test_run_folder_hint(tmp_path: Path) -> None:
    RunManifest(pipeline="p", stages={"raw": StageState(uses="synthetic")}).save(
        tmp_path / "manifest.json"
    )
    (tmp_path / "raw").mkdir()
    with pytest.raises(InputNotFoundError, match="run folder") as info:
        list_shards(tmp_path)
    assert "raw" in (info.value.hint or "")


def test_manifest_save_is_atomic_and_round_trips(tmp_path: Path) -> None:
    m = RunManifest(pipeline="p", stages={"a": StageState(uses="sample", offset=3)})
    m.save(tmp_path / "manifest.json")
    assert not list(tmp_path.glob(".manifest.json.tmp*"))
    assert RunManifest.load(tmp_path / "manifest.json").stages["a"].offset == 3
    (tmp_path / "manifest.json").write_text("{broken")
    with pytest.raises(DataError, match="unreadable run manifest"):
        RunManifest.load(tmp_path / "manifest.json")


def test_conform_fills_missing_columns_and_rejects_unknown() -> None:
    from trajsynth.core.batch import conform

    full = to_batch(rows(3))
    partial = pa.RecordBatch.from_arrays(
        [full.column("id"), full.column("task_id")], names=["id", "task_id"]
    )
    table = conform(partial)
    assert table.num_columns == full.num_columns and table.column("goal").null_count == 3
    with pytest.raises(DataError, match="not in the schema"):
        conform(pa.table({"id": ["a"], "bogus": [1]}))
